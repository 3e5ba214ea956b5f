"""Where each w-plane's grid holds taps (`PlaneRegions`), from the points, so that the host FFT
transforms only those rows or columns (`clgrid.imaging.fft.HostFFT`, ``region=``).

A point at (u, v, w) puts its W x W x W taps at the grid cells ``first_u .. first_u + W - 1``
(modulo ``nu``), the same in v, and the planes ``first_w .. first_w + W - 1`` (the
planner's rule, `clgrid.planning.host.stacked_positions`).  Only long baselines reach large
|w|, and no baseline is longer than the longest, so many planes' grids are mostly empty:
a 2-D FFT is 1-D passes along one axis and then the other, and the first pass need only
run where the plane has data, the second only where the image is (`HostFFT` picks the
cheaper order per plane).

The regions are a superset, at tile resolution (as ducc0's wgridder marks them): a point
marks the tile of its first cell in the plane of its first tap; a marked tile stands for
its cells and the W + 1 after them, one cell before, and the planes one before to W after
its first plane (one cell and one plane of slack either side, so that a rounding that
moves a point by one cell or plane from the planner's choice stays covered).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..device.host_threads import in_slices
from .geometry import ImageGeometry

__all__ = ["PlaneRegions", "Region", "plane_regions"]

ROWS_AT_ONCE = 1 << 16       # points a thread marks at a time (their temporaries stay small)


@dataclass(frozen=True)
class Region:
    """One plane's occupied grid ``rows`` (u cells) and ``cols`` (v cells): lists of
    slices, disjoint, in order."""

    rows: list
    cols: list

    @staticmethod
    def size(runs) -> int:
        return sum(s.stop - s.start for s in runs)


def _runs(tiles: np.ndarray, tile: int, support: int, n: int) -> list:
    """The cells (modulo n) that marked ``tiles`` stand for, as merged slices."""
    marked = np.flatnonzero(tiles)
    if marked.size == 0:
        return []
    span = tile + support + 2
    if span >= n:
        return [slice(0, n)]
    starts = (marked * tile - 1) % n
    ends = starts + span
    wraps = ends > n
    # +1 where a run starts, -1 where it ends; a run past n goes on from 0
    change = np.bincount(starts, minlength=n + 1) - np.bincount(np.minimum(ends, n), minlength=n + 1)
    change[0] += np.count_nonzero(wraps)
    change -= np.bincount(ends[wraps] - n, minlength=n + 1)
    cover = np.cumsum(change[:n]) > 0
    edges = np.flatnonzero(np.diff(np.concatenate([[False], cover, [False]]).astype(np.int8)))
    return [slice(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


class PlaneRegions:
    """Per w-plane occupied tiles of grid rows (``u``: planes x tiles) and columns
    (``v``), tiles of ``tile`` cells; `at` gives a plane's `Region`."""

    def __init__(self, u: np.ndarray, v: np.ndarray, tile: int, geometry: ImageGeometry):
        self.u, self.v, self.tile = u, v, int(tile)
        self.nu, self.nv, self.support = geometry.nu, geometry.nv, geometry.kernel.support
        self._cache: dict = {}

    def at(self, plane: int) -> Region:
        region = self._cache.get(plane)
        if region is None:
            region = Region(_runs(self.u[plane], self.tile, self.support, self.nu),
                            _runs(self.v[plane], self.tile, self.support, self.nv))
            if len(self._cache) < 4096:
                self._cache[plane] = region
        return region

    def fractions(self) -> tuple:
        """(rows, columns): the mean share of the grid's rows and of its columns the planes
        occupy (planes without points count as empty)."""
        rows = np.mean([Region.size(self.at(p).rows) / self.nu for p in range(self.u.shape[0])])
        cols = np.mean([Region.size(self.at(p).cols) / self.nv for p in range(self.v.shape[0])])
        return float(rows), float(cols)


def plane_regions(uvw, scale, keep, signs, geometry: ImageGeometry, workers: int = 1,
                  tile: int | None = None) -> PlaneRegions:
    """The `PlaneRegions` of the samples ``uvw`` (nrow, 3, metres) x ``scale`` (nchan,
    frequency / c) where ``keep`` (nrow, nchan; None: all), after the flips ``signs``,
    folded to w >= 0 (the w-gridding operator's points), on ``workers`` threads.
    ``tile``: cells a tile (default: 16, or the power of two above the kernel's width)."""
    g = geometry
    support = g.kernel.support
    tile = int(tile or max(16, 1 << (support - 1).bit_length()))
    planes = g.num_planes
    tiles_u, tiles_v = math.ceil(g.nu / tile), math.ceil(g.nv / tile)
    cells_u, cells_v = g.cells_per_wavelength
    half = support / 2.0
    nchan = scale.size
    parts = []

    def mark(rows: slice):
        first_u = np.zeros((planes, tiles_u), bool)
        first_v = np.zeros((planes, tiles_v), bool)
        for lo in range(rows.start, rows.stop, ROWS_AT_ONCE):
            block = uvw[lo:min(lo + ROWS_AT_ONCE, rows.stop)]
            for c in range(nchan):
                f = scale[c]
                u, v, w = (block[:, a] * (signs[a] * f) for a in range(3))
                if keep is not None:
                    k = keep[lo:lo + block.shape[0], c]
                    u, v, w = u[k], v[k], w[k]
                if g.do_wgridding:
                    flip = np.where(w < 0, -1.0, 1.0)
                    u, v, w = u * flip, v * flip, w * flip
                    if g.tilted:
                        u, v = u + g.tilt_x * w, v + g.tilt_y * w
                    p = np.clip(np.ceil(g.plane_positions(w) - half).astype(np.int64), 0, planes - 1)
                else:
                    p = np.zeros(u.shape, np.int64)
                tu = (np.ceil(u * cells_u - half).astype(np.int64) % g.nu) // tile
                tv = (np.ceil(v * cells_v - half).astype(np.int64) % g.nv) // tile
                first_u[p, tu] = True
                first_v[p, tv] = True
        parts.append((first_u, first_v))

    in_slices(workers, uvw.shape[0], mark)
    first_u = np.logical_or.reduce([a for a, _ in parts]) if parts else np.zeros((planes, tiles_u), bool)
    first_v = np.logical_or.reduce([b for _, b in parts]) if parts else np.zeros((planes, tiles_v), bool)
    if not g.do_wgridding:
        return PlaneRegions(first_u, first_v, tile, g)
    # a first plane p0 stands for planes p0 - 1 .. p0 + W
    u = np.zeros_like(first_u)
    v = np.zeros_like(first_v)
    for shift in range(-1, support + 1):
        lo, hi = max(0, shift), min(planes, planes + shift)
        if hi > lo:
            u[lo:hi] |= first_u[lo - shift:hi - shift]
            v[lo:hi] |= first_v[lo - shift:hi - shift]
    return PlaneRegions(u, v, tile, g)
