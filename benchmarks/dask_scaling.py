"""Strong scaling of `clgrid.dask.vis2dirty` on one machine: a `LocalCluster` of 1, 2, 4, 8
workers, each with a CPU OpenCL device (PoCL) limited to cores / workers threads, on one
MeerKAT-track set; `clgrid.vis2dirty` in one process and ducc0's `vis2dirty` on every
core in the same run.

What is timed (wall clock on the client, median of --repeats after a warm-up):
- ``ducc0``: ducc0.wgridder.vis2dirty with nthreads = cores.
- ``single_call``: clgrid.vis2dirty in this process (all cores: PoCL's threads and the
  host FFT's), operator built in the call; ``single_reused``: a kept `WGridder`'s call.
- per worker count, ``call``: `clgrid.dask.vis2dirty` with ``keep_operators=0`` (every
  task's operator built in it, as `clgrid.vis2dirty` does), and ``reused``: the operators
  kept from the warm-up (a major cycle's cost).  The data are persisted on the workers
  first (as a reader on the workers would leave them; that load is timed apart) in one
  chunk of rows (--chunks-per-worker per worker) and channels (--channel-chunks) per
  task.  ``--split`` is passed on: "auto" cuts the w-planes into one slab per worker
  (`clgrid.dask.slabs`), "rows" images each chunk on its own (the split before);
  ``--slab-samples`` too (default: the library's, as many as a chunk holds, which cuts
  the slabs with most samples into groups of chunks, each repeating their FFTs).  The
  workers start without Dask's MALLOC_TRIM_THRESHOLD_ (docs/user-guide/dask.md),
  unless ``--dask-malloc-trim``; ``--dask-profile off`` turns off the workers' statistical
  profiler (`distributed.worker.profile.enabled`: on by default, as in Dask).
The workers share the same cores whatever their number (1 x 16 threads ... 8 x 2), so the
ideal is T(n workers) = T(1 worker): ``speedup`` = T(1) / T(n) (1.0: nothing lost to the
split; above 1: the split's processes use the cores better than one process's threads).
``efficiency`` = T(1) / (n * T(n)), the textbook strong-scaling figure, is kept for
comparison with the earlier runs.  Where the time goes, from Dask's task
stream of the median run (`breakdown`): a timeline of the call (start-up; preparing:
the geometry, the slabs and each chunk's selection for them, until the first imaging
task starts; the imaging tasks; the additions left after the last one; the image back
to the client), with, summed over tasks, the preparing tasks' compute, the imaging
tasks' compute (all workers, and the busiest one), the additions' and the transfers
between workers; ``work_ratio`` is the imaging compute summed over workers relative to
the first row's: above 1, efficiency is lost to more work, not to waiting.  ``slabs``:
each worker count's slabs of planes, and the samples each takes.

    python benchmarks/dask_scaling.py --quick                        # here: under a minute
    python benchmarks/dask_scaling.py --json dask_scaling.json       # the 16-core machine
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import clgrid

SPEED_OF_LIGHT = 299792458.0


def median_time(fn, repeats: int) -> tuple:
    """(median seconds, the runs' seconds, the last result) of ``repeats`` calls after a warm-up."""
    fn()
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), times, out


