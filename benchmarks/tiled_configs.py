"""Time given tiled configurations on the SKA-like set, side by side in one process.

    python3 benchmarks/tiled_configs.py --device nvidia --out DIR \\
        '[{"tile_u": 16, "tile_v": 16, "regsz": 8, "shmsz": 0}, {"tile_u": 16, "tile_v": 32, "regsz": 8}]'

Each configuration (tuning overrides on the device's table entry) is uploaded and run
once to warm up, then 5 times; the medians per stage (benchmarks/tiled.py's
`time_method`) and the throughput go to DIR/tiled_configs.json.  For a hypothesis
about a few parameters, where benchmarks/tiled.py's greedy sweep would not visit
the combination.  ``--scale`` keeps that fraction of the baselines.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clgrid.tools import benchsets  # noqa: E402

from clgrid.device import runtime  # noqa: E402
from tiled import failure, planned, time_method  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("configs", help="JSON list of tuning overrides")
    ap.add_argument("--device", default=None)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the SKA-like set's baselines")
    ap.add_argument("--grid-size", type=int, default=18000)
    ap.add_argument("--npol", type=int, default=1, help="polarisations (4 needs --grid-size 16000 on NVIDIA: 8 GiB buffers)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    queue = runtime.get_queue(args.device)
    workload = benchsets.ska_like(scale=args.scale, grid_size=args.grid_size, npol=args.npol)
    plan = planned(workload)
    results = []
    for overrides in json.loads(args.configs):
        try:
            gridder, result = time_method(workload, queue, "tiled", overrides, args.repeats)
            del gridder
        except Exception as exc:   # a combination the device refuses is reported, not fatal
            results.append(dict(tuning=overrides, failed=failure(exc)))
            print(overrides, results[-1]["failed"], flush=True)
            continue
        ms = {k: v * 1e3 for k, v in result["median_s"].items()}
        results.append(dict(tuning=overrides, median_ms=ms, gpa_per_s=plan.grid_point_additions / result["median_s"]["total"]))
        print(overrides, " ".join(f"{k} {v:.3f}" for k, v in ms.items()),
              f"ms; {results[-1]['gpa_per_s'] / 1e9:.1f} GGPA/s", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "tiled_configs.json").write_text(json.dumps(
        dict(device=queue.device.name, scale=args.scale, npol=args.npol, grid_size=args.grid_size,
             visibilities=plan.num_kept, results=results), indent=1))


if __name__ == "__main__":
    main()
