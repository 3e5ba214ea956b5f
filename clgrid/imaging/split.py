"""How one imaging operator's samples are shared out: between the devices of a
``WGridder(device=[...])`` and between the tasks of `clgrid.dask`.

Two splits (the user guide: docs/user-guide/dask.md, "Several devices in one process"; the
measurements: docs/benchmarks/dask.md):

- by **slabs of w-planes** (``"planes"``): the stack of w-planes is cut into contiguous
  slabs of about equal work (`slab_bounds`), and each part takes the samples with a tap
  on its planes (`touching`), spreading, transforming and interpolating only those
  planes (`ImagingEngine(planes=...)`).  Every plane's FFT and per-pixel work is done
  once, by one part; a sample touches W planes, so those near a slab's edge go to two
  parts (each spreads only its own taps): the per-sample work (moving, planning) repeats
  for them, about 1 + (W - 1) / (planes per slab) times.
- by **rows** (``"rows"``): contiguous row ranges with about equal numbers of kept
  samples (`row_bounds`); each part spreads all its taps on every plane: the planes'
  FFTs and per-pixel work are done by every part.  The only split without w (one plane).

Exactness.  A sample's first plane is the planning's own arithmetic
(`ImageGeometry.first_planes`) on the product the planning forms, |w in metres| times
freq / c (the flips are signs, exact on either side), so the selection and the parts'
plans agree to the bit, and every tap is spread by exactly one part.

Balance.  A plane costs its FFT and per-pixel work where any tap falls on it, plus its
taps' W x W cells (`clgrid.imaging.geometry.imaging_work`, from the histogram of first
planes, `plane_counts`), the cells weighed by the device's ``split_sample_weight`` (the
tuning table: how much more a tap costs there, against an FFT, than the model says);
`slab_bounds` cuts the planes into contiguous slabs with the smallest largest cost.  A
device list balances on a random sample of its rows, and takes the planes with an FFT from
the exact |w| range (`active_planes`): a sample misses the few samples of the highest
planes.
"""

from __future__ import annotations

import threading

import numpy as np

from ..device.host_threads import in_slices
from .geometry import DIRECTIONS, ImageGeometry, imaging_work

__all__ = ["SPLITS", "touching", "first_planes", "plane_counts", "active_planes", "slab_bounds",
           "direction_slabs", "fill", "slab_masks", "row_bounds"]

SPLITS = ("auto", "planes", "rows")
BLOCK_SAMPLES = 1 << 15        # samples a host thread takes at a time in `first_planes`


def touching(first: np.ndarray, lo: int, hi: int, support: int) -> np.ndarray:
    """Which samples, by first plane, have a tap on planes ``lo .. hi - 1``: first < hi
    and first + W - 1 >= lo; none for an empty slab (lo == hi)."""
    return (first < hi) & (first + (support - 1) >= lo) & (lo < hi)


def _plane_dtype(geometry: ImageGeometry):
    return np.int16 if geometry.num_planes < 2 ** 15 else np.int32


