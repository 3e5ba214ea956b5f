"""The w-plane split of `clgrid.dask.vis2dirty` / `dirty2vis` with w-gridding: one
geometry for every chunk of the data, the stack of w-planes cut into slabs of about equal
work, and which samples of each chunk each slab takes (and, for `dirty2vis`, how their
predictions go back into the chunk).  Plain numpy on the workers; the tasks are
`clgrid.dask.tasks`', the graph `clgrid.dask.planes_split`'s.

Why slabs of planes, not chunks of rows.  Imaging with w is spreading (each sample's
W x W x W taps, on the W planes from its first one) plus, per w-plane, an FFT of the
padded grid and per-pixel work (crop, w phase, sum).  Rows span every w, so an operator
per chunk of rows repeats every plane: n chunks did n times the FFTs and pixel work
(on 16 cores, 8 workers took several times as long as 1: docs/benchmarks/dask.md).  Here every operator
shares one `ImageGeometry` (`clgrid.imaging.geometry.choose_geometry` on the |w| range and number of
samples reduced over all chunks first: `extent`), and the operator of slab s owns planes
``lo_s .. hi_s - 1`` (`WGridder(planes=...)`).  A sample with first plane g has taps on
planes g .. g + W - 1, so it can straddle slabs.  Two ways to split:

- each sample to the slab of its first plane, that slab's operator transforming planes
  lo .. hi + W - 2: the W - 1 planes past every slab's end are transformed twice, (S - 1)
  (W - 1) extra FFTs (W = 7, 32 planes, 8 slabs: 42, more than the planes themselves);
- each sample to every slab its taps touch, each operator spreading only the taps on its
  own planes: the FFTs and pixel work are the planes' exactly, the spreading too (each tap
  once); what repeats is per-sample work (selecting, moving, planning, the tap tables) for
  the samples near a slab's edges, about 1 + (W - 1) / (planes per slab) times.

The second is what `select` does: on CPUs the planes are the cost, and per-sample work is
the cheap part (on 16 cores, a fraction of the time chunks of rows took at 8 workers:
docs/benchmarks/dask.md).  Each plane is now done once, and what is left is that a plane's
FFT and pixel passes are memory-bound, so processes sharing one machine's memory do not make
them faster.  Taking the samples from each chunk (one pass of comparisons, in place)
rather than re-chunking the data by w (a sort of all samples) moves the same data.

Exactness.  A sample's first plane comes from the planning's own arithmetic
(`ImageGeometry.first_planes`) on the same float64 u, v, w the slab's operator plans: uvw times
freq / c, formed the same way on both sides and handed to the operator with freq = c (a
scale of exactly 1), so `select` and the operators' plans agree to the bit; the slabs'
planes partition the stack, so every tap is spread once (tested: points on slab edges,
slabs without points).

Balance.  Planes differ in work (samples crowd at small |w|): a plane costs its FFT and
pixel work where any tap falls on it, plus its taps' W x W cells
(`clgrid.imaging.geometry.imaging_work`, from a histogram of first planes reduced over the
chunks: `plane_counts`); `slab_bounds` cuts the planes into contiguous slabs with the
smallest largest cost.

Memory.  Samples crowd at small |w|, so the low slabs take most of the data (3.3-3.9 M
of 4 M samples in the benchmark): one task per slab would hold them all.  So no
imaging task takes more than a cap (``slab_samples``: by default the largest chunk's
samples, or on GPU workers what the worker's GPU holds where more,
`clgrid.dask.tasks.slab_capacity`): `slab_sizes` counts, from each chunk's histogram of first planes and by
`select`'s own rule (`_touching`), exactly how many samples the chunk gives each slab,
and `chunk_groups` cuts each slab's chunks into contiguous groups within the cap
(greedy, in chunk order), one task each over the slab's planes.  A chunk's selection is
never cut (it is at most a chunk), so a task holds at most the larger of the cap and
one chunk's share.  The price: each group of a slab transforms the slab's planes again.

What moves (`Part`): the rows of the selected samples (uvw, float64), each sample's row
and channel, and its weighted visibility (the weight applied in `select`, as the operator
would): about 16 bytes a sample in single precision (32 as u, v, w and value), times the
overlap above; the slab's task forms u, v, w (the same products as the planning) only to
build its operator, and a kept operator is found by the parts' token.  For `dirty2vis`
each slab predicts its samples' share (its planes' taps, unweighted); each chunk adds its
slabs' shares in slab order and weights them (`assemble`), on the chunk's worker.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..device.host_threads import in_slices, not_finite, pick
from .recycled import recycled_empty
from ..operators.checks import check_finite_result
from ..imaging.engine import SPARSE_SHARE
from ..imaging.geometry import ImageGeometry, abs_w_range, choose_geometry
from ..imaging.split import fill, first_planes, slab_bounds, touching  # noqa: F401  (slab_bounds: this module's API)
from ..imaging.split import plane_counts as counts_of_planes
from ..imaging.wgridding import RECENTRE
from ..planning.host import SPEED_OF_LIGHT

__all__ = ["Slab", "Part", "extent", "geometry_of", "plane_counts", "slab_bounds", "takes_whole", "slab_sizes",
           "chunk_groups", "selection", "values_at", "parts_at", "select", "points_of", "split", "assemble"]


@dataclass(frozen=True)
class Slab:
    """One imaging task of a slab: the slab's number, the w-planes ``lo:hi`` whose samples
    it holds (empty where lo == hi: more slabs than planes with work), the chunks ``a:b``
    whose samples the task takes (`chunk_groups`), and ``calls``: each direction's planes
    within them, ((direction, (lo, hi)), ...), where the two directions balance at other
    planes (`clgrid.imaging.split.direction_slabs`; empty: both take ``planes``)."""

    index: int
    planes: tuple
    chunks: tuple
    calls: tuple = ()

    def takes(self, direction: str) -> bool:
        """Whether the task's calls in ``direction`` have planes (a slab task whose own
        slab in that direction is empty is left out of that direction's calls)."""
        lo, hi = dict(self.calls)[direction] if self.calls else self.planes
        return lo < hi

    def operator_planes(self):
        """The slab operator's ``planes`` (`clgrid.WGridder`'s): (lo, hi), or one per direction."""
        return dict(self.calls) if self.calls else self.planes

    def describe(self) -> str:
        """The note a failing slab task's error carries to the caller."""
        calls = "".join(f", {d} {lo}:{hi}" for d, (lo, hi) in self.calls)
        return (f"clgrid.dask: w-plane slab {self.index}, planes {self.planes[0]}:{self.planes[1]}{calls}, "
                f"chunks {self.chunks[0]}:{self.chunks[1]}")


