"""The host's sum of two images, the tail of a device list's `vis2dirty` (and of the Dask
facets' sums): ``dst += src`` with the count of non-finite sums
(`clgrid.device.host_threads.add_counting`), on several thread counts, in two passes
(the add, then the count's sum) or fused block by block (each block counted while it is
in cache), against the add alone.  Medians of ``--repeats`` after a warm-up.

    python3 benchmarks/host_add.py --npix 8192 --threads 16 32 --device "nvidia #0" --other-device "nvidia #1"

``--device`` adds the device's side: the image's copies to and from that device (memory
pinned for its context or, ``--other-device``, for another device's; pageable; through
the staging), and its copy down followed by the host's sum.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from clgrid.device.host_threads import add_counting, in_slices, not_finite

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_time  # noqa: E402


def fused(dst, src, parts: int, block: int) -> int:
    counts = []

    def add(r):
        found = 0
        for a in range(r.start, r.stop, block):
            out = dst[a:min(a + block, r.stop)]
            np.add(out, src[a:a + out.size], out=out)
            found += not_finite(out)
        counts.append(found)

    in_slices(parts, dst.size, add)
    return sum(counts)


def device_runs(a, dst, src) -> dict:
    """The image's copies between the host and ``a.device`` (pinned for its own context,
    for ``a.other_device``'s, pageable, through the staging), and the host's sum after
    its copy down."""
    import pyopencl as cl

    from clgrid.device import transfer
    from clgrid.device.runtime import get_queue, select_device

    def pinned(staging):
        transfer.host_empty(src.shape, src.dtype, staging)        # (the second request is pinned)
        block = transfer.host_empty(src.shape, src.dtype, staging)
        assert transfer._pinned_block(block) is not None
        return block

    queue = get_queue(select_device(a.device))
    staging = transfer.Staging(queue)
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=src)
    own, pageable = pinned(staging), np.ones_like(src)
    runs = {"down into its own pinned block": lambda: cl.enqueue_copy(queue, own, buffer).wait(),
            "up from its own pinned block": lambda: cl.enqueue_copy(queue, buffer, own).wait(),
            "down into pageable memory": lambda: cl.enqueue_copy(queue, pageable, buffer).wait(),
            "up from pageable memory": lambda: cl.enqueue_copy(queue, buffer, pageable).wait(),
            "down through the staging": lambda: staging.download(buffer, pageable),
            "up through the staging": lambda: staging.upload(pageable, buffer)}
    if a.other_device:
        other = pinned(transfer.Staging(get_queue(select_device(a.other_device))))
        runs["down into a block pinned for the other device"] = lambda: cl.enqueue_copy(queue, other, buffer).wait()
        runs["up from a block pinned for the other device"] = lambda: cl.enqueue_copy(queue, buffer, other).wait()
    for t in a.threads:
        runs[f"down into its pinned block, then the sum, {t} threads"] = lambda t=t: (
            cl.enqueue_copy(queue, own, buffer).wait(), add_counting(dst, own, t))
    return runs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--npix", type=int, default=8192)
    p.add_argument("--threads", type=int, nargs="+", default=[16, os.cpu_count()])
    p.add_argument("--blocks", type=int, nargs="+", default=[1 << 16, 1 << 18, 1 << 20])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--device", default=None, help="also the copies between the host and this device")
    p.add_argument("--other-device", default=None, help="and memory pinned for this device's context")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    rng = np.random.default_rng(1)
    dst = rng.random(a.npix * a.npix, np.float32)
    src = rng.random(a.npix * a.npix, np.float32)
    runs = {}
    for t in a.threads:
        runs[f"two passes, {t} threads"] = lambda t=t: add_counting(dst, src, t)
        runs[f"add alone, {t} threads"] = lambda t=t: in_slices(t, dst.size, lambda r: np.add(dst[r], src[r],
                                                                                             out=dst[r]))
        for b in a.blocks:
            runs[f"fused blocks of {b}, {t} threads"] = lambda t=t, b=b: fused(dst, src, t, b)
    if a.device:
        runs.update(device_runs(a, dst, src))
    out = {"npix": a.npix, "bytes": int(dst.nbytes), "cpus": os.cpu_count(), "repeats": a.repeats, "runs": {}}
    for name, fn in runs.items():
        out["runs"][name] = median_time(fn, a.repeats)
        print(f"{name}: {1e3 * out['runs'][name]:.2f} ms", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
