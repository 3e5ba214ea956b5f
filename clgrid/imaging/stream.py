"""How an imaging engine whose points do not fit its device at once takes them through it
(`stream_schedule`): the w-planes cut into slabs, in order, each slab's points planned
when the plane loop reaches it and released after it; a plane whose own points do not
fit is taken in groups of rows, one after the other onto the same grid before its FFT.
And the slabs a stack of w-planes is arranged in where its sort keys pass 32 bits
(`max_slab_planes`, `slab_geometry`).  Why this order (and not parts of rows, each with
every plane's FFT), and the 32-bit indices: docs/design/streaming.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .geometry import ImageGeometry
from .split import first_planes, plane_counts

__all__ = ["StreamSlab", "stream_schedule", "plane_touch_counts", "KEY_LIMIT", "max_slab_planes", "slab_geometry"]

# The sort keys of one arrangement (plane x keys per plane + place in the plane) and the
# entries of its table of where each key's run starts are 32-bit (clgrid/planning/stacking.py,
# clgrid/device/counting_sort.py): at most this many keys in one arrangement.  A stack of
# planes with more is arranged in slabs (`max_slab_planes`, `slab_geometry`).
KEY_LIMIT = 2 ** 31 - 1


@dataclass(frozen=True)
class StreamSlab:
    """Planes ``planes`` (a range) and the groups of rows (slices) whose points with a tap
    on them are on the device together: one group (every row), or, for a slab of one
    plane whose points do not fit at once, several, taken in turn onto that plane."""

    planes: range
    groups: tuple
    points: int          # kept samples with a tap on the slab's planes


def max_slab_planes(geometry: ImageGeometry, keys_per_plane: int, key_limit: int = KEY_LIMIT) -> int | None:
    """The most planes a slab may have so that its arrangement's keys stay below
    ``key_limit`` (its geometry, `slab_geometry`, holds W - 1 planes more on either side), or
    None where the whole stack's keys do.  Refused, naming the sizes, where not one plane can."""
    if geometry.num_planes * keys_per_plane < key_limit:
        return None
    planes = (key_limit - 1) // keys_per_plane - 2 * (_support(geometry) - 1)
    if planes < 1:
        raise ValueError(f"a w-plane of {keys_per_plane} sort keys (support {_support(geometry)}) leaves no slab "
                         f"of planes below {key_limit} keys: image in facets (smaller grids)")
    return planes


def slab_geometry(geometry: ImageGeometry, planes: range) -> tuple:
    """``(geometry, base)``: the stack that the points with a tap on ``planes`` need, planes
    ``base`` .. of ``geometry`` (from W - 1 before ``planes`` to W - 1 after), as a geometry of
    its own (planned and arranged in it, its keys count from plane ``base``)."""
    support = _support(geometry)
    base = max(planes.start - support + 1, 0)
    top = min(planes.stop + support - 1, geometry.num_planes)
    if base == 0 and top == geometry.num_planes:
        return geometry, 0
    return replace(geometry, w_min=geometry.w_min + base * geometry.dw, num_planes=top - base), base


def _support(geometry: ImageGeometry) -> int:
    return geometry.kernel.support if geometry.do_wgridding else 1


def _first(uvw, scale, keep, geometry: ImageGeometry, workers: int) -> np.ndarray:
    """Each sample's first plane (nrow, nchan), -1 where not kept (without w: plane 0)."""
    if geometry.do_wgridding:
        return first_planes(uvw, scale, keep, geometry, workers)
    first = np.zeros((uvw.shape[0], scale.size), np.int8)
    if keep is not None:
        first[~keep] = -1
    return first


def plane_touch_counts(counts: np.ndarray, support: int) -> np.ndarray:
    """Kept samples with a tap on each plane, from the counts of first planes."""
    return np.convolve(np.asarray(counts, np.int64), np.ones(support, np.int64))[:counts.size]


def stream_schedule(uvw, scale, keep, geometry: ImageGeometry, planes: range, capacity: int,
                    workers: int = 1, max_planes: int | None = None) -> tuple:
    """``(slabs, touch, kept)``: the `StreamSlab` s that cover ``planes`` in order, each of as
    many planes as hold at most ``capacity`` points (kept samples with a tap on the slab);
    ``touch`` (num_planes,), the kept samples with a tap on each plane (where it is 0, the
    plane has nothing to spread); ``kept``, the kept samples with a tap on ``planes``.  A
    plane whose points do not fit is a slab of its own, its rows cut into groups of at most
    ``capacity`` points (a group holds one row at least).
    ``max_planes``: the most planes a slab may have (None: any; `max_slab_planes`).
    ``uvw``/``scale``/``keep``: as the planning's (the first planes are its arithmetic,
    `clgrid.imaging.split.first_planes`)."""
    g, support = geometry, _support(geometry)
    first = _first(uvw, scale, keep, g, workers)
    counts = plane_counts(first, g, workers) if g.do_wgridding else \
        np.array([int(np.count_nonzero(first >= 0))], np.int64)
    cumulative = np.concatenate([[0], np.cumsum(counts)])

    def points(lo, hi):          # first plane in lo - W + 1 .. hi - 1
        return int(cumulative[hi] - cumulative[max(lo - support + 1, 0)])

    slabs, lo, nrow = [], planes.start, uvw.shape[0]
    while lo < planes.stop:
        hi = lo + 1
        while hi < planes.stop and points(lo, hi + 1) <= capacity and \
                (max_planes is None or hi - lo < max_planes):
            hi += 1
        n = points(lo, hi)
        groups = (slice(0, nrow),) if n <= capacity else _row_groups(first, lo, support, capacity)
        slabs.append(StreamSlab(range(lo, hi), groups, n))
        lo = hi
    return slabs, plane_touch_counts(counts, support), points(planes.start, planes.stop)


def _row_groups(first: np.ndarray, plane: int, support: int, capacity: int) -> tuple:
    """Consecutive rows, each group with at most ``capacity`` points that have a tap on
    ``plane`` (or one row)."""
    touching = (first >= max(plane - support + 1, 0)) & (first <= plane)
    ends = np.cumsum(np.count_nonzero(touching, axis=1), dtype=np.int64)
    groups, start, before = [], 0, 0
    while start < first.shape[0]:
        stop = max(int(np.searchsorted(ends, before + capacity, side="right")), start + 1)
        groups.append(slice(start, stop))
        before, start = int(ends[stop - 1]), stop
    return tuple(groups)