def observation(rows: int, nchan: int, f_lo: float, f_hi: float):
    """MeerKAT tracks (benchmarks/wgridding.py's: 64 dishes, 8 h) in metres, ``nchan``
    channels from ``f_lo`` to ``f_hi``, Gaussian complex64 visibilities."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from wgridding import tracks

    uvw, _ = tracks(rows, f_hi)
    freq = np.linspace(f_lo, f_hi, nchan)
    rng = np.random.default_rng(1)
    vis = (rng.standard_normal((len(uvw), nchan), np.float32)
           + 1j * rng.standard_normal((len(uvw), nchan), np.float32)).astype(np.complex64)
    return uvw, freq, vis


# task names as dask.utils.key_split gives them (no leading underscore)
IMAGING = ("image_chunk", "image_slab", "vis_chunk", "vis_slab")        # dirty2vis's too
REDUCING = ("add_images", "sum_facet", "chunk_assemble")
PREPARING = ("chunk_extent", "geometry_of", "chunk_counts", "chunk_selection", "chunk_parts", "slab_points",
             "chunk_values", "getitem")


def breakdown(stream: list, start: float, stop: float) -> dict:
    """Where one call's wall time went, from Dask's task stream (worker clocks: the same
    host's as ``start`` / ``stop``).  The wall time is cut into a timeline: ``startup_s``
    (the call until the first task starts: workers asked, graph built and sent),
    ``prepare_s`` (first task start to the first imaging task's start: the geometry,
    slabs and selections, and moving them), ``images_s`` (first imaging start to last
    imaging end), ``reduction_tail_s`` (last imaging end to last task end: the additions
    and transfers left then) and ``gather_s`` (the image back to the client).  Beside it,
    summed over tasks: the preparing tasks' compute, the imaging tasks' compute (all
    workers, and the busiest worker: ``images_s`` minus that is idle or imbalance; and
    each task's, longest first), the additions' compute (the tree's `add_images`, or the
    facets' `sum_facet` where the workers share memory), the transfers between workers,
    and how many tasks of each name ran."""
    from dask.utils import key_split

    per_worker, tasks, add, prepare, transfer, names = {}, [], 0.0, 0.0, 0.0, {}
    first, image_start, image_stop, last = stop, stop, start, start
    for task in stream:
        name = key_split(task["key"]).split("-from-value")[0]        # (a task fused into a dask array's)
        names[name] = names.get(name, 0) + 1
        for part in task["startstops"]:
            seconds = part["stop"] - part["start"]
            last = max(last, part["stop"])
            if part["action"] == "transfer":
                transfer += seconds
                continue
            if part["action"] != "compute":
                continue
            first = min(first, part["start"])
            if name in IMAGING:
                per_worker[task["worker"]] = per_worker.get(task["worker"], 0.0) + seconds
                tasks.append(seconds)
                image_start, image_stop = min(image_start, part["start"]), max(image_stop, part["stop"])
            elif name in REDUCING:
                add += seconds
            elif name in PREPARING:
                prepare += seconds
    ordered = sorted(stream, key=lambda t: min(p["start"] for p in t["startstops"]))
    timeline = [{"task": key_split(t["key"]), "worker": t["worker"][-5:], "action": p["action"],
                 "start_s": round(p["start"] - start, 4), "stop_s": round(p["stop"] - start, 4)}
                for t in ordered for p in t["startstops"]][:40]
    return {"wall_s": stop - start, "startup_s": first - start, "prepare_s": image_start - first,
            "images_s": image_stop - image_start, "reduction_tail_s": last - image_stop, "gather_s": stop - last,
            "prepare_compute_s": prepare, "image_compute_s": sum(per_worker.values()),
            "image_compute_busiest_worker_s": max(per_worker.values(), default=0.0),
            "image_tasks_s": sorted(tasks, reverse=True),
            "image_by_worker_s": {w: round(v, 4) for w, v in sorted(per_worker.items())},
            "reduction_compute_s": add, "transfer_s": transfer, "tasks": names, "timeline": timeline}


def transfer_logs(dask_worker) -> dict:
    """How many entries a worker's transfer logs hold (run on every worker with
    ``client.run`` before a call, for `transferred`)."""
    return {"in": list(dask_worker.transfer_incoming_log), "out": list(dask_worker.transfer_outgoing_log)}


def transferred(before: dict, after: dict) -> dict:
    """What crossed Dask's sockets between two snapshots of the workers' transfer logs
    (`transfer_logs` through ``client.run``): bytes between workers and from workers to
    the client (or the scheduler), the number of transfers, and the largest keys moved
    (name, MB, from, to)."""
    from dask.utils import key_split

    workers = set(after)
    between, to_client, count, keys = 0, 0, 0, []
    for w, logs in after.items():
        for entry in logs["in"][len(before.get(w, {}).get("in", [])):]:
            between += entry["total"]
            count += 1
            keys += [(key_split(k), n / 1e6, str(entry["who"])[-5:], w[-5:]) for k, n in entry["keys"].items()]
        for entry in logs["out"][len(before.get(w, {}).get("out", [])):]:
            if entry["who"] not in workers:
                to_client += entry["total"]
                keys += [(key_split(k), n / 1e6, w[-5:], "client") for k, n in entry["keys"].items()]
    keys.sort(key=lambda k: -k[1])
    return {"between_workers_bytes": int(between), "to_client_bytes": int(to_client), "transfers": count,
            "largest": [{"key": k, "mb": round(mb, 3), "from": a, "to": b} for k, mb, a, b in keys[:6]]}


def slabs(n: int, data: dict, common: dict, precision: str) -> list:
    """The slabs ``n`` workers get (`clgrid.dask.slabs`, as the call makes them): planes
    and samples taken, per slab."""
    from clgrid.dask import slabs as dask_slabs

    options = dict(common, flip_u=False, flip_v=False, center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6,
                   precision=precision)
    geometry = dask_slabs.geometry_of([dask_slabs.extent(data["uvw"], common["freq"], None)], options)
    counts = dask_slabs.plane_counts(data["uvw"], common["freq"], None, geometry)
    bounds = dask_slabs.slab_bounds([counts], geometry, n)
    taps = np.convolve(counts, np.ones(geometry.kernel.support, np.int64))[:geometry.num_planes]
    first = np.concatenate([[0], np.cumsum(counts)])
    support = geometry.kernel.support
    return [{"planes": [lo, hi], "samples": int(first[hi] - first[max(lo - support + 1, 0)]) if hi > lo else 0,
             "taps_on_planes": int(taps[lo:hi].sum())} for lo, hi in bounds]


def profile_config(profile: str) -> dict:
    """Dask configuration for the workers' statistical profiler: "on" leaves Dask's default
    (every thread's stack sampled each 10 ms), "off" turns it off."""
    return {} if profile == "on" else {"distributed.worker.profile.enabled": False}


def scale(n: int, a, data: dict, common: dict, chunks: dict, reference, single=None) -> dict:
    """One cluster of ``n`` workers: load, warm up, time both variants; with ``single``
    (the one-process reused call), the reused Dask call and it again, interleaved."""
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, get_task_stream, wait

    import clgrid.dask as cd
    from clgrid.dask.wgridding import KEEP_OPERATORS

    threads = max(1, a.cores // n)
    env = {"CLGRID_DEVICE": a.device, "POCL_MAX_PTHREAD_COUNT": str(threads), "OMP_NUM_THREADS": str(threads),
           "OPENBLAS_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    out = {"workers": n, "threads_per_worker": threads}
    # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which makes every large
    # temporary fresh pages (the host FFT allocates per call): unset unless --dask-malloc-trim
    trim = {} if a.dask_malloc_trim else {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
    trim.update(profile_config(a.dask_profile))
    with dask.config.set(trim), LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                             dashboard_address=None, env=env, memory_limit=0) as cluster, \
            Client(cluster) as client:
        units = client.run(lambda: clgrid.device.runtime.get_queue(None).device.max_compute_units)
        out["device_compute_units"] = sorted(units.values())
        rows = -(-len(data["uvw"]) // (n * a.chunks_per_worker))
        start = time.perf_counter()
        uvw = client.persist(da.from_array(data["uvw"], chunks=(rows, 3)))
        vis = client.persist(da.from_array(data["vis"], chunks=(rows, chunks["channel"])))
        wait([uvw, vis])
        out["load_s"] = time.perf_counter() - start
        out["tasks"] = len(uvw.chunks[0]) * len(vis.chunks[1])
        keep = max(KEEP_OPERATORS, out["tasks"])      # every task's, for "reused" (slab tasks: at most
                                                      # slabs x chunks, one in n on each worker)
        for variant, kept in (("call", 0), ("reused", keep)):
            runs: list = []

            def run(kept=kept, runs=runs):
                with get_task_stream(client) as stream:
                    begin = time.time()
                    image = cd.vis2dirty(uvw=uvw, vis=vis, nthreads=threads, keep_operators=kept, split=a.split,
                                         slab_samples=a.slab_samples, **common)
                    end = time.time()
                runs.append((end - begin, breakdown(stream.data, begin, end)))
                return image

            seconds, times, image = median_time(run, a.repeats)
            timed = sorted(runs[1:], key=lambda r: r[0])
            out[variant] = {"median_s": seconds, "times_s": times, "breakdown": timed[(len(timed) - 1) // 2][1],
                            "error_vs_single": float(np.linalg.norm(image - reference) / np.linalg.norm(reference))}
        if single is not None:           # (this host's speed drifts between runs: the pair side by side)
            from timing import interleaved, paired_ratio

            def reused():                # (the "reused" variant's call, kept operators)
                return cd.vis2dirty(uvw=uvw, vis=vis, nthreads=threads, keep_operators=keep, split=a.split,
                                    slab_samples=a.slab_samples, **common)

            medians, times, _ = interleaved({"one_process": single, "dask": reused},
                                                a.repeats if a.interleave_rounds is None else a.interleave_rounds,
                                                alternate=True)
            out["interleaved"] = {"one_process_s": medians["one_process"], "dask_s": medians["dask"],
                                  "times_s": times, "speedup_vs_one_process": medians["one_process"] / medians["dask"],
                                  "paired": paired_ratio(times["one_process"], times["dask"])}
        client.run(cd.clear_cache)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=500_000, help="rows (baseline-times) of the track set")
    p.add_argument("--nchan", type=int, default=8)
    p.add_argument("--freq", type=float, nargs=2, default=(1.2e9, 1.6e9), metavar=("LO", "HI"), help="Hz")
    p.add_argument("--npix", type=int, default=4096)
    p.add_argument("--epsilon", type=float, default=1e-4)
    p.add_argument("--double", action="store_true", help="complex128 (default complex64)")
    p.add_argument("--no-w", action="store_true", help="do_wgridding=False")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--cores", type=int, default=os.cpu_count(), help="cores shared by the workers")
    p.add_argument("--chunks-per-worker", type=int, default=1, help="row chunks per worker")
    p.add_argument("--channel-chunks", type=int, default=None, help="channels per chunk (default: all)")
    p.add_argument("--device", default="pocl", help="each worker's CLGRID_DEVICE, and the single process's")
    p.add_argument("--split", default="auto", choices=("auto", "planes", "rows"), help="clgrid.dask's split")
    p.add_argument("--slab-samples", type=int, default=None,
                   help="clgrid.dask's slab_samples (default: as many as a chunk holds)")
    p.add_argument("--dask-malloc-trim", action="store_true",
                   help="keep Dask's MALLOC_TRIM_THRESHOLD_=65536 in the workers (slows the host FFT)")
    p.add_argument("--dask-profile", default="on", choices=("on", "off"),
                   help="the workers' statistical profiler (Dask's distributed.worker.profile.enabled)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--interleave", action="store_true",
                   help="keep the one-process operator and time its reused call again beside each cluster's, "
                        "interleaved (the pair's ratio does not see the host's drift between runs)")
    p.add_argument("--interleave-rounds", type=int, default=None,
                   help="rounds of the interleaved pair (default: --repeats)")
    p.add_argument("--no-ducc0", action="store_true")
    p.add_argument("--quick", action="store_true", help="a small run (rows 20000, 2 channels, 256^2, 1-2 workers)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.interleave_rounds is not None and a.interleave_rounds < 1:
        p.error(f"--interleave-rounds must be at least 1, got {a.interleave_rounds}")
    if a.quick:
        a.rows, a.nchan, a.npix, a.repeats = 20_000, 2, 256, 1
        a.workers = [w for w in a.workers if w <= 2] or [1]
        a.cores = min(a.cores, 2)
    if any(a.cores // n < 1 for n in a.workers):
        p.error(f"--cores {a.cores} cannot give every one of {max(a.workers)} workers a thread")
    if not clgrid.device.runtime.matching_devices(a.device):
        p.error(f"no OpenCL device matches --device {a.device!r}; devices: "
                + "; ".join(f"{d.platform.name}: {d.name}" for d in clgrid.devices()))

    uvw, freq, vis = observation(a.rows, a.nchan, *a.freq)
    if a.double:
        vis = vis.astype(np.complex128)
    uv_max = np.abs(uvw[:, :2]).max() * freq.max() / SPEED_OF_LIGHT
    pix = 0.9 / (2 * uv_max)                                  # the longest baseline just sampled
    common = dict(freq=freq, npix_x=a.npix, npix_y=a.npix, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon,
                  do_wgridding=not a.no_w)
    res = {"rows": len(uvw), "nchan": a.nchan, "num_vis": int(vis.size), "npix": a.npix, "epsilon": a.epsilon,
           "precision": "double" if a.double else "single", "w": not a.no_w, "cores": a.cores, "device": a.device,
           "device_name": clgrid.device.runtime.get_queue(a.device).device.name.strip(), "repeats": a.repeats,
           "chunks_per_worker": a.chunks_per_worker, "channel_chunks": a.channel_chunks, "split": a.split,
           "slab_samples": a.slab_samples,
           "workers_malloc_trim_threshold": "dask's 65536" if a.dask_malloc_trim else "unset",
           "workers_profile": a.dask_profile,
           "command": " ".join(sys.argv)}
    print(f"{res['num_vis']:,} visibilities ({len(uvw):,} rows x {a.nchan} channels), {a.npix}^2, "
          f"epsilon {a.epsilon}, {res['precision']}, {a.cores} cores, device {res['device_name']}", flush=True)

    if not a.no_ducc0:
        import ducc0.wgridder as wg

        res["ducc0_s"], res["ducc0_times_s"], _ = median_time(
            lambda: wg.vis2dirty(uvw=uvw, vis=vis, nthreads=a.cores, **common), a.repeats)
        print(f"ducc0 vis2dirty, {a.cores} threads: {res['ducc0_s']:.3f} s", flush=True)
    res["single_call_s"], res["single_call_times_s"], reference = median_time(
        lambda: clgrid.vis2dirty(uvw=uvw, vis=vis, nthreads=a.cores, device=a.device, **common), a.repeats)
    operator = clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, a.epsilon, not a.no_w, device=a.device,
                               precision=res["precision"], nthreads=a.cores)
    res["single_reused_s"], res["single_reused_times_s"], _ = median_time(lambda: operator.vis2dirty(vis), a.repeats)
    g = operator.geometry
    res["kernel"] = {"support": g.kernel.support, "sigma": g.kernel.sigma, "grid": [g.nu, g.nv],
                     "planes": g.num_planes}
    single = (lambda: operator.vis2dirty(vis)) if a.interleave else None
    if not a.interleave:
        operator = None              # (its device memory freed before the workers start)
    print(f"clgrid.vis2dirty, one process: {res['single_call_s']:.3f} s (operator reused: "
          f"{res['single_reused_s']:.3f} s)", flush=True)

    data = {"uvw": uvw, "vis": vis}
    chunks = {"channel": a.channel_chunks or a.nchan}
    res["dask"] = []
    for n in a.workers:
        row = scale(n, a, data, common, chunks, reference, single)
        if not a.no_w and a.split != "rows":
            row["slabs"] = slabs(n, data, common, res["precision"])
        res["dask"].append(row)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        print(f"{n} worker(s) x {row['threads_per_worker']} thread(s), {row['tasks']} tasks: "
              f"call {row['call']['median_s']:.3f} s, reused {row['reused']['median_s']:.3f} s "
              f"(load {row['load_s']:.2f} s)" + (
                  f"; interleaved: one process {row['interleaved']['one_process_s']:.3f} s, Dask "
                  f"{row['interleaved']['dask_s']:.3f} s ({row['interleaved']['speedup_vs_one_process']:.2f}x; "
                  f"round by round {row['interleaved']['paired']['median']:.3f}x, 90% interval "
                  f"{row['interleaved']['paired']['interval'][0]:.3f}-{row['interleaved']['paired']['interval'][1]:.3f}x)"
                  if "interleaved" in row else ""), flush=True)
    first = res["dask"][0]
    base = {v: first[v]["median_s"] * first["workers"] for v in ("call", "reused")}
    work = {v: first[v]["breakdown"]["image_compute_s"] for v in ("call", "reused")}
    print(f"\n{'workers':>7} {'call s':>8} {'eff.':>5} {'reused s':>9} {'eff.':>5} {'speedup':>7} {'work':>5}  the "
          "reused run's wall time: startup + prepare + images (busiest worker's compute) + reduction tail + gather; "
          "transfers")
    for row in res["dask"]:
        n = row["workers"]
        for v in ("call", "reused"):
            row[v]["efficiency"] = base[v] / (n * row[v]["median_s"])
            row[v]["speedup"] = first[v]["median_s"] / row[v]["median_s"]       # the same cores
            # imaging tasks' compute summed over workers, relative to the first row's: above 1,
            # efficiency is lost to more work (planes repeated, fewer threads per FFT)
            row[v]["work_ratio"] = row[v]["breakdown"]["image_compute_s"] / work[v] if work[v] else None
            row[v]["speedup_vs_single_call"] = res["single_call_s"] / row[v]["median_s"]
            if "ducc0_s" in res:
                row[v]["speedup_vs_ducc0"] = res["ducc0_s"] / row[v]["median_s"]
        b = row["reused"]["breakdown"]
        print(f"{n:>7} {row['call']['median_s']:>8.3f} {row['call']['efficiency']:>5.2f} "
              f"{row['reused']['median_s']:>9.3f} {row['reused']['efficiency']:>5.2f} {row['reused']['speedup']:>7.2f} "
              f"{row['reused']['work_ratio'] or 0:>5.2f}  "
              f"{b['startup_s']:.3f} + {b['prepare_s']:.3f} + {b['images_s']:.3f} "
              f"({b['image_compute_busiest_worker_s']:.3f}) + {b['reduction_tail_s']:.3f} + {b['gather_s']:.3f}; "
              f"{b['transfer_s']:.3f}")
    print(json.dumps(res, indent=1) if not a.json else f"JSON: {a.json}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
