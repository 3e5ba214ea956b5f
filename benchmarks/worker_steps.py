"""Where one Dask CPU worker's reused `clgrid.dask.vis2dirty` loses time against a kept
`clgrid.WGridder` in one process on the same cores (issue 28, "k workers x cores/k
threads no slower than one process"): the engine's steps timed in both processes, call by
call, interleaved.

One `LocalCluster` of one worker with every core (``--cores`` threads: the worker's
``nthreads`` and ``POCL_MAX_PTHREAD_COUNT``, as benchmarks/dask_scaling.py starts it),
the data persisted on it in one chunk, then ``--repeats`` rounds (each round's order
the last one's reversed) of:

- ``one_process``: the client's kept `WGridder.vis2dirty(vis)`;
- ``dask``: `clgrid.dask.vis2dirty` reused (the rows split's one task, image into the
  client's box);
- ``task_direct``: a task that calls the worker's kept operator on its vis block
  itself (no box, no facet sum): Dask's task thread, nothing of clgrid.dask around it;
- ``run_direct``: the same through ``client.run`` (the worker's event-loop thread, not a
  task thread).

In every process the engine's steps are wrapped and summed per call: the values' upload
and gather (``_gather_values``), the wait for each plane's spreading and the grid mapped
(``_map_grid``), the host FFT (``HostFFT.backward``), the per-pixel loops on the host
threads (``in_slices`` of clgrid.imaging.plane_passes: the planes' phase-and-add and the
final correction), and the call (``vis2dirty``, with the process's CPU seconds, all its
threads, and minor page faults while it ran); and each thread's CPU seconds by name
(/proc/self/task) in both processes.  The CPU seconds are the figure to read on a
shared machine: its wall times move with others' load.  ``--profile on off`` runs a
cluster each with the worker's statistical profiler on and off.  Prints the medians per
variant and step.  (The client's operator makes its first host FFT before the cluster
starts: a `LocalCluster`'s nanny sets ``OMP_NUM_THREADS=1`` in this process, and ducc0
sizes its thread pool from it when first used.)

    python benchmarks/worker_steps.py --repeats 5                  # here (2 cores, 0.5 M into 2048²): ~1 min
    python benchmarks/worker_steps.py --rows 250000 --nchan 16 --npix 4096 --freq 1.3e9 1.5e9 \
        --repeats 5 --profile on off --json worker_steps.json      # devices.py's small set, 32 cores
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
# the worker imports this module by name (its step records live there)
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p])

import clgrid  # noqa: E402

_steps: dict = {}
_lock = threading.Lock()
_kept: dict = {}


def _wrap(owner, name: str, label: str, whole: bool = False) -> None:
    """``owner.name`` timed into ``_steps[label]``; ``whole``: with the process's page
    faults and CPU seconds (all its threads) while it ran."""
    real = getattr(owner, name)
    if getattr(real, "_steps", False):
        return

    def wrapped(*args, **kwargs):
        start = time.perf_counter()
        if whole:
            use, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
        try:
            return real(*args, **kwargs)
        finally:
            with _lock:
                _steps[label] = _steps.get(label, 0.0) + time.perf_counter() - start
                if whole:
                    now = resource.getrusage(resource.RUSAGE_SELF)
                    _steps["minor_faults"] = _steps.get("minor_faults", 0) + now.ru_minflt - use.ru_minflt
                    _steps["cpu_s"] = _steps.get("cpu_s", 0.0) + time.process_time() - cpu

    wrapped._steps = True
    setattr(owner, name, wrapped)


def install() -> dict:
    """Wrap the engine's steps in this process; its facts (threads, environment)."""
    from clgrid.imaging import engine, fft, plane_passes

    E = engine.ImagingEngine
    _wrap(E, "vis2dirty", "vis2dirty", whole=True)
    _wrap(E, "_gather_values", "gather_values")
    _wrap(E, "_map_grid", "map_grid (spread wait)")
    _wrap(fft.HostFFT, "backward", "host_fft")
    _wrap(plane_passes, "in_slices", "host_loops")
    try:
        import ducc0.misc

        pool = ducc0.misc.thread_pool_size()
    except (ImportError, AttributeError):
        pool = None
    return {"pid": os.getpid(), "cpus": len(os.sched_getaffinity(0)), "ducc0_thread_pool": pool,
            "env": {k: os.environ.get(k) for k in ("POCL_MAX_PTHREAD_COUNT", "OMP_NUM_THREADS",
                                                   "MALLOC_TRIM_THRESHOLD_", "CLGRID_DEVICE")}}


