"""One range of a Measurement Set's rows read and formed into the imager's arrays: the loop
that `clgrid.imager.ms.MeasurementSet.read` runs over all rows, and that each reader
process of `clgrid.imager.parallel_reading` runs over its own rows.

`RowSpec` says what to read (data and weight columns, which correlations, whole cells or
strided slices, the polarisation recipes, the channel groups, the block size); `read_rows`
reads rows ``start`` to ``stop`` a block at a time into the given output arrays (indexed
by the MS's row number), the block's polarisations formed on other threads while the next
block is read.  Both ways of reading run this one loop, so they give the same values.

The module imports only numpy, and `clgrid.imager.correlations` (numpy only): a reader
process runs it as a script (``worker_main``), without importing clgrid and its OpenCL
layer, so that it starts in a fraction of a second.
"""

from __future__ import annotations

import json
import mmap
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

try:
    from .correlations import Recipe
except ImportError:                                   # run as a reader process's script
    from correlations import Recipe  # type: ignore[no-redef]

__all__ = ["RowSpec", "read_rows", "worker_main"]


@dataclass
class RowSpec:
    """What `read_rows` reads of each row.

    ``whole``: whole cells (every correlation) where true, else the strided slice
    ``lo``..``hi`` by ``step`` of the correlations; ``recipes`` each polarisation's
    ``(name, indices, coefficients)`` with indices into the correlations read; ``groups``
    ``(start, stop)`` of the channels of each output group; ``spectrum``: the weights are
    ``WEIGHT_SPECTRUM`` (else ``WEIGHT``, one per correlation)."""

    data_column: str
    spectrum: bool
    whole: bool
    lo: int
    hi: int
    step: int
    nchan: int
    ncorr: int
    recipes: list
    groups: list
    has_flag_row: bool
    block_rows: int

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "RowSpec":
        d = dict(d)
        d["recipes"] = [(str(p), tuple(i), tuple(complex(*c) if isinstance(c, list) else c for c in k))
                        for p, i, k in d["recipes"]]
        d["groups"] = [tuple(g) for g in d["groups"]]
        return cls(**d)


def _coefficients_json(coefficients) -> list:
    return [[c.real, c.imag] if isinstance(c, complex) else c for c in coefficients]


def spec_json(spec: RowSpec) -> dict:
    """``spec`` as JSON-able values (complex coefficients as ``[re, im]``)."""
    d = spec.to_json()
    d["recipes"] = [(p, list(i), _coefficients_json(k)) for p, i, k in spec.recipes]
    d["groups"] = [list(g) for g in spec.groups]
    return d


class _Block:
    """Buffers for one block of rows as read from the MS."""

    def __init__(self, spec: RowSpec):
        rows, nchan, ncorr = spec.block_rows, spec.nchan, spec.ncorr
        self.data = np.empty((rows, nchan, ncorr), np.complex64)
        self.flags = np.empty((rows, nchan, ncorr), bool)
        self.weights = np.empty((rows, nchan, ncorr) if spec.spectrum else (rows, ncorr), np.float32)
        self.ant1, self.ant2 = np.empty(rows, np.int32), np.empty(rows, np.int32)
        self.time = np.empty(rows, np.float64)
        self.flag_row = np.empty(rows, bool)


def _in_one(n: int, fn) -> None:
    fn(slice(0, n))


def read_rows(table, spec: RowSpec, start: int, stop: int, uvw, vis: dict, wgt: dict, progress=None,
              split=_in_one, background=None) -> tuple:
    """Read rows ``start`` to ``stop`` of casacore ``table`` into ``uvw`` (rows, 3),
    ``vis[pol][g]`` and ``wgt[pol][g]`` (rows, channels of group g), all indexed by row
    number; returns ``(counts, first TIME, last TIME)`` (counts of autocorrelation rows
    and flagged rows).  ``split(n, fn)`` runs ``fn`` over slices of ``range(n)`` (threads
    where given); ``background(fn, *args)`` starts a job and returns a future (a thread of
    this module's own where None); ``progress(n)`` after each block."""
    recipes = {p: Recipe(p, tuple(i), tuple(k)) for p, i, k in spec.recipes}
    groups = [slice(a, b) for a, b in spec.groups]
    nchan, ncorr, block_rows = spec.nchan, spec.ncorr, spec.block_rows
    blc, trc, inc = [0, spec.lo], [nchan - 1, spec.hi], [1, spec.step]
    own = None
    if background is None:
        own = ThreadPoolExecutor(1)
        background = own.submit
    buffers = [_Block(spec) for _ in range(2)]        # a block is formed while the next is read
    counts = {"autocorrelation rows": 0, "flagged rows": 0}
    first, last = np.inf, -np.inf
    forming = None
    try:
        for index, at in enumerate(range(start, stop, block_rows)):
            n = min(block_rows, stop - at)
            b = buffers[index % 2]
            if spec.whole:
                table.getcolnp(spec.data_column, b.data[:n], at, n)
                table.getcolnp("FLAG", b.flags[:n], at, n)
                table.getcolnp("WEIGHT_SPECTRUM" if spec.spectrum else "WEIGHT", b.weights[:n], at, n)
            else:
                table.getcolslicenp(spec.data_column, b.data[:n], blc, trc, inc, at, n)
                table.getcolslicenp("FLAG", b.flags[:n], blc, trc, inc, at, n)
                if spec.spectrum:
                    table.getcolslicenp("WEIGHT_SPECTRUM", b.weights[:n], blc, trc, inc, at, n)
                else:
                    table.getcolslicenp("WEIGHT", b.weights[:n], [spec.lo], [spec.hi], [spec.step], at, n)
            table.getcolnp("UVW", uvw[at:at + n], at, n)
            table.getcolnp("ANTENNA1", b.ant1[:n], at, n)
            table.getcolnp("ANTENNA2", b.ant2[:n], at, n)
            table.getcolnp("TIME", b.time[:n], at, n)
            first, last = min(first, float(b.time[:n].min())), max(last, float(b.time[:n].max()))
            dropped = b.ant1[:n] == b.ant2[:n]
            counts["autocorrelation rows"] += int(np.count_nonzero(dropped))
            if spec.has_flag_row:
                table.getcolnp("FLAG_ROW", b.flag_row[:n], at, n)
                counts["flagged rows"] += int(np.count_nonzero(b.flag_row[:n] & ~dropped))
                dropped |= b.flag_row[:n]
            if forming is not None:
                forming.result()
            forming = background(_form_block, b, n, at, dropped, recipes, groups, vis, wgt, nchan, ncorr, split)
            if progress is not None:
                progress(n)
        if forming is not None:
            forming.result()
    finally:
        if own is not None:
            own.shutdown()
    return counts, first, last


