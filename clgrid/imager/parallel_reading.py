"""A Measurement Set's rows read by several processes at once, into shared memory.

python-casacore is not thread-safe and holds one table per process, and its reading (the
storage managers' copies) runs on one core.  On a machine with many cores the read is then
most of a large image's time on a GPU.  `read_in_processes` starts ``readers`` processes,
each opening the MS itself and reading a disjoint range of the band's rows with the same
loop as a single read (`clgrid.imager.ms_rows.read_rows`): reading the columns, forming
each polarisation (Stokes I from XX and YY, say), zeroing flagged, non-finite and
autocorrelation samples, straight into the output arrays.  The output arrays are one block
of shared memory (``os.memfd_create``: Linux), made here and mapped by each reader, so the
main process receives only what the imaging uses, and nothing is copied back.

Memory: the output arrays (as a single read's) plus each reader's two blocks of rows
(about ``_BLOCK_SAMPLES`` samples each) and its own interpreter (numpy and casacore, some
tens of MiB).  A reader is a fresh interpreter that imports numpy, casacore and the
row-reading module only (not clgrid, nor any OpenCL driver): no fork of a process that
holds device contexts or threads.
"""

from __future__ import annotations

import json
import mmap
import os
import selectors
import subprocess
import sys
import tempfile

import numpy as np

from .ms_rows import RowSpec, spec_json, views

__all__ = ["read_in_processes"]

_HERE = os.path.dirname(os.path.abspath(__file__))
# the reader's whole program: the row-reading module, found by path (not as clgrid's)
_PROGRAM = (f"import sys; sys.path.append({_HERE!r}); import ms_rows; "
            f"sys.exit(ms_rows.worker_main())")
_ALIGN = 4096


def _layout(nrow: int, pols, widths) -> tuple:
    """Offsets of uvw and each polarisation's arrays in the shared block, and its size."""
    offset = 0

    def take(nbytes):
        nonlocal offset
        at = offset
        offset += -(-nbytes // _ALIGN) * _ALIGN
        return at

    layout = {"nrow": nrow, "widths": list(widths), "uvw": take(nrow * 3 * 8)}
    layout["vis"] = {p: [take(nrow * w * 8) for w in widths] for p in pols}
    layout["wgt"] = {p: [take(nrow * w * 4) for w in widths] for p in pols}
    return layout, max(offset, _ALIGN)


def read_in_processes(path: str, queries, spec: RowSpec, nrow: int, pols, readers: int, progress=None,
                      begun=None) -> tuple:
    """Rows ``0..nrow`` of the MS at ``path`` (the rows the TaQL conditions ``queries``
    select, in order) read by ``readers`` processes as ``spec`` says; returns ``(uvw, vis,
    wgt, counts, first TIME, last TIME, the largest peak resident memory of a reader in
    bytes)`` as `clgrid.imager.ms.MeasurementSet.read` forms
    them.  ``progress(n)`` is called (in this process) as blocks are read, ``begun()`` once
    every reader is launched.  A reader that
    fails raises RuntimeError with its error output; the others are stopped."""
    widths = [b - a for a, b in spec.groups]
    layout, size = _layout(nrow, pols, widths)
    fd = os.memfd_create("clgrid-ms-rows", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        readers = max(1, min(readers, nrow))
        bounds = np.linspace(0, nrow, readers + 1).astype(np.int64)
        jobs = [{"path": os.path.abspath(path), "queries": list(queries), "spec": spec_json(spec),
                 "start": int(a), "stop": int(b), "fd": fd, "size": size, "layout": layout}
                for a, b in zip(bounds[:-1], bounds[1:])]
        results = _run(jobs, fd, progress, begun)
        # mapped here once the readers are done, its pages filled in one call (not a fault each)
        shared = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
    finally:
        os.close(fd)                                  # the mapping stays while the arrays live
    uvw, vis, wgt = views(shared, layout)
    counts = {"autocorrelation rows": 0, "flagged rows": 0}
    first, last = np.inf, -np.inf
    for r in results:
        for key in counts:
            counts[key] += r["counts"][key]
        first, last = min(first, r["first"]), max(last, r["last"])
    return uvw, vis, wgt, counts, first, last, max(r["peak_bytes"] for r in results)


def _run(jobs: list, fd: int, progress, begun=None) -> list:
    """Start one reader per job, pass on their progress, return their results in order."""
    processes, errors = [], []
    selector = selectors.DefaultSelector()
    results = [None] * len(jobs)
    try:
        for index, job in enumerate(jobs):
            err = tempfile.TemporaryFile()
            errors.append(err)
            proc = subprocess.Popen([sys.executable, "-c", _PROGRAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=err, pass_fds=(fd,))
            processes.append(proc)
            proc.stdin.write(json.dumps(job).encode() + b"\n")
            proc.stdin.close()
            selector.register(proc.stdout, selectors.EVENT_READ, index)
        if begun is not None:
            begun()
        open_pipes = len(processes)
        pending = [b""] * len(processes)            # each reader's output not yet a whole line
        while open_pipes:
            for key, _ in selector.select():
                index = key.data
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_pipes -= 1
                    continue
                *lines, pending[index] = (pending[index] + chunk).split(b"\n")
                for line in lines:
                    if line.startswith(b"progress "):
                        if progress is not None:
                            progress(int(line.split()[1]))
                    elif line.startswith(b"done "):
                        results[index] = json.loads(line[5:])
        for index, (proc, job) in enumerate(zip(processes, jobs)):
            code = proc.wait()
            if code != 0 or results[index] is None:
                errors[index].seek(0)
                said = errors[index].read().decode(errors="replace").strip().splitlines()[-20:]
                raise RuntimeError(f"reading {job['path']}: the reader process of rows {job['start']}-{job['stop']} "
                                   f"exited with status {code}:\n" + "\n".join(said))
        return results
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        for err in errors:
            err.close()
        selector.close()
