"""Float atomic paths side by side in the atomic gridder, in interleaved rounds (on a shared,
noisy machine a path timed after another meets the same load), median of the rounds.

    python3 benchmarks/atomic_paths_ab.py --device intel --tuning wg_u=8 --tuning wg_v=2 \
        --tuning groups_per_cu=16 --paths cas ext --rounds 7
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clgrid.tools import bench  # noqa: E402
from clgrid.tools.cli import _tuning_overrides  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default=None)
    ap.add_argument("--tuning", action="append", metavar="KEY=VALUE", help="fixed parameters (repeatable)")
    ap.add_argument("--paths", nargs="+", default=["cas", "ext"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--num-vis", type=int, default=100000)
    ap.add_argument("--grid-size", type=int, default=1024)
    ap.add_argument("--support", type=int, default=7)
    ap.add_argument("--npol", type=int, default=1)
    args = ap.parse_args()
    fixed = _tuning_overrides(args.tuning)
    work = bench.make_workload("tracks", args.num_vis, args.grid_size, args.support, npol=args.npol)
    times = {path: [] for path in args.paths}
    for _ in range(args.rounds):
        for path in args.paths:
            run = bench.run_benchmark(work, device=args.device, tuning={**fixed, "atomic": path}, repeats=5)
            if run.failed:
                sys.exit(f"{path}: {run.failed}")
            assert run.tuning["atomic"] == path, f"{path} fell back to {run.tuning['atomic']}"
            times[path].append(run.median_s)
    print(f"{run.device}, {fixed}, {work.describe()}, {args.rounds} rounds of a median of 5, ms:")
    for path, t in times.items():
        t = np.array(t) * 1e3
        print(f"  {path:5s} median {np.median(t):8.2f}  min {t.min():8.2f}  max {t.max():8.2f}  "
              f"rounds {' '.join(f'{x:.1f}' for x in t)}")


if __name__ == "__main__":
    main()