def _form_block(b: _Block, n: int, start: int, dropped, recipes: dict, groups, vis, wgt, nchan: int,
                ncorr: int, split) -> None:
    """Each polarisation of a block of ``n`` rows into its output arrays (rows ``start`` on),
    the block's rows shared out by ``split``."""
    weights = b.weights[:n] if b.weights.ndim == 3 else np.broadcast_to(b.weights[:n, None, :], (n, nchan, ncorr))

    def part(rows):
        for p, r in recipes.items():
            for g, group in enumerate(groups):
                if group.stop <= group.start:
                    continue
                out = slice(start + rows.start, start + rows.stop)
                out_v, out_w = vis[p][g][out], wgt[p][g][out]
                r.form(b.data[rows, group], b.flags[rows, group], weights[rows, group], out_v, out_w)
                if r.coefficients != (1.0,):
                    out_w *= 4.0                      # WSClean's factor for a formed Stokes weight
                gone = dropped[rows]
                out_w[gone] = 0
                out_v[gone] = 0

    split(n, part)


def views(buffer, layout: dict) -> tuple:
    """``(uvw, vis, wgt)`` numpy arrays over ``buffer`` as ``layout`` places them
    (`clgrid.imager.parallel_reading`): ``{"uvw": offset, "vis": {pol: [offset, ...]},
    "wgt": ..., "nrow": rows, "widths": [channels of each group]}``."""
    nrow, widths = layout["nrow"], layout["widths"]
    uvw = np.frombuffer(buffer, np.float64, nrow * 3, layout["uvw"]).reshape(nrow, 3)
    vis = {p: [np.frombuffer(buffer, np.complex64, nrow * w, o).reshape(nrow, w) for o, w in zip(offsets, widths)]
           for p, offsets in layout["vis"].items()}
    wgt = {p: [np.frombuffer(buffer, np.float32, nrow * w, o).reshape(nrow, w) for o, w in zip(offsets, widths)]
           for p, offsets in layout["wgt"].items()}
    return uvw, vis, wgt


def _peak_bytes() -> int:
    """This process's peak resident memory since it started its program: VmHWM (not
    ``ru_maxrss``, which keeps the peak of the process it was forked from across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def worker_main() -> int:
    """A reader process: the job as JSON on stdin (``path``, ``queries``: TaQL conditions
    selecting the band's rows, ``spec``, ``start``, ``stop``, ``fd``, ``size``, ``layout``);
    writes its rows into the shared memory ``fd``, prints ``progress N`` (rows read since
    the last such line, a line every tenth of a second at most)
    and ``done {json}`` (counts, first and last TIME, its peak resident memory) at the end."""
    job = json.loads(sys.stdin.readline())
    from casacore.tables import table

    main = table(job["path"], ack=False)
    rows = main
    for condition in job["queries"]:
        rows = rows.query(condition)
    shared = mmap.mmap(job["fd"], job["size"])
    uvw, vis, wgt = views(shared, job["layout"])
    out = sys.stdout
    said = {"rows": 0, "at": time.monotonic()}

    def progress(n):                                  # a line every tenth of a second at most
        said["rows"] += n
        now = time.monotonic()
        if now - said["at"] >= 0.1:
            out.write(f"progress {said['rows']}\n")
            out.flush()
            said["rows"], said["at"] = 0, now

    counts, first, last = read_rows(rows, RowSpec.from_json(job["spec"]), job["start"], job["stop"], uvw, vis, wgt,
                                    progress)
    del uvw, vis, wgt
    if said["rows"]:
        out.write(f"progress {said['rows']}\n")
    done = {"counts": counts, "first": first, "last": last, "peak_bytes": _peak_bytes()}
    out.write("done " + json.dumps(done) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(worker_main())