def _scale(freq) -> np.ndarray:
    return np.asarray(freq, np.float64).reshape(-1) / SPEED_OF_LIGHT


def _kept(mask) -> np.ndarray | None:
    """Flat indices (row * nchan + channel) of the samples that count; None: all."""
    return None if mask is None else np.flatnonzero(np.asarray(mask).reshape(-1))


def extent(uvw, freq, mask) -> tuple:
    """(smallest |w|, largest |w|, number of samples) over one chunk's kept samples,
    wavelengths; (inf, -inf, 0) without any.  Combined over chunks by `geometry_of` to
    what the operator of all the samples would find (a min and max of the same products)."""
    uvw = np.asarray(uvw, np.float64)
    scale = _scale(freq)
    keep = None if mask is None else np.asarray(mask) != 0
    count = uvw.shape[0] * scale.size if keep is None else int(np.count_nonzero(keep))
    if count == 0:
        return np.inf, -np.inf, 0
    lo, hi = abs_w_range(uvw, scale, keep)
    return lo, hi, count


def geometry_of(extents: list, options: dict) -> ImageGeometry:
    """The geometry of all the chunks, from their `extent`: `choose_geometry` with the
    call's keywords (``options``, `clgrid.dask.wgridding`'s)."""
    count = sum(e[2] for e in extents)
    w_range = (min(e[0] for e in extents), max(e[1] for e in extents)) if count else None
    o = options
    return choose_geometry(o["npix_x"], o["npix_y"], o["pixsize_x"], o["pixsize_y"], o["epsilon"],
                           o["do_wgridding"], w_range, count, o["flip_u"], o["flip_v"], o["center_x"],
                           o["center_y"], o["sigma_min"], o["sigma_max"], o["precision"], RECENTRE)


