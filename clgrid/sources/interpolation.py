"""Kernel weights interpolated in (u, v, w) from the quarter cube, as a texture unit does.

Seed 004 §4.1: instead of the nearest oversampled sample of the nearest w-plane, the
weight of a grid cell is the trilinear interpolation of `KernelStack.cube()` at the
continuous position of that cell relative to the visibility.  This module defines
those semantics in float64; the device kernels (``clgrid/cl_kernels/texture_sample.cl``)
implement them with an OpenCL image sampler or in software, and the reference
(`clgrid.reference`, ``interpolation="linear"``) uses them as they are here.

For a visibility at ``pos = uv / du`` (cells from the centre), nearest cell
``near = round(pos)`` (as for nearest lookup) and ``frac = pos - near`` in
[-1/2, 1/2], the weight of cell ``near + (k, j)`` is the cube sampled at

    x = |k - frac_u| * oversample,  y = |j - frac_v| * oversample,  z = sqrt(|w| * w_scale)

(quarter-sample units; the D2 symmetry folds negative offsets), conjugated for
w < 0.  Sampling is OpenCL's ``CLK_FILTER_LINEAR | CLK_ADDRESS_CLAMP_TO_EDGE`` on
texel centres: along each axis ``i0 = floor(t)``, weight ``t - i0`` on ``i0 + 1``,
both indices clamped to the cube.  The footprint is ``[-S, S]^2`` with ``S`` the
larger support of the two planes interpolated, ``floor(z)`` and ``ceil(z)`` (the
last plane beyond the stack): a plane's samples outside its own support are
stored (or zero padding), so nothing is cut.  A visibility is beyond the stack when
``round(z)`` is, as for nearest lookup; between the last plane and that limit it
uses the last plane.
"""

from __future__ import annotations

import weakref
from itertools import product

import numpy as np

from .tables import KernelStack, offset_range
from ..planning.rounding import round_half_away

__all__ = ["INTERPOLATIONS", "continuous_positions", "footprint_supports", "trilinear",
           "interpolated_weight_sums", "interpolated_norm_sums"]

INTERPOLATIONS = ("nearest", "linear")


def continuous_positions(uvw, grid_size: int, cell_size: float, kernels: KernelStack) -> np.ndarray:
    """``(n, 3)`` float64 rows ``(frac_u, frac_v, z)``: what the sampler needs besides the cell."""
    du = 1.0 / (grid_size * cell_size)
    pos = uvw[:, :2] / du
    frac = pos - round_half_away(pos)
    z = np.sqrt(np.abs(uvw[:, 2] * kernels.w_scale))
    return np.column_stack([frac, z])


def _plane_pair(kernels: KernelStack, z: np.ndarray):
    """The planes interpolated at ``z``: floor(z) and ceil(z), both within the stack."""
    last = kernels.num_planes - 1
    return np.minimum(np.floor(z), last).astype(np.int64), np.minimum(np.ceil(z), last).astype(np.int64)


def footprint_supports(kernels: KernelStack, z: np.ndarray) -> np.ndarray:
    """Half-width S of the footprint at plane position ``z``: the larger of the two planes' supports."""
    low, high = _plane_pair(kernels, z)
    return np.maximum(kernels.supports[low], kernels.supports[high]).astype(np.int32)


def trilinear(cube: np.ndarray, z, y, x) -> np.ndarray:
    """``cube[z, y, x]`` linearly interpolated between texel centres, clamped to the edges.

    Arguments broadcast together; coordinates are in samples (texel ``i`` at ``i``).
    """
    corners = []
    for t, size in ((z, cube.shape[0]), (y, cube.shape[1]), (x, cube.shape[2])):
        t = np.asarray(t, np.float64)
        low = np.floor(t)
        a = t - low
        low = low.astype(np.int64)
        corners.append(((np.clip(low, 0, size - 1), 1.0 - a), (np.clip(low + 1, 0, size - 1), a)))
    out = 0
    for (iz, wz), (iy, wy), (ix, wx) in product(*corners):
        out = out + (wz * wy * wx) * cube[iz, iy, ix]
    return out


def interpolated_weight_sums(kernels: KernelStack, support: int) -> np.ndarray:
    """Sum of Re(cube) over a ``[-support, support]^2`` footprint at every node offset.

    Shape ``(num_planes, 2R+1, 2R+1)``, ``R = offset_range(oversample)``, indexed
    ``[p, a + R, b + R]`` for the footprint whose taps sit at ``|a + j os|``, ``|b + k os|``
    (clamped like the sampler).  Between nodes every tap stays within one texel
    interval, so the interpolated sum is the trilinear interpolation of this table.
    It depends on the stack alone, and every plan of every call reads it: made once per
    stack and support (read-only), with a tap-count matrix on each side of the planes
    (``T Re(plane) T^T``) rather than a gather of every footprint.
    """
    tables = _WEIGHT_SUMS.setdefault(kernels, {})
    if support not in tables:
        cube = kernels.cube()
        r = offset_range(kernels.oversample)
        taps = np.arange(-support, support + 1) * kernels.oversample
        idx = np.minimum(np.abs(np.arange(-r, r + 1)[:, None] + taps[None, :]), cube.shape[1] - 1)
        counts = np.zeros((2 * r + 1, cube.shape[1]))           # counts[a, i]: taps of offset a on sample i
        np.add.at(counts, (np.repeat(np.arange(2 * r + 1), taps.size), idx.ravel()), 1.0)
        table = counts @ cube.real @ counts.T
        table.flags.writeable = False
        tables[support] = table
    return tables[support]


# Tables of `interpolated_weight_sums`, per stack (gone with it) and footprint support.
_WEIGHT_SUMS: "weakref.WeakKeyDictionary[KernelStack, dict]" = weakref.WeakKeyDictionary()


def interpolated_norm_sums(kernels: KernelStack, position: np.ndarray, support: np.ndarray) -> np.ndarray:
    """Sum of Re(weight) over each visibility's footprint, the norm per unit weight.

    ``position`` rows ``(frac_u, frac_v, z)``, ``support`` the footprint S of each.
    """
    os = kernels.oversample
    r = offset_range(os)
    out = np.empty(position.shape[0])
    for s in np.unique(support):
        mine = support == s
        table = interpolated_weight_sums(kernels, int(s))
        frac_u, frac_v, z = position[mine].T
        out[mine] = trilinear(table, z, r - frac_v * os, r - frac_u * os)
    return out
