"""Several devices (issue 28): `WGridder(device=[...])` in one process and `clgrid.dask`
with devices per worker, against one device in the same run; CPU workers against one
process and ducc0.

MeerKAT-like data as benchmarks/wgridding.py makes them (64 dishes, 8 h tracks), with
channels across 200 MHz at L band: the "large" set is 4 M rows x 16 channels (64 M
visibilities) into 8192^2, the "small" one 250 k rows x 16 channels (4 M) into 4096^2
("medium": 1.6 M into 1024^2, for small machines);
epsilon 1e-4, single precision, w-gridding.  Parts (``--parts``):

- ``process``: per set, one device (`WGridder(device=d0)`) against the first k devices
  (k = 2, 4, ... up to all of ``--devices``), each split (``"planes"``, ``"rows"``):
  operator set-up, reused ``vis2dirty`` and ``dirty2vis`` (medians of ``--repeats``
  after a warm-up, the variants interleaved), one call (`clgrid.vis2dirty` /
  `dirty2vis` building the operator: medians of ``--call-repeats`` after a warm-up),
  each device's share alone (the split's balance), errors against one device;
  ducc0 at the same epsilon on ``--nthreads`` threads (one call each way: it builds
  nothing), and with ``--oracle`` ducc0 at 1e-12 in double as the errors' reference
  (small set only: at 64 M it takes minutes).
- ``dask``: per set, a `LocalCluster` of GPU workers: 1 worker with d0, k workers with
  one device each, 1 worker with all k; the data persisted on the workers in one chunk
  of rows per worker; the first call (operators built, points selected and kept) and
  reused calls (medians), ``dirty2vis`` persisted on the workers (a major cycle keeps
  its model visibilities there), where the wall time went (Dask's task stream, as
  benchmarks/dask_scaling.py reads it), errors against the one-process image; the
  ratios use the one-process one-device times of this run.
- ``cpu``: benchmarks/dask_scaling.py on ``--cpu-device`` workers: k workers x cores/k
  threads (``--cpu-workers``) against one process on all cores and ducc0 on all cores,
  on the small set.

    python benchmarks/devices.py --devices nvidia --json devices_h100x2.json     # two H100s, ~8 min
    python benchmarks/devices.py --devices pocl intel --quick                     # here, small sizes
    python benchmarks/devices.py --devices pocl pocl --parts process --quick      # two queues on one device
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time

import numpy as np

# this repository's clgrid, here and in the Dask workers (they inherit PYTHONPATH), not an
# installed copy: a run that imported another tree's library measured that tree
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import clgrid  # noqa: E402
from report import report  # noqa: E402
from timing import interleaved, timed  # noqa: E402,F401  (timed: also split_sweep's)
from dask_scaling import profile_config  # noqa: E402

SPEED_OF_LIGHT = 299792458.0
SETS = {"large": (4_000_000, 16, 8192), "small": (250_000, 16, 4096), "medium": (100_000, 16, 1024),
        "quick": (20_000, 4, 256)}
BAND = (1.3e9, 1.5e9)


def expand(specs: list) -> list:
    """Device specs: one that matches several devices stands for all of them ("nvidia":
    "nvidia #0", "nvidia #1", ...); one named twice stays twice (two queues on it)."""
    out = []
    for spec in specs:
        found = clgrid.device.runtime.matching_devices(spec)
        if not found:
            raise SystemExit(f"no OpenCL device matches {spec!r}; devices: "
                             + "; ".join(f"{d.platform.name}: {d.name}" for d in clgrid.devices()))
        out.extend([spec] if len(found) == 1 or "#" in spec else [f"{spec} #{k}" for k in range(len(found))])
    return out


def make_set(rows: int, nchan: int, npix: int) -> dict:
    from wgridding import tracks

    uvw, _ = tracks(rows, BAND[1])
    freq = np.linspace(*BAND, nchan)
    rng = np.random.default_rng(1)
    vis = np.empty((len(uvw), nchan), np.complex64)
    vis.real = rng.standard_normal(vis.shape, np.float32)
    vis.imag = rng.standard_normal(vis.shape, np.float32)
    pix = 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq.max() / SPEED_OF_LIGHT)
    dirty = rng.standard_normal((npix, npix), np.float32)
    return dict(uvw=uvw, freq=freq, vis=vis, dirty=dirty, npix=npix, pix=pix)


def error(x, y) -> float:
    return float(np.linalg.norm(np.asarray(x, np.complex128 if np.iscomplexobj(x) else np.float64) - y)
                 / np.linalg.norm(y))


# -- one process --------------------------------------------------------------------------

def process_part(name: str, data: dict, devices: list, a) -> dict:
    uvw, freq, vis, dirty, npix, pix = (data[k] for k in ("uvw", "freq", "vis", "dirty", "npix", "pix"))
    keywords = dict(npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon, do_wgridding=True,
                    precision="single", nthreads=a.nthreads)
    common = dict(uvw=uvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon, do_wgridding=True,
                  nthreads=a.nthreads)
    out = {"set": name, "rows": len(uvw), "nchan": freq.size, "num_vis": int(vis.size), "npix": npix,
           "devices": devices, "runs": {}}
    counts = sorted({k for k in [2 ** i for i in range(1, 8)] + [len(devices)] if 1 < k <= len(devices)})
    operators, runs = {}, {}
    setup, one = timed(lambda: clgrid.WGridder(uvw, freq, device=devices[0], **keywords))
    operators["1"] = one
    out["runs"]["1"] = {"devices": devices[:1], "setup_s": setup}
    variants = [(f"@{i}", json.loads(v)) for i, v in enumerate(a.variants or [])]
    for suffix, tuning in variants:                   # the one device again under each variant
        key = "1" + suffix
        setup, operators[key] = timed(lambda t=tuning: clgrid.WGridder(uvw, freq, device=devices[0], tuning=t,
                                                                         **keywords))
        out["runs"][key] = {"devices": devices[:1], "setup_s": setup, "tuning": tuning}
    for k in counts:
        for split in a.splits:
            for suffix, tuning in [("", None)] + variants:
                key = f"{k}_{split}{suffix}"
                setup, op = timed(lambda k=k, split=split, t=tuning: clgrid.WGridder(
                    uvw, freq, device=devices[:k], split=split, tuning=t, **keywords))
                operators[key] = op
                out["runs"][key] = {"devices": devices[:k], "split": split, "setup_s": setup, "tuning": tuning,
                                    "shares": [{"planes": [e.planes.start, e.planes.stop], "samples": e.num_kept,
                                                "device": e.queue.device.name.strip()} for e in op.engines]}
    g = one.geometry
    out["geometry"] = {"grid": [g.nu, g.nv], "support": g.kernel.support, "planes": g.num_planes,
                       "sigma": g.kernel.sigma}
    for key, op in operators.items():
        runs[f"{key}|vis2dirty_reused"] = lambda op=op: op.vis2dirty(vis)
        runs[f"{key}|dirty2vis_reused"] = lambda op=op: op.dirty2vis(dirty)
    medians, times, outputs = interleaved(runs, a.repeats)
    for run, seconds in medians.items():
        key, what = run.split("|")
        out["runs"][key][what + "_s"] = seconds
        out["runs"][key][what + "_times_s"] = times[run]
    for key, op in operators.items():
        row = out["runs"][key]
        row["image_error_vs_one_device"] = error(outputs[f"{key}|vis2dirty_reused"], outputs["1|vis2dirty_reused"])
        row["vis_error_vs_one_device"] = error(outputs[f"{key}|dirty2vis_reused"], outputs["1|dirty2vis_reused"])
        if len(op.engines) > 1:                       # each device on its share alone: the split's balance
            alone = []
            for e, r in zip(op.engines, op._rows):
                e.vis2dirty(vis[r])
                t_v = timed(lambda e=e, r=r: e.vis2dirty(vis[r]))[0]
                t_d = timed(lambda e=e: e.dirty2vis(dirty))[0]
                alone.append({"vis2dirty_s": t_v, "dirty2vis_s": t_d})
            row["each_device_alone"] = alone
    base = out["runs"]["1"]
    for key, row in out["runs"].items():
        for what in ("vis2dirty_reused", "dirty2vis_reused"):
            row[f"speedup_{what}"] = base[what + "_s"] / row[what + "_s"]
    reference = {"image": outputs["1|vis2dirty_reused"], "vis": outputs["1|dirty2vis_reused"]}
    del operators, one, outputs
    gc.collect()

    # one call: the operator built in the call (programs built by the warm-up)
    calls = {}
    for k in [1] + counts:
        devs = devices[0] if k == 1 else devices[:k]
        calls[f"{k}|vis2dirty_call"] = lambda devs=devs: clgrid.vis2dirty(vis=vis, npix_x=npix, npix_y=npix,
                                                                           device=devs, **common)
        calls[f"{k}|dirty2vis_call"] = lambda devs=devs: clgrid.dirty2vis(dirty=dirty, device=devs, **common)
    medians, times, _ = interleaved(calls, a.call_repeats)
    out["calls"] = {}
    for run, seconds in medians.items():
        key, what = run.split("|")
        out["calls"].setdefault(key, {})[what + "_s"] = seconds
        out["calls"][key][what + "_times_s"] = times[run]
    for key, row in out["calls"].items():
        for what in ("vis2dirty_call", "dirty2vis_call"):
            row[f"speedup_{what}"] = out["calls"]["1"][what + "_s"] / row[what + "_s"]

    if not a.no_ducc0:
        import ducc0.wgridder as wg

        seconds, image = timed(lambda: wg.vis2dirty(vis=vis, npix_x=npix, npix_y=npix, **common))
        seconds_d, predicted = timed(lambda: wg.dirty2vis(dirty=dirty, **common))
        out["ducc0"] = {"nthreads": a.nthreads, "vis2dirty_s": seconds, "dirty2vis_s": seconds_d,
                        "image_error_vs_clgrid": error(image, reference["image"]),
                        "vis_error_vs_clgrid": error(predicted, reference["vis"])}
        if a.oracle and name != "large":
            exact = dict(common, epsilon=1e-12)
            true_image = wg.vis2dirty(vis=vis.astype(np.complex128), npix_x=npix, npix_y=npix, **exact)
            true_vis = wg.dirty2vis(dirty=dirty.astype(np.float64), **exact)
            out["oracle"] = {"what": "ducc0 at epsilon 1e-12, double",
                             "clgrid_image_error": error(reference["image"], true_image),
                             "clgrid_vis_error": error(reference["vis"], true_vis),
                             "ducc0_image_error": error(image, true_image), "ducc0_vis_error": error(predicted, true_vis)}
    out["reference"] = reference
    return out


# -- Dask --------------------------------------------------------------------------------

def _clgrid_path():
    return os.path.dirname(os.path.abspath(clgrid.__file__))


def tree_digest() -> str:
    """A digest of the library's sources as imported (the run's tree, whatever git says)."""
    import hashlib

    digest = hashlib.sha1()
    base = _clgrid_path()
    for folder, _, files in sorted(os.walk(base)):
        for name in sorted(files):
            if name.endswith((".py", ".cl", ".json")):
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(os.path.relpath(os.path.join(folder, name), base).encode() + f.read())
    return digest.hexdigest()[:12]


def _set_device(spec):
    os.environ["CLGRID_DEVICE"] = spec
    import clgrid.dask

    clgrid.dask.clear_cache()
    return spec


def task_seconds(stream: list, begin: float) -> dict:
    """Per task name in a Dask task stream: how many ran, their compute seconds summed,
    and when the first started and the last ended (seconds after ``begin``)."""
    from dask.utils import key_split

    out = {}
    for task in stream:
        name = key_split(task["key"]).split("-from-value")[0]
        row = out.setdefault(name, {"count": 0, "compute_s": 0.0, "from_s": float("inf"), "to_s": 0.0})
        row["count"] += 1
        for part in task["startstops"]:
            if part["action"] == "compute":
                row["compute_s"] += part["stop"] - part["start"]
                row["from_s"] = min(row["from_s"], part["start"] - begin)
                row["to_s"] = max(row["to_s"], part["stop"] - begin)
    return out


def dask_part(name: str, data: dict, devices: list, baseline: dict, reference: dict, a) -> dict:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, get_task_stream, wait

    import clgrid.dask as cd
    from dask_scaling import breakdown, transfer_logs, transferred

    uvw, freq, vis, dirty, npix, pix = (data[k] for k in ("uvw", "freq", "vis", "dirty", "npix", "pix"))
    configs = [("1 worker, 1 device", [devices[:1]])] if "1" in a.dask_configs else []
    if len(devices) > 1:
        if "n" in a.dask_configs:
            configs.append((f"{len(devices)} workers, 1 device each", [[d] for d in devices]))
        if "1n" in a.dask_configs:
            configs.append((f"1 worker, {len(devices)} devices", [devices]))
    out = {"set": name, "num_vis": int(vis.size), "npix": npix, "configs": []}
    tunings = [None] + [json.loads(v) for v in a.variants or []]
    weighed = [(label + ("" if w is None else f", split_sample_weight {w}") + ("" if t is None else f", tuning {t}"),
                assignment, w, t)
               for label, assignment in configs
               for w in ((a.dask_weights or [None]) if len(assignment) > 1 else [None]) for t in tunings]
    for label, assignment, weight, variant in weighed:
        n = len(assignment)
        threads = max(1, a.nthreads // n)
        row = {"config": label, "workers": n, "devices": assignment, "threads_per_worker": threads,
               "split_sample_weight": weight, "tuning": variant}
        # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536 (every large temporary
        # fresh pages): unset unless --dask-malloc-trim (docs/user-guide/dask.md)
        trim = {} if a.dask_malloc_trim else {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
        trim.update(profile_config(a.dask_profile))
        row["workers_malloc_trim_threshold"] = "dask's 65536" if a.dask_malloc_trim else "unset"
        row["workers_profile"] = a.dask_profile
        with dask.config.set(trim), LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                 dashboard_address=None, memory_limit=0) as cluster, \
                Client(cluster) as client:
            workers = sorted(client.nthreads())
            elsewhere = {w: p for w, p in client.run(_clgrid_path).items() if p != _clgrid_path()}
            if elsewhere:
                raise SystemExit(f"the workers imported another clgrid: {elsewhere}")
            for address, devs in zip(workers, assignment):
                client.run(_set_device, ", ".join(devs), workers=[address])
            rows = -(-len(uvw) // n)
            start = time.perf_counter()
            if a.dask_load == "workers":       # block i on worker i, as a reader's task i makes it there
                duvw, dvis = (_spread(client, x, rows, workers) for x in (uvw, vis))
            else:
                duvw, dvis = client.persist([da.from_array(uvw, chunks=(rows, 3)),
                                             da.from_array(vis, chunks=(rows, freq.size))])
            wait([duvw, dvis])
            row["load"] = a.dask_load
            row["load_s"] = time.perf_counter() - start
            common = dict(uvw=duvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon, do_wgridding=True,
                          nthreads=threads, slab_samples=int(vis.size),
                          tuning=None if weight is None and variant is None else
                          dict(variant or {}, **({} if weight is None else {"dask_split_sample_weight": weight})))

            def image():
                return cd.vis2dirty(vis=dvis, npix_x=npix, npix_y=npix, **common)

            def model():
                predicted = cd.dirty2vis(dirty=dirty, **common).persist()
                wait(predicted)
                return predicted

            with get_task_stream(client) as stream:
                begin = time.time()
                row["vis2dirty_first_s"], first = timed(image)
            row["vis2dirty_first_tasks"] = task_seconds(stream.data, begin)
            row["dirty2vis_first_s"], predicted = timed(model)
            streams, model_streams, times, moved = [], [], {"vis2dirty": [], "dirty2vis": []}, []
            for _ in range(a.dask_repeats):
                logs = client.run(transfer_logs)              # (outside the timed call)
                with get_task_stream(client) as stream:
                    begin = time.time()
                    image()
                    end = time.time()
                times["vis2dirty"].append(end - begin)
                split = breakdown(stream.data, begin, end)
                after = client.run(transfer_logs)
                split["moved"] = transferred(logs, after)
                streams.append((end - begin, split))
                logs = after
                with get_task_stream(client) as stream:
                    begin = time.time()
                    model()
                    end = time.time()
                times["dirty2vis"].append(end - begin)
                model_streams.append((end - begin, breakdown(stream.data, begin, end)))
                moved.append(transferred(logs, client.run(transfer_logs)))
            # every call's timeline in brief (the median's alone hides what the slow ones spent)
            keys = ("wall_s", "startup_s", "prepare_s", "images_s", "reduction_tail_s", "gather_s",
                    "image_by_worker_s")
            row["vis2dirty_reused_calls"] = [{k: split[k] for k in keys} for _, split in streams]
            row["dirty2vis_reused_calls"] = [{k: split[k] for k in keys} for _, split in model_streams]
            for what, t in times.items():
                row[f"{what}_reused_s"] = float(np.median(t))
                row[f"{what}_reused_times_s"] = t
                if baseline:
                    row[f"speedup_{what}_vs_one_process_one_device"] = baseline[what + "_reused_s"] / row[
                        f"{what}_reused_s"]
            streams.sort(key=lambda s: s[0])
            row["vis2dirty_reused_breakdown"] = streams[(len(streams) - 1) // 2][1]
            model_streams.sort(key=lambda s: s[0])
            row["dirty2vis_reused_breakdown"] = model_streams[(len(model_streams) - 1) // 2][1]
            row["dirty2vis_reused_moved"] = moved
            row["image_error_vs_one_process"] = error(first, reference["image"])
            row["vis_error_vs_one_process"] = error(predicted.compute(), reference["vis"])
            client.run(cd.clear_cache)
            cd.clear_cache()
        out["configs"].append(row)
        b = row["vis2dirty_reused_breakdown"]
        ratio = row.get("speedup_vis2dirty_vs_one_process_one_device")
        print(f"  dask {name}, {label}: vis2dirty first {row['vis2dirty_first_s']:.3f} s, reused "
              f"{row['vis2dirty_reused_s']:.3f} s" + (f" ({ratio:.2f}x one process)" if ratio else "")
              + f"; dirty2vis first {row['dirty2vis_first_s']:.3f} s, reused {row['dirty2vis_reused_s']:.3f} s; "
              f"reused vis2dirty: start {b['startup_s']:.3f} + prepare {b['prepare_s']:.3f} + images "
              f"{b['images_s']:.3f} (busiest {b['image_compute_busiest_worker_s']:.3f}) + tail "
              f"{b['reduction_tail_s']:.3f} + gather {b['gather_s']:.3f}; transfers {b['transfer_s']:.3f} s; errors "
              f"{row['image_error_vs_one_process']:.1e} / {row['vis_error_vs_one_process']:.1e}", flush=True)
        m, d = b["moved"], row["dirty2vis_reused_moved"][-1]
        print(f"    moved through Dask, reused vis2dirty: {m['between_workers_bytes'] / 1e6:.3f} MB between workers "
              f"({m['transfers']} transfers), {m['to_client_bytes'] / 1e6:.3f} MB to the client; largest "
              f"{[(k['key'], k['mb']) for k in m['largest'][:3]]}; reused dirty2vis: "
              f"{d['between_workers_bytes'] / 1e6:.3f} MB between workers, {d['to_client_bytes'] / 1e6:.3f} MB to the "
              f"client", flush=True)
        spent = sorted(row["vis2dirty_first_tasks"].items(), key=lambda kv: -kv[1]["compute_s"])[:6]
        print("    first vis2dirty's tasks (name: count, compute summed, span from the call's start): "
              + "; ".join(f"{k}: {v['count']}, {v['compute_s']:.2f} s, {v['from_s']:.2f}-{v['to_s']:.2f}"
                          for k, v in spent), flush=True)
        first_tasks = [f"{t['task']}@{t['worker']} {t['action']} {t['start_s']:.3f}-{t['stop_s']:.3f}"
                       for t in b["timeline"][:6]]
        print(f"    first task entries of the median reused vis2dirty: {'; '.join(first_tasks)}", flush=True)
        b = row["dirty2vis_reused_breakdown"]
        print(f"    reused dirty2vis: start {b['startup_s']:.3f} + before the predictions {b['prepare_s']:.3f} + "
              f"predictions {b['images_s']:.3f} (busiest {b['image_compute_busiest_worker_s']:.3f}) + assembly "
              f"{b['reduction_tail_s']:.3f} (compute {b['reduction_compute_s']:.3f}) + to the caller "
              f"{b['gather_s']:.3f}", flush=True)
    return out


def _spread(client, array: np.ndarray, rows: int, workers: list):
    """``array`` as a dask array of blocks of ``rows`` rows, persisted with block i in
    worker i mod n's memory (its own array, as a reader's task i run there makes it): left
    to the scheduler, both blocks of a two-worker load could land on one worker."""
    import dask
    import dask.array as da

    blocks = []
    for i, lo in enumerate(range(0, len(array), rows)):
        part = client.scatter(array[lo:lo + rows], workers=[workers[i % len(workers)]])
        blocks.append(da.from_delayed(dask.delayed(np.copy)(part), shape=array[lo:lo + rows].shape,
                                      dtype=array.dtype))
    return client.persist(da.concatenate(blocks, axis=0))


# -- CPU workers -------------------------------------------------------------------------

def cpu_part(rows: int, nchan: int, npix: int, a) -> dict:
    """`benchmarks/dask_scaling.py`'s run for the CPU workers; with ``--json``, its own JSON
    beside it (``<name>.cpu.json``), written after each worker count, so that a run cut
    short by a time limit keeps the counts it finished."""
    import dask_scaling

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.splitext(a.json)[0] + ".cpu.json" if a.json else os.path.join(folder, "cpu.json")
        argv = ["--rows", str(rows), "--nchan", str(nchan), "--npix", str(npix), "--freq", str(BAND[0]),
                str(BAND[1]), "--epsilon", str(a.epsilon), "--cores", str(a.cores), "--device", a.cpu_device,
                "--workers", *map(str, a.cpu_workers), "--repeats", str(a.cpu_repeats),
                "--slab-samples", str(rows * nchan), "--dask-profile", a.dask_profile, "--json", path, "--interleave",
                "--interleave-rounds", str(a.cpu_repeats if a.cpu_rounds is None else a.cpu_rounds)]
        if a.no_ducc0:
            argv.append("--no-ducc0")
        dask_scaling.main(argv)
        with open(path) as f:
            return json.load(f)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["nvidia"],
                   help="device specs; one matching several devices stands for all of them")
    p.add_argument("--parts", nargs="+", default=["process", "dask", "cpu"], choices=("process", "dask", "cpu"))
    p.add_argument("--sets", nargs="+", default=["large", "small"], choices=tuple(SETS))
    p.add_argument("--splits", nargs="+", default=["planes", "rows"], choices=("planes", "rows"))
    p.add_argument("--epsilon", type=float, default=1e-4)
    p.add_argument("--nthreads", type=int, default=os.cpu_count(), help="host threads (ducc0's too)")
    p.add_argument("--repeats", type=int, default=5, help="reused calls, one process")
    p.add_argument("--call-repeats", type=int, default=3, help="one calls, one process")
    p.add_argument("--dask-repeats", type=int, default=3)
    p.add_argument("--dask-configs", nargs="+", default=["1", "n", "1n"], choices=("1", "n", "1n"),
                   help="Dask clusters: 1 worker with d0; one worker per device; 1 worker with all devices")
    p.add_argument("--dask-load", default="workers", choices=("workers", "graph"),
                   help="the data's blocks on the workers: block i made in worker i's memory (as a Measurement "
                        "Set reader's task i run there gives it; before session 39 placed by the scheduler, which "
                        "could put both on one worker), or the arrays as the graph carried them (earlier runs)")
    p.add_argument("--dask-malloc-trim", action="store_true",
                   help="keep Dask's MALLOC_TRIM_THRESHOLD_=65536 in the workers")
    p.add_argument("--variants", nargs="+", default=None,
                   help="tuning overrides as JSON ('{\"planes_in_flight\": 0}'): the process part's operators "
                        "(keys with @i) and the Dask configurations again under each")
    p.add_argument("--dask-weights", type=float, nargs="+", default=None,
                   help="the Dask configurations again with each of these dask_split_sample_weight (vis2dirty's "
                        "slabs of the planes split; default: the tuning table's)")
    p.add_argument("--dask-profile", default="on", choices=("on", "off"),
                   help="the workers' statistical profiler (Dask's distributed.worker.profile.enabled)")
    p.add_argument("--oracle", action="store_true", help="ducc0 at 1e-12 (double) as reference, small sets")
    p.add_argument("--no-ducc0", action="store_true")
    p.add_argument("--cpu-device", default="pocl")
    p.add_argument("--cpu-workers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--cores", type=int, default=os.cpu_count(), help="cores the CPU workers share")
    p.add_argument("--cpu-repeats", type=int, default=2)
    p.add_argument("--cpu-rounds", type=int, default=None,
                   help="rounds of the interleaved one-process / Dask pair (default: --cpu-repeats)")
    p.add_argument("--cpu-set", default="small", choices=tuple(SETS))
    p.add_argument("--quick", action="store_true", help="the quick set only, few repeats, CPU workers 1 and 2")
    p.add_argument("--budget", type=float, default=540.0,
                   help="seconds: a set or part that would start after this is skipped (and said so)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.cpu_rounds is not None and a.cpu_rounds < 1:
        p.error(f"--cpu-rounds must be at least 1, got {a.cpu_rounds}")
    if a.quick:
        a.sets, a.cpu_set, a.repeats, a.call_repeats, a.dask_repeats, a.cpu_repeats = ["quick"], "quick", 2, 1, 2, 1
        a.cpu_workers = [w for w in a.cpu_workers if w <= 2]
        a.oracle = True
    devices = expand(a.devices)
    res = {"command": " ".join(["python", "benchmarks/devices.py"] + (argv if argv is not None else sys.argv[1:])),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "devices": devices,
           "device_names": [clgrid.device.runtime.select_device(d).name.strip() for d in devices],
           "epsilon": a.epsilon, "precision": "single", "nthreads": a.nthreads, "cores": os.cpu_count()}
    res["clgrid_path"] = _clgrid_path()
    res["clgrid_tree_sha1"] = tree_digest()
    print(f"clgrid from {res['clgrid_path']} (sources {res['clgrid_tree_sha1']})", flush=True)
    if not res["clgrid_path"].startswith(ROOT + os.sep):
        raise SystemExit(f"clgrid was imported from {res['clgrid_path']}, not this repository ({ROOT})")
    if os.path.isdir("/dev/shm"):              # clgrid.dask's values and images pass there (kept files)
        fs = os.statvfs("/dev/shm")
        res["dev_shm_gib"] = {"size": fs.f_blocks * fs.f_frsize / 2 ** 30, "free": fs.f_bavail * fs.f_frsize / 2 ** 30}
        print(f"/dev/shm: {res['dev_shm_gib']['free']:.1f} GiB free of {res['dev_shm_gib']['size']:.1f}", flush=True)
    try:
        import subprocess

        res["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        pass
    began = time.perf_counter()
    res["process"], res["dask"] = [], []
    res["skipped"] = []

    def over(what: str) -> bool:
        if time.perf_counter() - began > a.budget:
            res["skipped"].append(what)
            print(f"skipped (past --budget {a.budget:.0f} s): {what}", flush=True)
            return True
        return False

    for name in a.sets:
        if over(f"set {name}"):
            continue
        start = time.perf_counter()
        data = make_set(*SETS[name])
        print(f"{name}: {data['vis'].size:,} visibilities into {data['npix']}^2, made in "
              f"{time.perf_counter() - start:.1f} s; devices {devices}", flush=True)
        baseline, reference = {}, None
        if "process" in a.parts:
            start = time.perf_counter()
            row = process_part(name, data, devices, a)
            reference = row.pop("reference")
            baseline = row["runs"]["1"]
            row["part_s"] = time.perf_counter() - start
            res["process"].append(row)
            summary(row)
            print(f"  ({row['part_s']:.0f} s; {time.perf_counter() - began:.0f} s so far)", flush=True)
        if "dask" in a.parts and not over(f"dask, set {name}"):
            if reference is None:
                one = clgrid.WGridder(data["uvw"], data["freq"], data["npix"], data["npix"], data["pix"], data["pix"],
                                      a.epsilon, True, precision="single", device=devices[0], nthreads=a.nthreads)
                reference = {"image": one.vis2dirty(data["vis"]), "vis": one.dirty2vis(data["dirty"])}
                del one
            start = time.perf_counter()
            row = dask_part(name, data, devices, baseline, reference, a)
            row["part_s"] = time.perf_counter() - start
            res["dask"].append(row)
            print(f"  ({row['part_s']:.0f} s; {time.perf_counter() - began:.0f} s so far)", flush=True)
        del data, reference
        gc.collect()
        if a.json:                                   # what is done so far, should a later part fail
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    if "cpu" in a.parts and not over("cpu"):
        start = time.perf_counter()
        res["cpu"] = cpu_part(*SETS[a.cpu_set], a)
        res["cpu"]["part_s"] = time.perf_counter() - start
    res["total_s"] = time.perf_counter() - began
    report(res, a.json)


def summary(row: dict) -> None:
    print(f"  {row['set']}: reused vis2dirty / dirty2vis, one call (speedups against one device)", flush=True)
    for key, r in row["runs"].items():
        call = row["calls"].get(key.split("_")[0], {}) if key.endswith("planes") or key == "1" else {}
        text = (f"    {key:>9}: {r['vis2dirty_reused_s']:.3f} s ({r['speedup_vis2dirty_reused']:.2f}x) / "
                f"{r['dirty2vis_reused_s']:.3f} s ({r['speedup_dirty2vis_reused']:.2f}x), set-up {r['setup_s']:.2f} s")
        if call:
            text += (f"; one call {call['vis2dirty_call_s']:.3f} s ({call['speedup_vis2dirty_call']:.2f}x) / "
                     f"{call['dirty2vis_call_s']:.3f} s ({call['speedup_dirty2vis_call']:.2f}x)")
        print(text + f"; errors {r['image_error_vs_one_device']:.1e} / {r['vis_error_vs_one_device']:.1e}",
              flush=True)
    if "ducc0" in row:
        d = row["ducc0"]
        print(f"    ducc0 ({d['nthreads']} threads): {d['vis2dirty_s']:.3f} s / {d['dirty2vis_s']:.3f} s", flush=True)


if __name__ == "__main__":
    main()