def _first_planes(uvw, freq, mask, geometry: ImageGeometry, threads: int = 1) -> np.ndarray:
    """Each of one chunk's samples' first w-plane (nrow, nchan), -1 where masked: the
    planning's own arithmetic on |w| times freq / c (`clgrid.imaging.split.first_planes`,
    as the device list's split, on ``threads`` host threads).  Refuses rows with NaN or
    infinite uvw where a sample is kept."""
    uvw, scale = np.asarray(uvw, np.float64), _scale(freq)
    keep = None if mask is None else np.asarray(mask) != 0
    bad_rows = ~np.all(np.isfinite(uvw), axis=1)
    if bad_rows.any():
        bad = np.count_nonzero(bad_rows) * scale.size if keep is None else int(np.count_nonzero(keep[bad_rows]))
        if bad:
            raise ValueError(f"uvw has NaN or infinite entries where not masked ({bad} samples)")
    return first_planes(uvw, scale, keep, geometry, threads)


def plane_counts(uvw, freq, mask, geometry: ImageGeometry, threads: int = 1) -> np.ndarray:
    """How many of one chunk's kept samples have each first plane (num_planes,), on
    ``threads`` host threads."""
    return counts_of_planes(_first_planes(uvw, freq, mask, geometry, threads), geometry, threads)


def _touching(first: np.ndarray, lo: int, hi: int, support: int) -> np.ndarray:
    return touching(first, lo, hi, support)


def takes_whole(count: int, kept: int, total: int) -> bool:
    """Whether a slab takes a chunk whole: every one of the chunk's ``total`` samples
    kept (no mask, or none masked) and the slab's ``count`` of them at least
    `clgrid.imaging.engine.SPARSE_SHARE` of them.  Its selection is then None (every
    sample), its values the chunk's vis block as it is (a plain copy, no picks), and its
    operator, which plans the slab's planes only, drops the samples without a tap there
    itself (as a device's engine in `WGridder`'s planes split does), uploading whole rows
    as it would for the picked ones."""
    return total > 0 and kept == total and count >= SPARSE_SHARE * total


def slab_sizes(counts: np.ndarray, geometry: ImageGeometry, bounds: list, total: int | None = None) -> list:
    """How many samples `select` takes from one chunk for each slab of ``bounds``, from
    the chunk's `plane_counts` by `select`'s own rule (`_touching`): exactly its parts'
    lengths; with ``total`` (the chunk's rows times channels), ``total`` for a slab that
    takes the chunk whole (`takes_whole`), as `clgrid.dask.tasks.chunk_selection` does."""
    planes = np.arange(geometry.num_planes)
    sizes = [int(counts[_touching(planes, lo, hi, geometry.kernel.support)].sum()) for lo, hi in bounds]
    if total is None:
        return sizes
    kept = int(np.sum(counts))
    return [total if takes_whole(n, kept, total) else n for n in sizes]


def chunk_groups(counts: list, geometry: ImageGeometry, bounds: list, cap: int, totals: list | None = None) -> list:
    """For each slab of ``bounds``, its chunks cut into groups, one imaging task each:
    (start, end) ranges of chunk numbers, contiguous and in order, taken while the
    group's samples for the slab (`slab_sizes` of each chunk's ``counts``) stay within
    ``cap``.  A chunk is never cut, so a group over ``cap`` is one chunk (with
    neighbours that give the slab nothing).  ``totals``: each chunk's samples, where a
    slab may take it whole (`slab_sizes`)."""
    totals = [None] * len(counts) if totals is None else totals
    sizes = [slab_sizes(c, geometry, bounds, t) for c, t in zip(counts, totals)]         # by chunk, then slab
    groups = []
    for s in range(len(bounds)):
        starts = fill([chunk[s] for chunk in sizes], cap)
        groups.append(list(zip(starts, starts[1:] + [len(counts)])))
    return groups


