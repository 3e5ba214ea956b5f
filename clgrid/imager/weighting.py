"""Imaging weights as WSClean computes them: natural, uniform and Briggs, with its weight grid
and its rank filter.

The visibility weights (the MS's, of the polarisation imaged; 0 for what is not used) are
summed on a grid the size of the *padded* image (``ceil(n * padding)`` rounded up to a
multiple of 4, ``padding`` 1.2 by default; divided by ``super_weight`` and kept even), in
uv cells of ``1 / (padded size * pixel size)`` wavelengths.  Only half the uv plane is
kept: a sample with v < 0 is counted at (-u, -v).  Sample (u, v) (wavelengths) falls in
column ``floor(u W dl + W / 2)`` and row ``floor(v H dm)``; samples outside the grid get
imaging weight 0 in every mode, so they are left out of the image (the pixel size is too
large for their baselines).  From the cell sums ``c`` (and their total ``T`` over the grid):

    natural:  1 where c != 0 (so a sample whose cell got no weight, as when another
              polarisation's grid is used, weighs 0)
    uniform:  1 / c
    briggs R: 1 / (1 + c S^2),   S^2 = (5 10^-R)^2 / (sum c^2 / T)

then the rank filter (level 3, window 16 cells by default; off below 1): a cell weight
above ``level`` times the mean of the non-zero cells in its window (columns x - 8 ..
x + 7, rows y - 8 .. y + 7, cut at the grid's edges) is lowered to that.  A sample's weight
in the image is its visibility weight times its cell's imaging weight.  WSClean grids
each output channel's weights on its own grid unless MF weighting is on (one grid for all
channels); `clgrid.imager.pipeline` does the same.

Where the passes run: ``WeightGrid(..., device=D)`` sums the density and applies the
weights on the OpenCL device ``D`` (`clgrid.imager.device_weighting`: the same cells, the
density in 64-bit fixed point, the weights in the image the same float32 products);
``device=None`` runs them on the host threads in float64, the reference the device path
is tested against.  Turning the cell sums into imaging weights (``finish``) is a pass over
the grid and runs on the host in float64 either way.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass

import numpy as np

from ..device.host_threads import in_slices

__all__ = ["WEIGHT_MODES", "Applied", "WeightGrid", "check_weighting", "padded_size"]

SPEED_OF_LIGHT = 299792458.0
WEIGHT_MODES = ("natural", "uniform", "briggs")
# samples (row x channel) gridded at a time: bounds the temporaries
_BLOCK = 1 << 20


def padded_size(npix: int, padding: float = 1.2) -> int:
    """WSClean's padded image side: ``ceil(npix * padding)`` rounded up to a multiple of 4."""
    n = int(math.ceil(npix * padding))
    return n + (4 - n % 4) % 4


