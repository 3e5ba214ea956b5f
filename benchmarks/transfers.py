"""Host-device copy rates that bound a whole call with host arrays: pageable numpy arrays,
pinned (ALLOC_HOST_PTR, mapped) memory, and a host copy between them on several threads.

    python3 benchmarks/transfers.py --device nvidia --megabytes 128
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from clgrid.device.runtime import get_queue  # noqa: E402


def rate(fn, nbytes, repeats=7):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return {"median_ms": 1e3 * float(np.median(times)), "GB_per_s": nbytes / float(np.median(times)) / 1e9}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--device", default=None)
    p.add_argument("--megabytes", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    args = p.parse_args(argv)
    queue = get_queue(args.device)
    ctx = queue.context
    n = args.megabytes * 2 ** 20
    host = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
    back = np.empty_like(host)
    dev = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, n)
    pinned_buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, n)
    pinned, _ = cl.enqueue_map_buffer(queue, pinned_buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (n,), np.uint8)
    pinned[:] = host
    pool = ThreadPoolExecutor(args.threads)

    def threaded_copy(dst, src):
        bounds = np.linspace(0, n, args.threads + 1).astype(int)
        list(pool.map(lambda i: np.copyto(dst[bounds[i]:bounds[i + 1]], src[bounds[i]:bounds[i + 1]]),
                      range(args.threads)))

    out = {"device": queue.device.name, "megabytes": args.megabytes, "threads": args.threads,
           "h2d_pageable": rate(lambda: cl.enqueue_copy(queue, dev, host).wait(), n),
           "d2h_pageable": rate(lambda: cl.enqueue_copy(queue, back, dev).wait(), n),
           "d2h_pageable_fresh_array": rate(lambda: cl.enqueue_copy(queue, np.empty_like(host), dev).wait(), n),
           "h2d_pinned": rate(lambda: cl.enqueue_copy(queue, dev, pinned).wait(), n),
           "d2h_pinned": rate(lambda: cl.enqueue_copy(queue, pinned, dev).wait(), n),
           "host_copy_1_thread": rate(lambda: np.copyto(back, pinned), n),
           "host_copy_threads": rate(lambda: threaded_copy(back, pinned), n),
           "np_empty_and_threaded_copy": rate(lambda: threaded_copy(np.empty_like(host), pinned), n)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