@dataclass
class Part:
    """One chunk's samples for one slab, as they travel to it: the rows they are in
    (``uvw``, metres), each sample's row among them and channel, the chunk's freq / c,
    and the samples' weighted visibilities (None for `dirty2vis`).  Rows rather than
    u, v, w per sample: a row's channels mostly go to the same slabs, and 14 bytes per
    sample move instead of 32 (single precision).  ``whole``: every sample of the chunk,
    each row's channels in order (`_whole_part`)."""

    uvw: np.ndarray
    row: np.ndarray
    chan: np.ndarray
    scale: np.ndarray
    values: np.ndarray | None
    whole: bool = False

    def __len__(self) -> int:
        return len(self.row)

    def __sizeof__(self) -> int:
        """Its arrays' bytes (what Dask weighs moving it by, `dask.sizeof`)."""
        return object.__sizeof__(self) + sum(a.nbytes for a in (self.uvw, self.row, self.chan, self.scale, self.values)
                                             if a is not None)

    def points(self) -> np.ndarray:
        """u, v, w in wavelengths (k, 3): the products the chunk's operator would form."""
        return self.uvw[self.row] * self.scale[self.chan, None]


def _whole_part(uvw, scale, values) -> Part:
    """Every sample of a chunk as a `Part`: what `_part` makes of every flat index, made
    directly (each row, its channels in order)."""
    nrow, nchan = uvw.shape[0], scale.size
    return Part(uvw, np.repeat(np.arange(nrow, dtype=np.int32), nchan),
                np.tile(np.arange(nchan, dtype=np.min_scalar_type(nchan - 1)), nrow), scale, values, whole=True)


def _part(uvw, scale, flat, values) -> Part:
    """The samples ``flat`` (ascending) of a chunk as a `Part`."""
    rows, chans = np.divmod(flat, scale.size)
    new = np.ones(rows.size, bool)
    np.not_equal(rows[1:], rows[:-1], out=new[1:])
    return Part(uvw[rows[new]], (np.cumsum(new) - 1).astype(np.int32),
                chans.astype(np.min_scalar_type(scale.size - 1)), scale, values)


def selection(uvw, freq, mask, geometry: ImageGeometry, bounds: list, threads: int = 1) -> list:
    """One chunk's samples for each slab of ``bounds``: the flat indices (row * nchan +
    channel, ascending; numpy's index type, which picks convert to otherwise, a
    temporary every call) of those kept with a tap on its planes (`_touching`), found on
    ``threads`` host threads, a share of rows each.  Refuses rows with NaN or infinite
    uvw where a sample is kept."""
    first = _first_planes(uvw, freq, mask, geometry, threads)
    nchan, found, lock = first.shape[1], {}, threading.Lock()

    def rows(r):
        share = first[r]
        kept = share >= 0                            # (-1: masked)
        mine = [np.flatnonzero(_touching(share, lo, hi, geometry.kernel.support) & kept) + r.start * nchan
                for lo, hi in bounds]
        with lock:
            found[r.start] = mine

    in_slices(threads, first.shape[0], rows)
    ordered = [found[start] for start in sorted(found)]
    return [np.concatenate([mine[s] for mine in ordered]).astype(np.intp, copy=False) if ordered
            else np.zeros(0, np.intp) for s in range(len(bounds))]


def values_at(vis, wgt, flat, threads: int = 1, out: np.ndarray | None = None, check: bool = True) -> np.ndarray:
    """vis times wgt (None: 1) at the flat indices ``flat`` (None: all), refusing NaN or
    infinite ones (with ``check``; without, and without weights, they are only copied or
    picked: for an operator that counts them itself); a share of them on each of
    ``threads`` host threads, written into ``out`` where given.  All of them without
    weights and without ``out``: ``vis`` itself, flattened (a view where it is
    contiguous), once checked."""
    vis = np.asarray(vis).reshape(-1)
    weights = None if wgt is None else np.asarray(wgt).reshape(-1)
    n = vis.size if flat is None else len(flat)
    whole = flat is None and weights is None and out is None
    values = vis if whole else out if out is not None else np.empty(n, vis.dtype)
    if len(values) != n:
        raise ValueError(f"values_at: room for {len(values)} values, {n} selected")
    bad, lock = [0, 0], threading.Lock()

    def share(r):
        part = values[r]
        if flat is None:                      # every sample: a copy, not picks
            if not whole:
                np.copyto(part, vis[r])
        else:
            pick(vis, flat[r], out=part)
        if not check and weights is None:
            return
        found = [not_finite(part), 0]
        if weights is not None:
            w = (weights[r] if flat is None else pick(weights, flat[r])).astype(vis.real.dtype)
            found[1] = not_finite(w)
            if not any(found):                # (refused below otherwise)
                np.multiply(part, w, out=part)
        with lock:
            bad[0] += found[0]
            bad[1] += found[1]

    in_slices(threads, n, share)
    for name, count in zip(("vis", "wgt"), bad):
        if count:
            raise ValueError(f"{name} has NaN or infinite entries where not masked ({count})")
    return values


