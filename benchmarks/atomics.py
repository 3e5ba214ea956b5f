"""Float atomic paths on one device: the contention micro-benchmark and the atomic gridder.

    python3 benchmarks/atomics.py --device nvidia --out DIR [--quick]

Part 1: 16 M adds spread round-robin over 1 M / 4096 / 64 addresses, each path,
global only and "local memory then one flush" (where the addresses fit in local
memory); sums checked exactly.  Part 2: the atomic gridder with each path on MeerKAT
tracks, median kernel time, GGPA/s and error against the float64 reference.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clgrid.device import atomics  # noqa: E402

from clgrid.tools import bench  # noqa: E402

from clgrid.device import runtime  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    queue = runtime.get_queue(args.device)
    facts = runtime.device_facts(queue.device)
    adds = 1 << (18 if args.quick else 24)
    rows, results = [], {"device": facts.name, "contention": [], "gridder": []}
    for addresses in (1 << 20, 4096, 64):
        for path in atomics.ATOMIC_PATHS:
            for local in (False, True):
                if local and addresses * 4 > facts.local_memory // 2:
                    continue
                rate, err, used = atomics.contention_benchmark(queue, path, adds, addresses, local=local)
                results["contention"].append(dict(addresses=addresses, path=path, used=used, local=local,
                                                  adds=adds, adds_per_s=rate, max_error=err))
                rows.append(f"contention {addresses:>8d} addr  {path:5s}{'+local' if local else '      '} "
                            f"(used {used:4s}) {rate / 1e9:8.3f} G adds/s  max error {err:g}")
    sizes = [(20000, 512, 3)] if args.quick else [(4_000_000, 4096, 3), (4_000_000, 4096, 15)]
    for npol in (1, 4):
        for num_vis, grid, support in sizes:
            work = bench.make_workload("tracks", num_vis // npol, grid, support, npol=npol)
            for path in atomics.ATOMIC_PATHS:
                r = bench.run_benchmark(work, device=queue, tuning={"atomic": path}, repeats=5)
                results["gridder"].append(dict(r.__dict__))
                rows.append(f"gridder {path:5s} used {r.tuning.get('atomic', '?'):5s} " + r.row())
    Path(args.out, "atomics.json").write_text(json.dumps(results, indent=1, default=str))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
