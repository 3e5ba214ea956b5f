"""The floor of one `clgrid.dask.vis2dirty` call (issue 28): what a reused call costs
beyond the imaging itself, with one or two workers on this host, against the same
operator in one process.

Measured on the client's wall clock, medians of ``--repeats`` after a warm-up, each
piece on its own:

- ``one_process_s``: a kept `clgrid.WGridder` in this process (the imaging itself).
- ``dask_s``: `clgrid.dask.vis2dirty` reused (kept selections and operators), the data
  persisted on the workers; ``breakdown``: its task stream as benchmarks/dask_scaling.py
  reads it.
- ``round_trip_s``: one empty task through the scheduler (graph sent, task run, result
  back): the least any call costs.
- ``image_return_s``: a task that returns an image the worker already holds (npix^2 of
  the precision's float), through Dask's socket; ``image_shared_s``: the same through
  `clgrid.dask.delivery` (/dev/shm).
- ``image_sum_s``: two images added on a worker (the tree's one addition).
- ``pickle_s``: pickling and unpickling one image in this process (protocol 5).
- ``values_s``: one chunk's weighted values picked at its selection (`values_at`, all
  samples), the per-call gather before a slab's imaging.
- ``exchange`` (two workers): ``--exchange-mb`` of values made on one worker and read
  on the other, through Dask's socket, a fresh file in /dev/shm, a kept one
  (`clgrid.dask.exchange`), against made and read on one worker.

The workers' OpenCL runtime and this process's use the same threads (all cores).

    python benchmarks/dask_floor.py --npix 256 1024 --workers 1 2      # here: ~1 minute
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time

import numpy as np

import clgrid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_time  # noqa: E402


def _held(npix: int):
    """On a worker: an image kept in the worker's memory (the same one every call)."""
    import distributed

    worker = distributed.get_worker()
    key = f"clgrid-floor-{npix}"
    found = getattr(worker, "_clgrid_floor", {})
    worker._clgrid_floor = found
    if key not in found:
        found[key] = np.random.default_rng(0).standard_normal((npix, npix)).astype(np.float32)
    return found[key]


def held_image(npix: int):
    return _held(npix)


def held_sum(npix: int):
    a = _held(npix)
    return a + a


def held_delivered(npix: int, box):
    from clgrid.dask.delivery import deliver

    return deliver(_held(npix), box, 0)


def nothing():
    return None


def made(n: int):
    return np.ones(n, np.complex64)


def made_shared(n: int, path: str):
    from clgrid.dask import exchange

    return exchange.write_into(path, 0, (n,), np.complex64, lambda out: out.fill(1))


def used(a):
    from clgrid.dask import exchange

    return float(exchange.read(a)[::4096].real.sum())


def exchange_costs(client, megabytes: int, repeats: int) -> dict:
    """``megabytes`` of complex64 values made on worker 0 and read on worker 1: through
    Dask's socket, through a fresh file in /dev/shm each time, through a kept one
    (`clgrid.dask.exchange`); and made and read on one worker (no move), for scale."""
    import uuid

    from clgrid.dask import exchange

    workers = sorted(client.nthreads())
    n = megabytes * 2 ** 20 // 8
    kept = exchange.prefix(client, workers, uuid.uuid4().hex)
    if kept is None:
        return {"megabytes": megabytes, "shared_memory": False}

    def moved(make, args, there):
        a = client.submit(make, *args, workers=[workers[0]], pure=False)
        return client.submit(used, a, workers=[there], pure=False).result()

    fresh = iter(range(10 ** 6))
    out = {"megabytes": megabytes, "shared_memory": True,
           "same_worker_s": median_time(lambda: moved(made, (n,), workers[0]), repeats),
           "socket_s": median_time(lambda: moved(made, (n,), workers[1]), repeats),
           "fresh_file_s": median_time(lambda: moved(made_shared, (n, exchange.place(kept, f"f{next(fresh)}")),
                                                workers[1]), repeats),
           "kept_file_s": median_time(lambda: moved(made_shared, (n, exchange.place(kept, "k")), workers[1]), repeats)}
    exchange.forget()
    client.run(exchange.release)
    return out