def parts_at(uvw, freq, taken: list, values: list | None = None) -> list:
    """The `Part` of each slab's samples ``taken`` (from `selection`; None: every sample),
    with their values."""
    uvw, scale = np.asarray(uvw, np.float64), _scale(freq)
    return [_whole_part(uvw, scale, v) if flat is None else _part(uvw, scale, flat, v)
            for flat, v in zip(taken, values if values is not None else [None] * len(taken))]


def select(uvw, freq, vis, wgt, mask, geometry: ImageGeometry, bounds: list, indices: bool = False) -> tuple:
    """One chunk's samples for each slab of ``bounds``: those with a tap on its planes
    (`_touching`), as a `Part` (values: vis times wgt; None without vis).  With
    ``indices``, the flat indices of each slab's samples in the chunk follow, one array
    per slab (for `assemble`).  Non-finite vis, wgt or uvw where
    not masked are refused here, where the chunk is known."""
    flat = _kept(mask)
    if vis is not None:
        values_at(vis, wgt, flat)                 # every kept value checked, whichever slab takes it
    taken = selection(uvw, freq, mask, geometry, bounds)
    values = None if vis is None else [values_at(vis, wgt, t) for t in taken]
    parts = parts_at(uvw, freq, taken, values)
    return tuple(parts + taken) if indices else tuple(parts)


def points_of(parts: list, threads: int = 1) -> np.ndarray:
    """A slab task's samples (its parts from its chunks, in order) as u, v, w in
    wavelengths (k, 3), formed on ``threads`` host threads (`Part.points`' products)."""
    out = np.empty((sum(len(p) for p in parts), 3))
    start = 0
    for p in parts:
        nchan = p.scale.size

        def products(r, p=p, at=start):
            np.multiply(p.uvw[p.row[r]], p.scale[p.chan[r], None], out=out[at + r.start:at + r.stop])

        def rows(r, p=p, at=start, nchan=nchan):         # a whole chunk: each row times each channel's scale
            np.multiply(p.uvw[r, None, :], p.scale[None, :, None],
                        out=out[at + r.start * nchan:at + r.stop * nchan].reshape(-1, nchan, 3))

        if p.whole:
            in_slices(threads, len(p.uvw), rows)
        else:
            in_slices(threads, len(p), products)
        start += len(p)
    return out


def split(predicted: np.ndarray, parts: list) -> tuple:
    """A slab task's predicted values cut back into its parts, one array per chunk."""
    edges = np.cumsum([len(p) for p in parts])[:-1]
    return tuple(np.split(predicted, edges))


# bytes of samples `assemble` finishes at once, in cache (0: each thread's whole range at
# once).  0 by default: in blocks, each thread's many small numpy calls queue for the GIL
# on many threads (docs/benchmarks/dask.md, d2v-38)
ASSEMBLE_BLOCK = 0


def _blocks(r: slice, step: int) -> np.ndarray:
    """The edges of ``r``'s blocks of ``step`` samples (the last one shorter)."""
    return np.append(np.arange(r.start, r.stop, step), r.stop)


def _sums_every_sample(taken: list, shares: list) -> bool:
    """Whether some slab's share is added to every sample of the chunk (a slab taking it
    whole after another slab's share is in it), not only at picks."""
    seen = False
    for flat, share in zip(taken, shares):
        if flat is None and share.size and seen:
            return True
        seen = seen or flat is not None or bool(share.size)
    return False