def first_planes(uvw: np.ndarray, scale: np.ndarray, keep, geometry: ImageGeometry, workers: int = 1) -> np.ndarray:
    """Each sample's first w-plane (nrow, nchan), as the planning finds it; -1 where the
    sample is not kept (``keep`` False).  On ``workers`` host threads, a share of rows each."""
    out = np.empty((uvw.shape[0], scale.size), _plane_dtype(geometry))
    block = max(1, BLOCK_SAMPLES // scale.size)

    def rows(r):
        for a in range(r.start, r.stop, block):           # temporaries that stay in cache
            b = min(a + block, r.stop)
            aw = np.abs(uvw[a:b, 2])[:, None] * scale[None, :]      # the planning's product (flips are signs)
            first = geometry.first_planes(aw)
            if keep is not None:
                first[~keep[a:b]] = -1.0                            # (a NaN w where not kept, too)
            with np.errstate(invalid="ignore"):
                out[a:b] = first

    in_slices(workers, uvw.shape[0], rows)
    return out


def plane_counts(first: np.ndarray, geometry: ImageGeometry, workers: int = 1) -> np.ndarray:
    """How many kept samples have each first plane (num_planes,), from `first_planes`."""
    counts, lock = np.zeros(geometry.num_planes, np.int64), threading.Lock()

    block = max(1, BLOCK_SAMPLES // max(first.shape[1], 1))

    def rows(r):
        found = np.zeros(geometry.num_planes + 1, np.int64)
        for a in range(r.start, r.stop, block):
            part = first[a:min(a + block, r.stop)].reshape(-1) + 1            # not kept (-1) to bin 0
            found += np.bincount(part, minlength=geometry.num_planes + 1)[:geometry.num_planes + 1]
        with lock:
            counts[:] += found[1:]

    in_slices(workers, first.shape[0], rows)
    return counts


def active_planes(w_range, geometry: ImageGeometry) -> np.ndarray:
    """Which planes (num_planes,) samples with |w| in ``w_range`` = (lo, hi) wavelengths
    reach: all from the first plane of ``lo`` to the last tap of ``hi``'s (a continuous
    range of |w|, as an array's tracks give: a sample of the rows misses the few samples
    of the highest planes, whose FFTs cost as much as any)."""
    g = geometry
    first = g.first_planes(np.asarray(w_range, np.float64))
    active = np.zeros(g.num_planes, bool)
    lo, hi = int(max(first.min(), 0)), int(min(first.max() + g.kernel.support, g.num_planes))
    active[lo:hi] = True
    return active


def slab_bounds(counts, geometry: ImageGeometry, slabs: int, planes: range | None = None,
                sample_weight: float = 1.0, active=None) -> list:
    """``slabs`` contiguous ranges (lo, hi) of the planes ``planes`` (default: all), in
    order, that cover them with the smallest largest work (`imaging_work` per plane: its
    FFT where any tap falls on it, or where ``active`` (num_planes,) says (`active_planes`,
    for ``counts`` from a sample of the rows), its taps' cells times ``sample_weight``: the
    tuning table's ``split_sample_weight`` for the device).  ``counts``: kept samples per first
    plane (num_planes,), or a list of such histograms (one per chunk), summed.  Trailing
    ranges are empty (lo == hi) where fewer suffice."""
    g, support = geometry, geometry.kernel.support
    planes = range(g.num_planes) if planes is None else planes
    counts = np.asarray(counts, np.int64)
    first = counts.sum(axis=0) if counts.ndim == 2 else counts
    if first.size == 0:
        first = np.zeros(g.num_planes, np.int64)
    taps = np.convolve(first, np.ones(support, np.int64))[:g.num_planes]     # samples with a tap on each plane
    active = taps > 0 if active is None else np.asarray(active, bool)
    work = imaging_work(taps * float(support) ** 2 * float(sample_weight), active, g.nu, g.nv)[planes.start:planes.stop]
    if not np.any(work):
        return [(planes.start, planes.start)] * slabs
    # the smallest largest sum that `slabs` ranges reach, by bisection; ``high`` always
    # reaches it (the total, raised past the rounding of `fill`'s running sums)
    low, high = float(work.max()), float(work.sum()) * (1.0 + 1e-9)
    work = work.tolist()                 # (Python floats: the same sums, `fill` 5x faster than on numpy's)
    for _ in range(64):
        middle = 0.5 * (low + high)
        low, high = (low, middle) if len(fill(work, middle)) <= slabs else (middle, high)
    starts = fill(work, high)
    edges = [planes.start + s for s in starts] + [planes.stop] * (slabs - len(starts) + 1)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def direction_slabs(counts, geometry: ImageGeometry, slabs: int, weights: dict, planes: range | dict | None = None,
                    active=None) -> list:
    """Each direction's ``slabs`` slabs (`slab_bounds` with its own sample weight:
    ``weights`` maps "vis2dirty" and "dirty2vis" to the tuning table's
    ``split_sample_weight`` and ``split_sample_weight_dirty2vis``), paired slab by slab,
    of ``planes`` (None: all; a range: both directions'; {direction: range}: each
    direction's own, as an operator over per-direction planes has them).
    Where the two directions balance at other planes, the i-th part holds the samples of
    both its slabs and each call spreads or interpolates its own direction's.

    Returns
    -------
    list of (held, calls), one per slab in order: ``held`` = (lo, hi), the planes from the
    lowest to the highest that the part's two slabs cover (empty slabs left out; planes
    between them, if any, are held and left to the other parts in both directions), and
    ``calls`` = {direction: (lo, hi)}, each direction's slab (lo == hi: none)."""
    within = planes if isinstance(planes, dict) else dict.fromkeys(DIRECTIONS, planes)
    bounds = {d: slab_bounds(counts, geometry, slabs, within[d], weights[d], active) for d in DIRECTIONS}
    out = []
    for pair in zip(*(bounds[d] for d in DIRECTIONS)):
        taken = [(lo, hi) for lo, hi in pair if lo < hi]
        held = (min(lo for lo, _ in taken), max(hi for _, hi in taken)) if taken else pair[0]
        out.append((held, dict(zip(DIRECTIONS, pair))))
    return out


def fill(work, limit: float) -> list:
    """Where each range starts when items (planes, chunks) are taken in order while the
    sum of ``work`` stays within ``limit``; an item over it alone is a range of its own."""
    starts, total = [0], 0.0
    for item, cost in enumerate(work):
        if total + cost > limit and total > 0:
            starts.append(item)
            total = 0.0
        total += cost
    return starts


def slab_masks(first: np.ndarray, geometry: ImageGeometry, bounds: list, workers: int = 1) -> list:
    """For each slab of ``bounds``, which samples (nrow, nchan) it takes: those kept (a
    first plane >= 0 in `first_planes`) with a tap on its planes (`touching`)."""
    masks = [np.empty(first.shape, bool) for _ in bounds]
    support = geometry.kernel.support

    def rows(r):
        part = first[r]
        kept = part >= 0
        for mask, (lo, hi) in zip(masks, bounds):
            np.logical_and(touching(part, lo, hi, support), kept, out=mask[r])

    in_slices(workers, first.shape[0], rows)
    return masks


def row_bounds(keep, nrow: int, nchan: int, parts: int) -> list:
    """``parts`` contiguous row ranges (a, b), in order, with about equal numbers of kept
    samples (``keep`` (nrow, nchan) or None: all); a range is empty (a == b) where the
    rows run out."""
    if keep is None:
        per_row = np.full(nrow, nchan, np.int64)
    else:
        per_row = np.count_nonzero(keep, axis=1).astype(np.int64)
    total = np.concatenate([[0], np.cumsum(per_row)])
    targets = total[-1] * np.arange(1, parts) / parts
    cuts = np.searchsorted(total, targets, side="left") if total[-1] else np.full(parts - 1, nrow)
    edges = [0] + [int(min(c, nrow)) for c in cuts] + [nrow]
    edges = list(np.maximum.accumulate(edges))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
