"""Where a reused `clgrid.dask.vis2dirty` on GPU workers loses time against one process
(issue 28, docs/benchmarks/dask.md): the pieces timed *inside* the workers, call by call.

The same data as ``benchmarks/devices.py`` (``--set``), then:

- ``process``: `WGridder(device=d0)` and `WGridder(device=[d0, d1, ...])` in this
  process, reused vis2dirty, each piece timed (below); then the one-device operator fed
  the same vis from three kinds of host memory: a numpy array, a kept /dev/shm mapping
  (what a Dask slab task uploads from) and a buffer of Python bytes (what a Dask worker
  holds after receiving a block).
- ``n``: one worker per device (the planes split), ``1n``: one worker with every device
  (``$CLGRID_DEVICE`` naming them all): the first call, then ``--repeats`` reused calls;
  after each, every worker's records: each task's wall time and page faults (the
  process's minor faults while it ran), its pieces (chunk_values: the shared-memory
  mapping and `values_at`; image_slab / image_chunk: the operator's lookup, the values'
  mapping, the imaging, the facets' copy), and below the operator: ``host_empty`` (and
  whether its pinned block was new or reused), each engine's upload-and-gather
  (``_gather_values``), its planes on the device with the image's way down
  (``_vis2dirty_device``), and the staging copies, with the device and host thread of
  each.  Then, outside Dask's tasks (``client.run``, the worker's own thread), each
  worker's kept operator called directly: alone (one worker at a time) and all at once,
  with its values from shared memory and from a fresh numpy copy.  Last, each worker's
  facts: CPUs it may run on and the NUMA nodes of those, the devices (PCI bus) of its
  engines, transparent huge pages of its vis block.

    python benchmarks/dask_probe.py --devices nvidia --set large --json probe.json    # two GPUs, ~2 min
    python benchmarks/dask_probe.py --devices pocl pocl --set medium --force-staging  # here (CPU, staging forced)

Instrumentation is installed at run time (module attributes wrapped in each process); the
library is not changed.  Prints one line per call per worker; ``--json`` keeps everything.
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# the workers import this module by name (its state lives there, not in pickled copies)
os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.dirname(os.path.abspath(__file__))] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

import clgrid  # noqa: E402
from devices import SETS, expand, make_set  # noqa: E402

# -- instrumentation (runs in every process it is installed in) ---------------------------

_records: list = []
_facts: dict = {}
_rec_lock = threading.Lock()
_originals: list = []         # (owner, name, the real attribute): what uninstall puts back


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _record(what: str, start: float, extra: dict | None = None) -> None:
    row = {"what": what, "s": round(time.perf_counter() - start, 5), "at": round(start, 4),
           "thread": threading.current_thread().name}
    if extra:
        row.update(extra)
    with _rec_lock:
        _records.append(row)


def _wrap(owner, name: str, what: str, describe=None, faults: bool = False):
    real = getattr(owner, name)
    if getattr(real, "_probe", False):
        return

    def wrapped(*args, **kwargs):
        start, f0 = time.perf_counter(), _faults() if faults else 0
        try:
            return real(*args, **kwargs)
        finally:
            extra = describe(*args, **kwargs) if describe else {}
            if faults:
                extra["minflt"] = _faults() - f0
            _record(what, start, extra)

    wrapped._probe = True
    _originals.append((owner, name, real))
    setattr(owner, name, wrapped)


def _engine_facts(e) -> dict:
    d = e.queue.device
    facts = {"device": d.name.strip(), "ctx": hex(e.queue.context.int_ptr)[-6:]}
    for attr in ("pci_bus_id_nv", "pci_slot_id_nv", "topology_amd"):
        try:
            facts[attr] = str(getattr(d, attr))
        except Exception:           # noqa: BLE001 - not every platform has these
            pass
    return facts


def install(force_staging: bool = False) -> str:
    """Wrap the pieces (once per process)."""
    from clgrid.dask import exchange, tasks
    from clgrid.device import transfer
    from clgrid.imaging import engine as engine_mod, wgridding

    if _facts.get("installed"):
        return "installed already"
    if force_staging:
        _originals.append((transfer.Staging, "worth_it", transfer.Staging.__dict__["worth_it"]))
        transfer.Staging.worth_it = staticmethod(lambda device: True)
    nbytes = lambda a: {"mb": round(np.asarray(a).nbytes / 1e6, 1)}           # noqa: E731
    _wrap(tasks, "chunk_values", "chunk_values", lambda *a, **k: {"threads": a[4]}, faults=True)
    def vis_block(vis):
        _facts["vis_addr"] = np.asarray(vis).__array_interface__["data"][0]
        return _facts["vis_addr"]

    _wrap(tasks, "values_at", "  values_at", lambda vis, wgt, flat, threads=1, out=None, check=True: {
        "n": int(np.size(vis) if flat is None else len(flat)), "selection": flat is not None,
        "into_shm": out is not None, "vis_addr": vis_block(vis),
        "vis_mb": round(np.asarray(vis).nbytes / 1e6, 1)}, faults=True)
    region = exchange._region

    def _region(path, offset_bytes, nbytes_, writable, make=True):
        key = (path, offset_bytes, nbytes_, writable)
        kept = key in exchange._maps
        start = time.perf_counter()
        out = region(path, offset_bytes, nbytes_, writable, make)
        _record("  _region", start, {"kept": kept, "mb": round(nbytes_ / 1e6, 1), "writable": writable,
                                     "file": os.path.basename(path)[-12:]})
        return out

    _originals.append((exchange, "_region", region))
    exchange._region = _region
    _wrap(tasks, "image_slab", "image_slab", faults=True)
    _wrap(tasks, "image_chunk", "image_chunk", faults=True)
    _wrap(tasks, "_slab_operator", "  operator lookup")
    _wrap(tasks, "_chunk_operator", "  operator lookup")
    _wrap(exchange, "readable", "  values mapped")
    _wrap(tasks, "_imaged", "  imaged", faults=True)
    _wrap(tasks, "sum_facet", "sum_facet", faults=True)

    def remember(image_slab_real=tasks._imaged):
        def imaged(operator, lock, vis, wgt, *rest):
            _facts["last"] = (operator, vis)          # for the direct calls
            return image_slab_real(operator, lock, vis, wgt, *rest)
        imaged._probe = True
        return imaged

    _originals.append((tasks, "_imaged", tasks._imaged))
    tasks._imaged = remember()
    pool_take = transfer._take_pinned

    def take(queue, n, kept_only=False):
        key = (queue.context.int_ptr, n)
        kind = ("first ask" if key not in transfer._asked else "reused" if transfer._pinned.free_blocks().get(key)
                else "NEW PIN")
        start = time.perf_counter()
        out = pool_take(queue, n, kept_only)
        _record("    pinned block", start, {"kind": kind, "mb": round(n / 1e6, 1)})
        return out

    _originals.append((transfer, "_take_pinned", pool_take))
    transfer._take_pinned = take
    _wrap(wgridding, "host_empty", "   host_empty", lambda shape, dtype, staging: {
        "staged": staging is not None})
    E = engine_mod.ImagingEngine
    _wrap(E, "_gather_values", "    engine upload+gather", lambda self, *a, **k: _engine_facts(self), faults=True)
    _wrap(E, "_vis2dirty_device", "    engine planes+down", lambda self, *a, **k: _engine_facts(self))
    _wrap(E, "vis2dirty", "   engine.vis2dirty", lambda self, *a, **k: dict(
        _engine_facts(self), workers=self._workers, out=k.get("out") is not None,
        after=k.get("after") is not None, staging=self.staging is not None, fft=self.device_fft is not None,
        stream=self._stream is not None))
    _wrap(transfer.Staging, "upload", "     staging.upload", lambda self, host, buf: nbytes(host))
    _wrap(transfer.Staging, "download", "     staging.download",
          lambda self, buf, host, wait_for=None, portable=False: nbytes(host))
    _facts["installed"] = True
    return "installed"


def uninstall() -> None:
    """Put every wrapped attribute back (the client must pickle the real tasks)."""
    while _originals:
        owner, name, real = _originals.pop()
        setattr(owner, name, real)
    _facts.clear()


def collect() -> list:
    with _rec_lock:
        out = list(_records)
        _records.clear()
    return out


def _huge_pages(address: int) -> dict:
    """The mapping of /proc/self/smaps holding ``address``: its size, AnonHugePages, ShmemPmdMapped."""
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    found, out = False, {}
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            if found:
                break
            found = lo <= address < hi
            if found:
                out = {"mapping_mb": round((hi - lo) / 1e6, 1), "name": line.split()[-1] if len(line.split()) > 5 else ""}
        elif found and head in ("AnonHugePages:", "ShmemPmdMapped:", "Rss:", "FilePmdMapped:"):
            out[head[:-1]] = line.split()[1] + " kB"
    return out


def facts() -> dict:
    """This process's CPUs, their NUMA nodes, its kept operators' engines, THP settings."""
    from clgrid.dask import tasks

    cpus = sorted(os.sched_getaffinity(0))
    nodes = {}
    for node in sorted(os.listdir("/sys/devices/system/node")) if os.path.isdir("/sys/devices/system/node") else []:
        if node.startswith("node"):
            try:
                with open(f"/sys/devices/system/node/{node}/cpulist") as f:
                    nodes[node] = f.read().strip()
            except OSError:
                pass
    out = {"pid": os.getpid(), "cpus": f"{len(cpus)} ({cpus[0]}-{cpus[-1]})", "numa_nodes": nodes,
           "env": {k: os.environ.get(k) for k in ("CLGRID_DEVICE", "OMP_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_",
                                                   "CUDA_VISIBLE_DEVICES")}}
    for name in ("enabled", "defrag", "shmem_enabled"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as f:
                out[f"thp_{name}"] = f.read().strip()
        except OSError:
            pass
    try:
        with open("/proc/mounts") as f:
            out["dev_shm_mount"] = [line.split()[3] for line in f if " /dev/shm " in line]
    except OSError:
        pass
    out["operators"] = [[_engine_facts(e) | {"planes": [e.planes.start, e.planes.stop], "samples": e.num_kept,
                                             "workers": e._workers} for e in op.engines]
                        for op, _ in tasks._operators.values()]
    last = _facts.get("last")
    if last is not None:
        vis = last[1]
        out["last_values"] = {"shape": list(vis.shape), "writeable": bool(vis.flags.writeable),
                              "base": type(vis.base).__name__} | _huge_pages(vis.__array_interface__["data"][0])
    if "vis_addr" in _facts:                  # the vis block a chunk_values task read
        out["vis_block"] = _huge_pages(_facts["vis_addr"])
    return out


def direct(copy: bool, repeats: int = 2) -> dict:
    """The last imaging task's operator called here, outside Dask's task (its values as the
    task had them, or a fresh numpy copy): seconds per call."""
    last = _facts.get("last")
    if last is None:
        return {}
    operator, vis = last
    values = np.array(vis) if copy else vis
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        operator.vis2dirty(values)
        times.append(round(time.perf_counter() - start, 4))
    return {"copy": copy, "times": times, "records": collect()}


# -- the runs ------------------------------------------------------------------------------

def show(label: str, records: list) -> None:
    for r in records:
        extra = {k: v for k, v in r.items() if k not in ("what", "s", "at", "thread")}
        print(f"      {label} {r['what']:<28} {r['s']:.4f} s  [{r['thread'][-14:]}] {extra}", flush=True)


def process_part(data: dict, devices: list, a) -> dict:
    install(a.force_staging)
    uvw, freq, vis, npix, pix = (data[k] for k in ("uvw", "freq", "vis", "npix", "pix"))
    kw = dict(npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4, do_wgridding=True,
              precision="single", nthreads=a.nthreads, tuning=a.tuning)
    out = {}
    ops = {"1 device": clgrid.WGridder(uvw, freq, device=devices[0], **kw),
           f"{len(devices)} devices": clgrid.WGridder(uvw, freq, device=devices, **kw)}
    for label, op in ops.items():
        op.vis2dirty(vis)
        collect()
        times = []
        for i in range(a.repeats):
            start = time.perf_counter()
            op.vis2dirty(vis)
            times.append(time.perf_counter() - start)
            records = collect()
            if i == a.repeats - 1:
                print(f"  process, {label}: vis2dirty {np.median(times):.3f} s (median of {times}); last call:")
                show("", records)
        out[label] = {"times": times, "engines": [_engine_facts(e) for e in op.engines], "last_records": records}
    # the one-device operator fed the vis from three kinds of memory
    from clgrid.dask import exchange

    one = ops["1 device"]
    path = f"/dev/shm/clgrid-probe-{os.getpid()}"
    try:
        room = exchange._region(path, 0, vis.nbytes, True).view(vis.dtype).reshape(vis.shape)
        room[...] = vis
        raw = bytes(vis.data)
        sources = {"numpy": vis, "/dev/shm": room, "bytes": np.frombuffer(raw, vis.dtype).reshape(vis.shape)}
        out["sources"] = {}
        for name, v in sources.items():
            times = []
            for _ in range(3):
                start = time.perf_counter()
                one.vis2dirty(v)
                times.append(round(time.perf_counter() - start, 4))
            uploads = [r["s"] for r in collect() if "upload+gather" in r["what"]]
            out["sources"][name] = {"times": times, "upload_gather_s": uploads}
            print(f"  process, 1 device, vis from {name}: {times} s; upload+gather {uploads}", flush=True)
        del room, sources, raw
    finally:
        exchange.release()
        if os.path.exists(path):
            os.unlink(path)
    del ops, one
    import gc

    gc.collect()                              # (the operators' device memory, before the workers')
    uninstall()
    return out


def _set_device(spec):
    os.environ["CLGRID_DEVICE"] = spec
    import clgrid.dask

    clgrid.dask.clear_cache()
    return spec


def dask_part(label: str, assignment: list, data: dict, a) -> dict:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import clgrid.dask as cd
    import dask_probe as me             # by reference in client.run: the workers' own module and records

    uvw, freq, vis, npix, pix = (data[k] for k in ("uvw", "freq", "vis", "npix", "pix"))
    n = len(assignment)
    threads = max(1, a.nthreads // n)
    trim = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
    out = {"config": label, "calls": []}
    with dask.config.set(trim), LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                             dashboard_address=None, memory_limit=0) as cluster, \
            Client(cluster) as client:
        workers = sorted(client.nthreads())
        short = {w: w.rsplit(":", 1)[-1] for w in workers}
        for address, devs in zip(workers, assignment):
            client.run(_set_device, ", ".join(devs), workers=[address])
        client.run(me.install, a.force_staging)
        rows = -(-len(uvw) // n)
        duvw = client.persist(da.from_array(uvw, chunks=(rows, 3)))
        dvis = client.persist(da.from_array(vis, chunks=(rows, freq.size)))
        wait([duvw, dvis])
        where = client.who_has([duvw, dvis])
        common = dict(uvw=duvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4, do_wgridding=True,
                      nthreads=threads, slab_samples=int(vis.size), tuning=a.tuning)
        start = time.perf_counter()
        cd.vis2dirty(vis=dvis, npix_x=npix, npix_y=npix, **common)
        first = time.perf_counter() - start
        client.run(me.collect)
        print(f"  dask {label}: first call {first:.3f} s; blocks: "
              f"{ {str(k)[-30:]: [short.get(w, w) for w in v] for k, v in where.items()} }", flush=True)
        for i in range(a.repeats):
            start = time.perf_counter()
            cd.vis2dirty(vis=dvis, npix_x=npix, npix_y=npix, **common)
            wall = time.perf_counter() - start
            records = client.run(me.collect)
            out["calls"].append({"wall_s": wall, "records": {short[w]: r for w, r in records.items()}})
            print(f"    reused call {i}: {wall:.3f} s", flush=True)
            for w, r in records.items():
                for row in r:
                    row["at"] = round(row["at"] - min(x["at"] for x in r), 4)
                show(f"@{short[w]}", r)
        out["facts"] = {short[w]: f for w, f in client.run(me.facts).items()}
        for w, f in out["facts"].items():
            print(f"    facts @{w}: {json.dumps(f)}", flush=True)
        # each worker's operator called directly: alone, then all at once
        out["direct"] = {}
        for w in workers:
            got = client.run(me.direct, False, workers=[w])[w]
            out["direct"][f"alone {short[w]}"] = got
            print(f"    direct, @{short[w]} alone, values as the task had them: {got.get('times')}", flush=True)
            show(f"@{short[w]}", [r for r in got.get("records", []) if "engine" in r["what"] or "pinned" in r["what"]])
        got = client.run(me.direct, False)
        out["direct"]["together"] = got
        print(f"    direct, all workers at once: { {short[w]: g.get('times') for w, g in got.items()} }", flush=True)
        got = client.run(me.direct, True)
        out["direct"]["together, numpy copy"] = got
        print(f"    direct, all at once, values copied into numpy: { {short[w]: g.get('times') for w, g in got.items()} }",
              flush=True)
        client.run(cd.clear_cache)
        cd.clear_cache()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["nvidia"])
    p.add_argument("--set", default="large", choices=tuple(SETS))
    p.add_argument("--parts", nargs="+", default=["process", "n", "1n"], choices=("process", "n", "1n"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--nthreads", type=int, default=os.cpu_count())
    p.add_argument("--force-staging", action="store_true",
                   help="pinned staging and the device FFT on a CPU device (to exercise the GPU paths here)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    a.tuning = {"fft": "mapped"} if a.force_staging else None
    devices = expand(a.devices)
    began = time.perf_counter()
    data = make_set(*SETS[a.set])
    print(f"{a.set}: {data['vis'].size:,} visibilities into {data['npix']}^2; devices {devices}; "
          f"clgrid from {os.path.dirname(clgrid.__file__)}", flush=True)
    res = {"command": " ".join(["python", "benchmarks/dask_probe.py"] + (argv or sys.argv[1:])),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "devices": devices, "main_facts": facts()}
    print(f"  this process: {json.dumps(res['main_facts'])}", flush=True)
    if "process" in a.parts:
        res["process"] = process_part(data, devices, a)
    res["dask"] = []
    if "n" in a.parts and len(devices) > 1:
        res["dask"].append(dask_part(f"{len(devices)} workers, 1 device each", [[d] for d in devices], data, a))
    if "1n" in a.parts:
        res["dask"].append(dask_part(f"1 worker, {len(devices)} devices", [devices], data, a))
    res["total_s"] = time.perf_counter() - began
    print(f"total {res['total_s']:.0f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)


if __name__ == "__main__":
    main()