def assemble(shape: tuple, taken: list, shares: list, wgt, mask, dtype, threads: int = 1,
             block: int | None = None) -> np.ndarray:
    """One chunk's visibilities (shape): each slab's share added at its samples, in slab
    order (onto zeros, or, where the first slab takes the chunk whole, onto its share as
    it is), then weighted; zero where masked.  On ``threads`` host threads, each over its
    own range of the chunk's samples (each selection is ascending, so a range's samples
    are a slice of it), in blocks of ``block`` samples (None: ``ASSEMBLE_BLOCK`` bytes
    of them; 0: the whole range at once), each finished (written, its shares added,
    weighted, counted) before the next.  The same operations on each sample in the same
    order whatever the threads and blocks, so the same bits.  The output is a recycled
    buffer where one of its size is free (`clgrid.dask.recycled`: an earlier call's
    chunk, dropped), its pages already there; fresh pages are first touched in parallel.

    The shares are finite: each slab's operator refuses a prediction with an inf or NaN
    (`clgrid.imaging.engine.ImagingEngine.dirty2vis`).  So what is counted, and refused,
    is what the sums and the weights make of them: without weights, where the shares are
    added only at picks, the samples that an addition made non-finite (an inf or NaN
    stays so under further sums), and a share copied whole is not passed over again;
    with weights, or where a share is added to every sample, every value at the end."""
    n = shape[0] * shape[1]
    out = recycled_empty(n, dtype)
    real = out.real.dtype
    kept = None if wgt is None else _kept(mask)
    weights = None if wgt is None else np.asarray(wgt).reshape(-1)
    every = weights is not None or _sums_every_sample(taken, shares)
    step = ASSEMBLE_BLOCK // out.itemsize if block is None else int(block)
    step = step if step > 0 else max(1, n)
    bad, lock = [0, 0], threading.Lock()

    def share_range(r):
        edges = _blocks(r, step)
        cuts = [None if flat is None else np.searchsorted(flat, edges) for flat in taken]
        kept_cuts = None if weights is None or kept is None else np.searchsorted(kept, edges)
        found = [0, 0]
        with np.errstate(over="ignore", invalid="ignore"):      # counted below
            for j in range(len(edges) - 1):
                lo, hi = int(edges[j]), int(edges[j + 1])
                part, written = out[lo:hi], False
                for flat, share, cut in zip(taken, shares, cuts):
                    if flat is None:              # (the chunk whole: every sample)
                        if share.size:
                            if written:
                                part += share[lo:hi]
                            else:                 # the first share copied, not added to zeros
                                np.copyto(part, share[lo:hi])
                                written = True
                        continue
                    if not written:
                        part[...] = 0
                        written = True
                    a, b = cut[j], cut[j + 1]
                    if b == a:
                        continue
                    at = flat[a:b]                # (within the block) a slab takes a sample at most once
                    if every:
                        out[at] += share[a:b]
                        continue
                    values = out[at]              # (as ``out[at] += share[a:b]`` does it)
                    before = not_finite(values)
                    values += share[a:b]
                    out[at] = values
                    found[0] += not_finite(values) - before
                if not written:
                    part[...] = 0
                if weights is not None:
                    if kept is None:
                        w = weights[lo:hi].astype(real)
                        found[1] += not_finite(w)
                        part *= w
                    else:
                        a, b = kept_cuts[j], kept_cuts[j + 1]
                        w = weights[kept[a:b]].astype(real)
                        found[1] += not_finite(w)
                        out[kept[a:b]] *= w
                if every:
                    found[0] += not_finite(part)
        with lock:
            bad[0] += found[0]
            bad[1] += found[1]

    in_slices(max(1, threads) if n >= (1 << 16) else 1, n, share_range)
    if bad[1]:
        raise ValueError(f"wgt has NaN or infinite entries where not masked ({bad[1]})")
    check_finite_result(bad[0], f"a chunk's {out.dtype} visibilities (its slabs' "
                        f"shares summed and weighted)", "double" if out.dtype == np.complex128 else "single",
                        double="a float64 image", inputs="the image or the weights")
    return out.reshape(shape)