def thread_cpu() -> dict:
    """CPU seconds of each of this process's threads (by name, summed over threads of one
    name) from /proc/self/task."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name.split("_")[0].split("-")[0] for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = names.get(int(tid), "native " + stat[stat.index("(") + 1:stat.rindex(")")])
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def steps() -> dict:
    """The steps' seconds summed since the last call (and reset)."""
    with _lock:
        out = dict(_steps)
        _steps.clear()
    return out


def engine_facts(op) -> list:
    """What an operator's engines run with: threads, FFT, spreading, parts."""
    return [{"workers": e._workers, "fft_workers": getattr(e.fft, "workers", None),
             "fft_library": getattr(e.fft, "library", None), "fft_mode": e.fft_mode,
             "compute_units": e.queue.device.max_compute_units, "planes": [e.planes.start, e.planes.stop],
             "samples": e.num_kept, "split": op.split, "faceted": op.faceted is not None,
             "spread": [e.spread_mode, type(e.spreader).__name__, repr(e._spread_args[2])],
             "parts": len(e._parts), "part_samples": e._part_samples,
             "geometry": [e.geometry.nu, e.geometry.nv, e.geometry.num_planes]} for e in op.engines]


def operator_facts() -> list:
    from clgrid.dask import tasks

    out = []
    for op, _ in tasks._operators.values():
        _kept["op"] = op
        out += engine_facts(op)
    return out


def call_kept(vis) -> float:
    """The worker's kept operator's vis2dirty of ``vis``: its seconds."""
    op = _kept["op"]
    start = time.perf_counter()
    op.vis2dirty(np.asarray(vis))
    return time.perf_counter() - start


