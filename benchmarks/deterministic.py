"""The cost of ``Gridder(..., deterministic=True)``: every gridding method with float
atomics and in deterministic (64-bit fixed-point) mode, same workload, same device.

Each row: median device time of --repeats runs after a warm-up (kernels only, the
deterministic conversion to float included), min-max beside it, the error against the
float64 reference on a subset, and whether two deterministic grids of the whole
workload were bit-identical (and two float-atomic ones, for contrast).

    python3 benchmarks/deterministic.py --quick                     # PoCL, a few minutes on 2 cores
    python3 benchmarks/deterministic.py --device nvidia --out DIR   # H100: a few minutes
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clgrid import Gridder  # noqa: E402

from clgrid.tools import bench  # noqa: E402
from clgrid.strategies import GRIDDING_METHODS, spelling  # noqa: E402


def identical_runs(workload, device, method, precision, deterministic) -> bool:
    """Whether two gridding runs of the whole workload give the same bits."""
    gridder = Gridder(workload.grid_size, workload.cell_size, workload.kernels, **spelling("grid", method), device=device,
                      precision=precision, on_dropped="ignore", deterministic=deterministic)
    first = gridder.grid(workload.uvw, workload.vis)
    return bool(np.array_equal(first.view(np.uint8), gridder.grid(workload.uvw, workload.vis).view(np.uint8)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--precision", action="append", choices=["single", "double"])
    parser.add_argument("--method", action="append", choices=list(GRIDDING_METHODS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="folder for deterministic.json")
    args = parser.parse_args()
    num_vis, grid_size, support = (100_000, 1024, 7) if args.quick else (4_000_000, 4096, 15)
    workload = bench.make_workload("tracks", num_vis, grid_size, support, npol=1)
    methods = args.method or [m for m in GRIDDING_METHODS if m != "fpga"]   # fpga: no atomics, no change
    rows = []
    print(f"{'method':22s} {'prec':6s} {'mode':13s} {'median ms':>10s} {'min-max ms':>17s} {'rel.err':>9s} "
          f"{'same bits':>9s} {'cost':>6s}", flush=True)
    for precision in args.precision or ["single", "double"]:
        for method in methods:
            base = None
            for deterministic in (False, True):
                r = bench.run_benchmark(workload, device=args.device, method=method, precision=precision,
                                        repeats=args.repeats, deterministic=deterministic)
                same = identical_runs(workload, args.device, method, precision, deterministic) \
                    if not r.failed else None
                base = r.median_s if not deterministic else base
                cost = r.median_s / base if deterministic and base else 1.0
                rows.append(dict(asdict(r), deterministic=deterministic, identical=same, cost=cost))
                mode = "deterministic" if deterministic else "float atomics"
                if r.failed:
                    print(f"{method:22s} {precision:6s} {mode:13s} FAILED: {r.failed}", flush=True)
                    continue
                print(f"{method:22s} {precision:6s} {mode:13s} {r.median_s * 1e3:10.3f} "
                      f"{r.min_s * 1e3:8.3f}-{r.max_s * 1e3:8.3f} {r.error:9.1e} {str(same):>9s} {cost:6.2f}",
                      flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "deterministic.json").write_text(json.dumps(
            {"environment": bench.environment(), "workload": workload.describe(), "rows": rows},
            indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
