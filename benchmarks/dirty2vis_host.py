"""The host passes of a reused `clgrid.dask.dirty2vis` (planes split, shared memory), alone:
a chunk's assembly from its slabs' shares (`clgrid.dask.slabs.assemble`) over whole thread
ranges (``--blocks`` 0) against blocks of several sizes and against another revision's
(``--baseline``: 6ffb5c4 passed over the whole chunk again to count its non-finite values),
and the client's check of the image before publishing it (`count_not_finite`, then
`exchange.publish`: two passes) against the check made while it is copied
(``publish(refuse=...)``).  Medians of ``--repeats`` after a warm-up; every variant's bits
checked against the whole-range one.

    python3 benchmarks/dirty2vis_host.py --threads 16 --processes 1 2 --baseline 6ffb5c4 --json x.json

The chunk: ``--samples`` complex64 visibilities (the benchmark's: 2 M rows x 16 channels),
the first slab taking it whole, a second ``--sparse`` of its samples at random ascending
picks; without weights (the benchmark's call) and with float32 weights.  ``--processes 2``
runs each variant in two processes at once (two workers assembling their chunks together,
as in the benchmark's call).  The image: ``--npix``² float32 into a file in /dev/shm.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np

from clgrid.dask import exchange, slabs
from clgrid.device.host_threads import count_not_finite


def chunk(samples: int, sparse: float, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    shape = (samples // 16, 16)
    n = shape[0] * shape[1]
    dense = (rng.standard_normal(n, np.float32) + 1j * rng.standard_normal(n, np.float32)).astype(np.complex64)
    picks = np.sort(rng.choice(n, int(n * sparse), replace=False)).astype(np.intp)
    share = (rng.standard_normal(len(picks)) + 1j * rng.standard_normal(len(picks))).astype(np.complex64)
    return shape, [None, picks], [dense, share], rng.uniform(0.5, 2.0, shape).astype(np.float32)


def baseline_assemble(revision: str):
    """`clgrid.dask.slabs.assemble` as it was at the git ``revision`` (loaded beside this one)."""
    source = subprocess.run(["git", "show", f"{revision}:clgrid/dask/slabs.py"], capture_output=True, text=True,
                            check=True).stdout
    path = os.path.join(tempfile.mkdtemp(), "slabs_baseline.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("clgrid.dask._slabs_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.assemble


def assembly_runs(a, shape, taken, shares, weights) -> dict:
    runs = {}
    before = baseline_assemble(a.baseline) if a.baseline else None
    for weighted in (False, True):
        w = weights if weighted else None
        for t in a.threads:
            if before is not None:
                runs[f"assemble, {'weights' if weighted else 'no weights'}, {t} threads, as at {a.baseline}"] = (
                    lambda t=t, w=w: before(shape, taken, shares, w, None, np.complex64, t), (weighted, t))
            for b in a.blocks:
                name = (f"assemble, {'weights' if weighted else 'no weights'}, {t} threads, "
                        + ("whole ranges" if b == 0 else f"blocks of {b} samples ({b * 8 >> 10} KiB)"))
                runs[name] = (lambda t=t, b=b, w=w: slabs.assemble(shape, taken, shares, w, None, np.complex64, t,
                                                                   block=b), (weighted, t))
    return runs


def timed(fn, repeats: int, barrier=None) -> tuple:
    result = fn()                                     # warm-up (and the bits)
    times = []
    for _ in range(repeats):
        if barrier is not None:
            barrier.wait()
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        del out
    return float(np.median(times)), result


def _worker(a, seed, barrier, results):
    shape, taken, shares, weights = chunk(a.samples, a.sparse, seed)
    medians, reference = {}, {}
    for name, (fn, key) in assembly_runs(a, shape, taken, shares, weights).items():
        barrier.wait()
        medians[name], out = timed(fn, a.repeats, barrier)
        if key not in reference:
            reference[key] = out                       # the baseline's run, or the whole ranges', comes first
        elif not np.array_equal(out.view(np.uint64), reference[key].view(np.uint64)):
            raise SystemExit(f"{name}: other bits than the whole ranges'")
    results.put(medians)


def assembly(a, processes: int) -> dict:
    if 0 not in a.blocks:
        a.blocks = [0] + a.blocks
    else:
        a.blocks = [0] + [b for b in a.blocks if b]
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_worker, args=(a, seed, barrier, results)) for seed in range(processes)]
    for w in workers:
        w.start()
    medians = [results.get() for _ in workers]
    for w in workers:
        w.join()
    return {name: max(m[name] for m in medians) for name in medians[0]}       # the slower process's


def publishing(a) -> dict:
    rng = np.random.default_rng(7)
    image = rng.standard_normal((a.npix, a.npix), np.float32)
    prefix = os.path.join(exchange.SHARED_MEMORY, f"clgrid-bench-{os.getpid()}")
    out = {}
    try:
        for t in a.threads:
            def two_passes(t=t):
                if count_not_finite(image, exchange.copy_threads(image.nbytes, t)):
                    raise ValueError("dirty has NaN or infinite entries")
                return exchange.publish(prefix, "d", image, t)

            out[f"publish, {t} threads, counted first (two passes)"] = timed(two_passes, a.repeats)[0]
            out[f"publish, {t} threads, not counted (the copy alone)"] = timed(
                lambda t=t: exchange.publish(prefix, "d", image, t), a.repeats)[0]
            for b in a.image_blocks:
                saved, exchange.CHECK_BLOCK = exchange.CHECK_BLOCK, b
                what = f"blocks of {b >> 10} KiB" if b else "each thread's share at once"
                try:
                    out[f"publish, {t} threads, counted as copied, {what}"] = timed(
                        lambda t=t: exchange.publish(prefix, "d", image, t, refuse="bad"), a.repeats)[0]
                finally:
                    exchange.CHECK_BLOCK = saved
            with exchange.taken(exchange.publish(prefix, "d", image, t, refuse="bad")) as back:
                assert np.array_equal(back, image)
    finally:
        exchange.remove(prefix)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=32 << 20)
    p.add_argument("--sparse", type=float, default=0.02)
    p.add_argument("--threads", type=int, nargs="+", default=[16])
    p.add_argument("--blocks", type=int, nargs="+", default=[0, 1 << 15, 1 << 16, 1 << 17, 1 << 19],
                   help="samples per block (0: whole ranges, the first run, against which the bits are checked)")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    p.add_argument("--npix", type=int, default=8192)
    p.add_argument("--image-blocks", type=int, nargs="+", default=[0, 256 << 10, 512 << 10, 1 << 20, 4 << 20],
                   help="bytes per block of the image's check (0: each thread's share at once)")
    p.add_argument("--baseline", default=None, help="a git revision whose assemble runs first, for comparison")
    p.add_argument("--parts", nargs="+", default=["assembly", "publish"], choices=("assembly", "publish"))
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = None
    out = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "host": platform.node(), "cpus": os.cpu_count(),
           "cpu": platform.processor(), "samples": a.samples, "sparse": a.sparse, "npix": a.npix,
           "repeats": a.repeats, "runs": {}}
    for n in a.processes if "assembly" in a.parts else []:
        for name, seconds in assembly(a, n).items():
            key = f"{name}, {n} process{'es' if n > 1 else ''} at once"
            out["runs"][key] = seconds
            print(f"{key}: {1e3 * seconds:.1f} ms", flush=True)
    if "publish" in a.parts and os.path.isdir(exchange.SHARED_MEMORY):
        for name, seconds in publishing(a).items():
            out["runs"][name] = seconds
            print(f"{name}: {1e3 * seconds:.1f} ms", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