def one_cluster(profile: str, a, data: dict, op, res: dict) -> dict:
    """One worker with every core (its profiler ``profile``): the variants' rounds, each
    round's order the last one's reversed (neither always runs right after the other)."""
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import clgrid.dask as cd
    import worker_steps as me

    uvw, freq, vis, common = data["uvw"], data["freq"], data["vis"], data["common"]
    env = {"CLGRID_DEVICE": a.device, "POCL_MAX_PTHREAD_COUNT": str(a.cores), "OMP_NUM_THREADS": str(a.cores),
           "OPENBLAS_NUM_THREADS": str(a.cores), "MKL_NUM_THREADS": str(a.cores)}
    config = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
    if profile == "off":
        config["distributed.worker.profile.enabled"] = False
    out = {"profile": profile}
    with dask.config.set(config), LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                               dashboard_address=None, env=env, memory_limit=0) as cluster, \
            Client(cluster) as client:
        (worker,) = client.run(me.install).items()
        res["facts"]["client_after_cluster"] = me.install()
        res["facts"]["worker"] = worker[1]
        duvw = client.persist(da.from_array(uvw, chunks=(len(uvw), 3)))
        dvis = client.persist(da.from_array(vis, chunks=(len(uvw), freq.size)))
        wait([duvw, dvis])
        block = dvis.to_delayed().ravel()[0]

        def dask_call():
            return cd.vis2dirty(uvw=duvw, vis=dvis, freq=freq, nthreads=a.cores, **common)

        dask_call()
        res["facts"]["worker_engine"] = list(client.run(me.operator_facts).values())[0]
        runs = {"one_process": lambda: op.vis2dirty(vis), "dask": dask_call,
                "task_direct": lambda: client.compute(dask.delayed(me.call_kept, pure=False)(block)).result(),
                "run_direct": lambda: list(client.run(me.call_kept, dvis.compute()).values())[0]}
        # (run_direct sends the vis along: its own time is the inner seconds, not the wall)
        times, inner, step_rows, threads = ({k: [] for k in runs} for _ in range(4))
        for name, fn in runs.items():          # warm-up
            fn()
        me.steps()
        client.run(me.steps)
        order = list(runs)
        for _ in range(a.repeats):
            for name in order:
                before = (me.thread_cpu(), list(client.run(me.thread_cpu).values())[0])
                start = time.perf_counter()
                got = runs[name]()
                times[name].append(time.perf_counter() - start)
                after = (me.thread_cpu(), list(client.run(me.thread_cpu).values())[0])
                for side, b, e in (("client", before[0], after[0]), ("worker", before[1], after[1])):
                    use = {k: round(e[k] - b.get(k, 0.0), 2) for k in e if e[k] - b.get(k, 0.0) > 0.005}
                    threads[name].append((side, use))
                local, remote = me.steps(), list(client.run(me.steps).values())[0]
                s = local if name == "one_process" else remote
                step_rows[name].append(s)
                inner[name].append(got if isinstance(got, float) else s.get("vis2dirty", float("nan")))
            order.reverse()
        client.run(cd.clear_cache)
    out.update(times_s=times, inner_s=inner, steps=step_rows, thread_cpu_s=threads)
    labels = sorted({k for rows in step_rows.values() for r in rows for k in r})
    print(f"\nworker profiler {profile}; medians of {a.repeats}; per thread CPU seconds of the last call: "
          + "; ".join(f"{name} {threads[name][-2:]}" for name in runs))
    print(f"{'variant':<12} {'wall':>7} {'inner':>7} " + " ".join(f"{k[:22]:>22}" for k in labels))
    for name in runs:
        med = {k: float(np.median([r.get(k, 0.0) for r in step_rows[name]])) for k in labels}
        print(f"{name:<12} {np.median(times[name]):7.3f} {np.median(inner[name]):7.3f} "
              + " ".join(f"{med[k]:22.3f}" if k != "minor_faults" else f"{med[k]:22.0f}" for k in labels))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=60_000)
    p.add_argument("--nchan", type=int, default=8)
    p.add_argument("--npix", type=int, default=2048)
    p.add_argument("--freq", type=float, nargs=2, default=(1.2e9, 1.6e9), metavar=("LO", "HI"),
                   help="Hz (benchmarks/devices.py's sets: 1.3e9 1.5e9)")
    p.add_argument("--cores", type=int, default=os.cpu_count())
    p.add_argument("--device", default="pocl")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--profile", nargs="+", default=["on"], choices=("on", "off"),
                   help="the worker's statistical profiler, a cluster each")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)

    import worker_steps as me
    from dask_scaling import SPEED_OF_LIGHT, observation

    uvw, freq, vis = observation(a.rows, a.nchan, *a.freq)
    pix = 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq.max() / SPEED_OF_LIGHT)
    common = dict(npix_x=a.npix, npix_y=a.npix, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4, do_wgridding=True)
    res = {"args": vars(a), "facts": {"client": me.install()}, "command": " ".join(sys.argv)}
    op = clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, 1e-4, True, device=a.device, nthreads=a.cores,
                         precision="single")
    op.vis2dirty(vis)                  # (its host FFT's threads started before the cluster's
    #                                    nanny sets OMP_NUM_THREADS=1 in this process)
    res["facts"]["client_engine"] = me.engine_facts(op)
    print(f"{vis.size:,} visibilities into {a.npix}^2, {a.cores} threads, device {a.device}", flush=True)
    data = {"uvw": uvw, "freq": freq, "vis": vis, "common": common}
    res["clusters"] = [one_cluster(profile, a, data, op, res) for profile in a.profile]
    print(json.dumps(res["facts"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
