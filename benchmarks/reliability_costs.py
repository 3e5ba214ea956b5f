"""Costs of the reliability work on one device: the output check (inf/NaN counted on the
device) against copying the grid back, and KernelStack.w_projection with the derived
default support cap against the old fixed cap of 72.  Medians of --repeats runs, min-max beside.

    python3 benchmarks/reliability_costs.py --device pocl
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
from clgrid.operators.checks import count_nonfinite  # noqa: E402
from clgrid.device.runtime import get_queue  # noqa: E402


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return f"median {np.median(times) * 1e3:9.2f} ms (min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--grid-size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    queue = get_queue(args.device)
    n = args.grid_size
    host = np.zeros((1, n, n), np.complex64)
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host)
    count_nonfinite(queue, buffer, 2 * n * n, np.float32)   # build once
    print(f"{queue.device.name.strip()}, {n}^2 single-precision grid:")
    print(f"  check (count_nonfinite)  {timed(lambda: count_nonfinite(queue, buffer, 2 * n * n, np.float32), args.repeats)}")
    print(f"  copy back (enqueue_copy) {timed(lambda: cl.enqueue_copy(queue, host, buffer).wait(), args.repeats)}")
    print("KernelStack.w_projection(grid_size=2048, cell_size=4.8e-6, w_max=2000, num_planes=32):")
    for oversample in (8, 16):
        for cap in (None, 72):
            build = lambda: clgrid.KernelStack.w_projection(grid_size=2048, cell_size=4.8e-6, w_max=2000.0,  # noqa: E731
                                                            num_planes=32, oversample=oversample, max_support=cap)
            label = "derived cap" if cap is None else "max_support=72"
            print(f"  oversample {oversample:2d}, {label:15s} {timed(build, 3)}, supports {build().supports[[0, -1]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