def check_weighting(mode, npix_x, npix_y, pixsize_x, pixsize_y, robust=0.0, padding=1.2, super_weight=1.0,
                    rank_filter=3.0, rank_filter_size=16) -> dict:
    """`WeightGrid`'s keywords checked, a ValueError naming the one that is wrong; returns
    them as a dict of plain numbers (what `WeightGrid` and `clgrid.dask.imaging_weights`
    take)."""
    if mode not in WEIGHT_MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, WEIGHT_MODES))}, got {mode!r}")
    for name, value in (("npix_x", npix_x), ("npix_y", npix_y)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    for name, value in (("pixsize_x", pixsize_x), ("pixsize_y", pixsize_y)):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a positive number of radians, got {value!r}")
    if int(rank_filter_size) != rank_filter_size or rank_filter_size < 1:
        raise ValueError(f"rank_filter_size must be a positive integer, got {rank_filter_size!r}")
    if not (super_weight > 0 and math.isfinite(super_weight)):
        raise ValueError(f"super_weight must be a positive number, got {super_weight!r}")
    if not (padding >= 1 and math.isfinite(padding)):
        raise ValueError(f"padding must be a number >= 1, got {padding!r}")
    if not math.isfinite(robust):
        raise ValueError(f"robust must be finite, got {robust!r}")
    if not math.isfinite(rank_filter):
        raise ValueError(f"rank_filter must be finite (below 1: off), got {rank_filter!r}")
    return dict(mode=mode, npix_x=int(npix_x), npix_y=int(npix_y), pixsize_x=float(pixsize_x),
                pixsize_y=float(pixsize_y), robust=float(robust), padding=float(padding),
                super_weight=float(super_weight), rank_filter=float(rank_filter),
                rank_filter_size=int(rank_filter_size))


class WeightGrid:
    """The weight grid of one image (or of all channels, with MF weighting).

    ``add(uvw, freqs, weights)`` for each block of samples; ``finish()`` once; then
    ``apply(uvw, freqs, weights)`` multiplies each sample's visibility weight by its
    imaging weight, in place.

    Parameters
    ----------
    mode : {"natural", "uniform", "briggs"}
    npix_x, npix_y : int
        The image's size (before padding).
    pixsize_x, pixsize_y : float
        Pixel size in radians.
    robust : float
        Briggs' robustness (``mode="briggs"``).
    padding, super_weight : float
        WSClean's ``-padding`` (1.2) and ``-super-weight`` (1).
    rank_filter, rank_filter_size : float, int
        WSClean's ``-weighting-rank-filter`` (3; below 1: off) and its window (16 cells).
    device : optional
        None: the passes over the samples on the host threads (float64).  Else the OpenCL
        device that makes them (anything `clgrid.device.runtime.get_queue` takes;
        `clgrid.imager.device_weighting`); the weights must then be float32.
    """

    def __init__(self, mode: str, npix_x: int, npix_y: int, pixsize_x: float, pixsize_y: float,
                 robust: float = 0.0, padding: float = 1.2, super_weight: float = 1.0,
                 rank_filter: float = 3.0, rank_filter_size: int = 16, device=None):
        check_weighting(mode, npix_x, npix_y, pixsize_x, pixsize_y, robust, padding, super_weight, rank_filter,
                        rank_filter_size)
        self.mode, self.robust = mode, float(robust)
        width = int(round(padded_size(npix_x, padding) / super_weight))
        height = int(round(padded_size(npix_y, padding) / super_weight))
        self.width, self.height = width + width % 2, height + height % 2
        self.pixsize_x, self.pixsize_y = float(pixsize_x), float(pixsize_y)
        self.rank_filter, self.rank_filter_size = float(rank_filter), int(rank_filter_size)
        self.on_device = None
        if device is not None:
            from .device_weighting import DeviceWeights

            self.on_device = DeviceWeights(device, self.width, self.height // 2, self.width * self.pixsize_x,
                                           self.height * self.pixsize_y)
            self.grid = None                 # made at finish(), from the device's density
        else:
            self.grid = np.zeros((self.height // 2, self.width), np.float64)   # [row y, column x]
        self.threads = max(1, os.cpu_count() or 1)
        self.total = 0.0
        self.finished = False

    def _cells(self, uvw, freqs):
        """Flat cell index of each sample (rows x channels), -1 outside the grid."""
        wavelengths = SPEED_OF_LIGHT / np.asarray(freqs, np.float64)
        flip = np.where(uvw[:, 1] < 0, -1.0, 1.0)
        u = (uvw[:, 0] * flip)[:, None] / wavelengths[None, :]
        v = (uvw[:, 1] * flip)[:, None] / wavelengths[None, :]
        x = np.floor(u * (self.width * self.pixsize_x) + self.width // 2)
        y = np.floor(v * (self.height * self.pixsize_y))
        inside = (x >= 0) & (x < self.width) & (y < self.height // 2)
        return np.where(inside, y * self.width + x, -1).astype(np.int64)

    def _in_blocks(self, nrow: int, nchan: int, fn) -> None:
        """``fn(rows)`` over blocks of rows of about ``_BLOCK`` samples, on the host threads
        (numpy releases the GIL in these passes)."""
        step = max(1, _BLOCK // max(1, nchan))

        def part(share):
            for start in range(share.start, share.stop, step):
                fn(slice(start, min(share.stop, start + step)))

        in_slices(min(self.threads, -(-nrow // step)), nrow, part)

    def add(self, uvw, freqs, weights) -> None:
        """Sum the visibility weights ``weights`` (nrow, nchan) of samples at ``uvw`` (nrow, 3)
        metres and ``freqs`` (nchan,) Hz on the grid."""
        if self.finished:
            raise RuntimeError("WeightGrid.add after finish()")
        if self.on_device is not None:
            self.on_device.add(uvw, freqs, weights)
            return
        flat = self.grid.reshape(-1)
        lock = threading.Lock()

        def block(rows):
            cells = self._cells(uvw[rows], freqs)
            w = weights[rows]
            keep = (cells >= 0) & (w != 0)
            cells, values = cells[keep], w[keep].astype(np.float64)
            with lock:
                np.add.at(flat, cells, values)
                self.total += float(values.sum())

        self._in_blocks(uvw.shape[0], len(freqs), block)

    def cell_sums(self, uvw, freqs, weights) -> tuple:
        """The density step of `add` for one block of samples, without adding it to the grid:
        ``(cells, sums, total)``, the flat indices of the cells the samples' non-zero weights
        fall in (sorted, each once), each cell's sum of those weights (float64, added in
        sample order) and their total.  `add_cell_sums` of it equals `add` of the block to
        float64 rounding; blocks' sums add (`clgrid.dask.imaging_weights` sums its chunks'
        this way).  On the calling thread, whatever the grid's ``device``."""
        cells = self._cells(np.asarray(uvw, np.float64), freqs).reshape(-1)
        values = np.asarray(weights).reshape(-1)
        keep = (cells >= 0) & (values != 0)
        cells, values = cells[keep], values[keep].astype(np.float64)
        unique, where = np.unique(cells, return_inverse=True)
        return unique, np.bincount(where.reshape(-1), weights=values, minlength=unique.size), float(values.sum())

    def add_cell_sums(self, cells, sums, total: float) -> None:
        """Add `cell_sums`' result (of this grid's geometry) to the grid (host grids only)."""
        if self.finished:
            raise RuntimeError("WeightGrid.add_cell_sums after finish()")
        if self.on_device is not None:
            raise ValueError("add_cell_sums adds to a host grid (device=None)")
        np.add.at(self.grid.reshape(-1), cells, sums)
        self.total += total

    def finish(self) -> None:
        """Turn the cell sums into imaging weights (module docstring); once."""
        if self.finished:
            raise RuntimeError("WeightGrid.finish called twice")
        self.finished = True
        if self.on_device is not None:
            self.grid = np.empty((self.height // 2, self.width), np.float64)
            self.total = self.on_device.download_density(self.grid)
        self._imaging_weights()
        if self.on_device is not None:
            self.on_device.set_imaging(self.grid)

    def _imaging_weights(self) -> None:
        g = self.grid
        occupied = g != 0
        if self.mode == "natural":                    # 1 where a weight was gridded; the rank
            np.copyto(g, occupied)                    # filter keeps every such weight
            return
        if self.mode == "uniform":
            np.divide(1.0, g, out=g, where=occupied)
        else:
            mean_weight = float((g * g).sum()) / self.total if self.total > 0 else 0.0
            s2 = (5.0 * 10.0 ** (-self.robust)) ** 2 / mean_weight if mean_weight > 0 else 0.0
            np.multiply(g, s2, out=g)
            g += 1.0
            np.divide(1.0, g, out=g)
        if self.rank_filter >= 1.0:
            self._rank_filter(occupied)

    def _rank_filter(self, occupied) -> None:
        """WSClean's rank filter on the cells samples fall in.  A window's mean is over its
        non-zero cells: with uniform weighting the occupied ones; with Briggs weighting every
        cell (an empty one weighs 1).  Both come from summed-area tables of the bounding box
        of the occupied cells: outside it a cell adds 0 (uniform) or exactly 1 and one to the
        count (Briggs)."""
        g = self.grid
        ys, xs = np.nonzero(occupied)
        if ys.size == 0:
            return
        y0, x0 = int(ys.min()), int(xs.min())
        box = (slice(y0, int(ys.max()) + 1), slice(x0, int(xs.max()) + 1))
        empty = 1.0 if self.mode == "briggs" else 0.0
        half = self.rank_filter_size // 2
        wy1, wy2 = np.maximum(ys - half, 0), np.minimum(ys + half, g.shape[0])
        wx1, wx2 = np.maximum(xs - half, 0), np.minimum(xs + half, g.shape[1])

        def window_sums(values):
            table = np.zeros((values.shape[0] + 1, values.shape[1] + 1))
            np.cumsum(values, axis=0, out=table[1:, 1:])
            np.cumsum(table[1:, 1:], axis=1, out=table[1:, 1:])
            h, w = values.shape
            a1, a2 = np.clip(wy1 - y0, 0, h), np.clip(wy2 - y0, 0, h)
            b1, b2 = np.clip(wx1 - x0, 0, w), np.clip(wx2 - x0, 0, w)
            return table[a2, b2] - table[a1, b2] - table[a2, b1] + table[a1, b1]

        total = window_sums(g[box] - empty)
        if self.mode == "briggs":
            count = ((wy2 - wy1) * (wx2 - wx1)).astype(np.float64)
            total += count
        else:
            count = window_sums(occupied[box].astype(np.float64))
        limit = self.rank_filter * total / count
        values = g[ys, xs]
        over = values > limit
        g[ys[over], xs[over]] = limit[over]

    def apply(self, uvw, freqs, weights, used=None) -> Applied:
        """``weights`` (nrow, nchan, float) *= each sample's imaging weight, in place (0
        outside the grid); ``used`` (bool, the same shape), if given, is set where the
        result is not 0.  Returns what was kept (`Applied`)."""
        if not self.finished:
            raise RuntimeError("WeightGrid.apply before finish()")
        if self.on_device is not None:
            before, kept, visibility_sum, weight_sum, longest = self.on_device.apply(uvw, freqs, weights, used)
            return Applied(before, kept, visibility_sum, weight_sum, longest)
        flat = self.grid.reshape(-1)
        freqs = np.asarray(freqs, np.float64)
        totals = Applied()
        lock = threading.Lock()

        def block(rows):
            cells = self._cells(uvw[rows], freqs)
            imaging = np.where(cells >= 0, flat[np.maximum(cells, 0)], 0.0).astype(weights.dtype)
            values = weights[rows]
            before = int(np.count_nonzero(values))
            kept = (values != 0) & (imaging != 0)
            visibility_sum = float(values[kept].sum(dtype=np.float64))
            values *= imaging
            weight_sum = float(values.sum(dtype=np.float64))
            length = np.sqrt((uvw[rows] ** 2).sum(axis=1))[:, None] * freqs[None, :]
            longest = float(length[kept].max()) / SPEED_OF_LIGHT if kept.any() else 0.0
            if used is not None:
                np.logical_or(used[rows], kept, out=used[rows])
            with lock:
                totals.before += before
                totals.kept += int(np.count_nonzero(kept))
                totals.visibility_weight_sum += visibility_sum
                totals.weight_sum += weight_sum
                totals.longest = max(totals.longest, longest)

        self._in_blocks(uvw.shape[0], len(freqs), block)
        return totals


@dataclass
class Applied:
    """What `WeightGrid.apply` kept: samples with a non-zero weight ``before``, those still
    non-zero after (``kept``), the sum of their visibility weights and of their weights in
    the image (the image's normalisation), and the longest of their baselines (u, v, w) in
    wavelengths (WSClean's theoretical beam is its inverse)."""

    before: int = 0
    kept: int = 0
    visibility_weight_sum: float = 0.0
    weight_sum: float = 0.0
    longest: float = 0.0