def one_size(client, n: int, npix: int, data: dict, a) -> dict:
    import dask
    import dask.array as da
    from distributed import get_task_stream, wait

    import clgrid.dask as cd
    from clgrid.dask.delivery import collect, open_box
    from dask_scaling import breakdown, transfer_logs, transferred

    uvw, freq, vis = data["uvw"], data["freq"], data["vis"]
    pix = 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq.max() / 299792458.0)
    common = dict(freq=freq, npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon,
                  do_wgridding=True)
    out = {"workers": n, "npix": npix, "num_vis": int(vis.size)}
    operator = clgrid.WGridder(uvw, freq, npix, npix, pix, pix, a.epsilon, True, device=a.device,
                               precision="single", nthreads=a.threads)
    out["one_process_s"] = median_time(lambda: operator.vis2dirty(vis), a.repeats)
    reference = operator.vis2dirty(vis)
    operator = None                  # (its device memory freed before the cluster runs)

    rows = -(-len(uvw) // n)
    duvw = client.persist(da.from_array(uvw, chunks=(rows, 3)))
    dvis = client.persist(da.from_array(vis, chunks=(rows, freq.size)))
    wait([duvw, dvis])
    runs = []

    def call():
        logs = client.run(transfer_logs)            # (outside the timed call)
        with get_task_stream(client) as stream:
            begin = time.time()
            image = cd.vis2dirty(uvw=duvw, vis=dvis, nthreads=a.threads, slab_samples=int(vis.size), **common)
            end = time.time()
        split = breakdown(stream.data, begin, end)
        split["moved"] = transferred(logs, client.run(transfer_logs))
        runs.append((end - begin, split))
        return image

    first = call()
    out["dask_s"] = median_time(call, a.repeats)
    runs.sort(key=lambda r: r[0])
    out["breakdown"] = runs[(len(runs) - 1) // 2][1]
    out["error_vs_one_process"] = float(np.linalg.norm(first - reference) / np.linalg.norm(reference))

    worker = sorted(client.nthreads())[0]

    def on_worker(fn, *args):
        return client.compute(dask.delayed(fn, pure=False)(*args), workers=[worker]).result()

    out["round_trip_s"] = median_time(lambda: on_worker(nothing), a.repeats)
    out["image_return_s"] = median_time(lambda: on_worker(held_image, npix), a.repeats)
    out["image_sum_s"] = median_time(lambda: on_worker(held_sum, npix), a.repeats) - out["image_return_s"]

    def shared():
        box = open_box((npix, npix), np.float32)
        return collect(box, [on_worker(held_delivered, npix, box)], [0])

    out["image_shared_s"] = median_time(shared, a.repeats)
    image = reference.astype(np.float32)
    out["pickle_s"] = median_time(lambda: pickle.loads(pickle.dumps(image, protocol=5)), a.repeats)
    from clgrid.dask.slabs import values_at

    flat = np.arange(vis.size, dtype=np.int32)
    out["values_s"] = median_time(lambda: values_at(vis, None, flat, a.threads), a.repeats)
    client.run(cd.clear_cache)
    cd.clear_cache()
    return out


def main(argv=None):
    from distributed import Client, LocalCluster

    from dask_scaling import observation

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--nchan", type=int, default=4)
    p.add_argument("--npix", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--workers", type=int, nargs="+", default=[1])
    p.add_argument("--epsilon", type=float, default=1e-4)
    p.add_argument("--device", default="pocl")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--exchange-mb", type=int, default=256, help="values moved between two workers (0: not)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    uvw, freq, vis = observation(a.rows, a.nchan, 1.3e9, 1.5e9)
    data = {"uvw": uvw, "freq": freq, "vis": vis}
    res = {"command": " ".join(["python", "benchmarks/dask_floor.py"] + (argv or sys.argv[1:])),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": a.device, "runs": []}
    for n in a.workers:
        env = {"CLGRID_DEVICE": a.device}
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, env=env,
                          memory_limit=0) as cluster, Client(cluster) as client:
            for npix in a.npix:
                row = one_size(client, n, npix, data, a)
                res["runs"].append(row)
                b = row["breakdown"]
                print(f"{n} worker(s), {npix}^2, {row['num_vis']:,} vis: one process {row['one_process_s']:.4f} s, "
                      f"dask {row['dask_s']:.4f} s (start {b['startup_s']:.4f} prepare {b['prepare_s']:.4f} "
                      f"images {b['images_s']:.4f} tail {b['reduction_tail_s']:.4f} gather {b['gather_s']:.4f}; "
                      f"transfers {b['transfer_s']:.4f} s, {b['moved']['between_workers_bytes'] / 1e6:.3f} MB between "
                      f"workers, {b['moved']['to_client_bytes'] / 1e6:.3f} MB to the client); "
                      f"round trip {row['round_trip_s']:.4f}, image return {row['image_return_s']:.4f} "
                      f"(shared {row['image_shared_s']:.4f}), sum {row['image_sum_s']:.4f}, pickle "
                      f"{row['pickle_s']:.4f}, values {row['values_s']:.4f}; error {row['error_vs_one_process']:.1e}",
                      flush=True)
            if n > 1 and a.exchange_mb:
                res["exchange"] = exchange_costs(client, a.exchange_mb, a.repeats)
                print(f"{a.exchange_mb} MB between two workers: {res['exchange']}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
