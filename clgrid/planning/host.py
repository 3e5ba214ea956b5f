"""Planning: validate inputs and turn them into integer grid work, once, in float64.

Every gridder and degridder, on every device, reads the same positions: grid cell,
oversample offsets, w-plane and conjugation per visibility, computed here with the
exact float64 arithmetic of the reference (seed 003 Listing 1).  A device therefore
never lands a visibility on a neighbouring oversample sample through float32
rounding.  Visibilities that are flagged, fall off the grid or lie beyond the kernel
stack are left out here and counted, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..call_warnings import warn
from ..errors import DroppedVisibilitiesError
from ..sources.interpolation import (INTERPOLATIONS, continuous_positions, footprint_supports,
                            interpolated_norm_sums)
from ..sources.base import KernelSource
from ..sources.tables import KernelStack, offset_range
from .rounding import round_half_away

__all__ = ["SPEED_OF_LIGHT", "round_half_away", "Samples", "Positions", "flatten_samples",
           "flatten_positions", "check_grid", "grid_indices", "plan_visibilities", "check_coordinates",
           "check_grid_geometry", "check_arguments", "in_wavelengths", "report_dropped"]

SPEED_OF_LIGHT = 299_792_458.0  # m/s
ON_DROPPED = ("warn", "raise", "ignore")


def check_grid_geometry(grid_size, cell_size):
    """Grid size: even, positive integer; cell size: positive finite radians."""
    if isinstance(grid_size, bool) or not isinstance(grid_size, (int, np.integer)):
        raise TypeError(f"grid_size must be an integer, got {type(grid_size).__name__}")
    if grid_size <= 0 or grid_size % 2:
        raise ValueError(f"grid_size must be a positive even number, got {grid_size}")
    if not (isinstance(cell_size, (float, int, np.floating, np.integer)) and np.isfinite(cell_size)
            and cell_size > 0):
        raise ValueError(f"cell_size must be a positive finite number of radians, got {cell_size!r}")


def check_arguments(grid_size, cell_size, kernels, on_dropped) -> None:
    """What every gridder and degridder is constructed with: geometry, stack, `on_dropped`."""
    check_grid_geometry(grid_size, cell_size)
    if not isinstance(kernels, KernelSource):
        raise TypeError(f"kernels must be a kernel source (clgrid.KernelStack, KernelStack.analytic), got "
                        f"{type(kernels).__name__}")
    if on_dropped not in ON_DROPPED:
        raise ValueError(f"on_dropped must be one of {ON_DROPPED}, got {on_dropped!r}")


def check_grid(grid, grid_size: int) -> np.ndarray:
    """A grid to degrid: complex, finite, shape (npol, grid_size, grid_size), npol 1, 2 or 4."""
    grid = np.asarray(grid)
    if not np.iscomplexobj(grid):
        raise TypeError(f"grid must be complex (complex64 or complex128), got dtype {grid.dtype}")
    if grid.ndim != 3 or grid.shape[1:] != (grid_size, grid_size):
        raise ValueError(f"grid must have shape (npol, {grid_size}, {grid_size}), got {grid.shape}")
    if grid.shape[0] not in (1, 2, 4):
        raise ValueError(f"grid must have 1, 2 or 4 polarisations on its first axis, got {grid.shape[0]}")
    if not np.all(np.isfinite(grid)):
        raise ValueError("grid contains NaN or inf")
    return grid


@dataclass
class Samples:
    """Inputs flattened to one row per (row, channel) sample, in float64.

    ``uvw`` in wavelengths (nsample, 3); ``flags`` (nsample, npol); ``weights``
    (nsample, npol) with flagged entries zero; ``usable`` marks samples with at
    least one unflagged polarisation.  ``vis`` (nsample, npol) complex128, already
    multiplied by the weights, when gridding; None when degridding (the
    visibilities are the output then, with unit weights).
    """

    uvw: np.ndarray
    vis: np.ndarray | None
    weights: np.ndarray
    flags: np.ndarray
    usable: np.ndarray
    leading_shape: tuple
    nchan: int | None

    @property
    def npol(self) -> int:
        return self.flags.shape[1]

    @property
    def shape(self) -> tuple:
        """The caller's visibility shape: (..., npol) or (..., nchan, npol)."""
        return self.leading_shape + ((self.nchan,) if self.nchan is not None else ()) + (self.npol,)

    def unflatten(self, sample: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Values of the samples ``sample`` in the caller's shape; zero elsewhere and where flagged."""
        out = np.zeros(self.flags.shape, values.dtype)
        out[sample] = values
        out[self.flags] = 0
        return out.reshape(self.shape)


def _as_real_array(name, a):
    a = np.asarray(a)
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric array, got dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


def _broadcast(name, a, shape):
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        raise ValueError(f"{name} of shape {np.shape(a)} does not broadcast to the "
                         f"visibility shape {shape}") from None


def check_coordinates(uvw, freqs):
    """Validated uvw (float64, (..., 3)) and freqs (float64 Hz or None), and nchan."""
    uvw = _as_real_array("uvw", uvw)
    if uvw.ndim < 2 or uvw.shape[-1] != 3:
        raise ValueError(f"uvw must have shape (..., 3), got {uvw.shape}")
    if freqs is None:
        return uvw, None, None
    freqs = _as_real_array("freqs", freqs)
    if freqs.ndim != 1 or freqs.size == 0:
        raise ValueError(f"freqs must be a non-empty 1-D array in Hz, got shape {freqs.shape}")
    if not np.all(np.isfinite(freqs)) or np.any(freqs <= 0):
        raise ValueError("freqs must be finite and positive (Hz)")
    return uvw, freqs, freqs.size


def _check_flags(flags, shape) -> np.ndarray:
    """Boolean flags broadcast to the visibility shape, flattened to (nsample, npol)."""
    if flags is None:
        flags = np.zeros(shape, bool)
    else:
        flags = np.asarray(flags)
        if flags.dtype != bool:
            raise TypeError(f"flags must be a boolean array, got dtype {flags.dtype}")
        flags = _broadcast("flags", flags, shape)
    return flags.reshape(-1, shape[-1])


def in_wavelengths(uvw, freqs, usable) -> np.ndarray:
    """uvw per (row, channel) sample, (nsample, 3) in wavelengths; finite where usable."""
    if freqs is None:
        uvw_l = uvw.reshape(-1, 3)
    else:
        uvw_l = (uvw.reshape(-1, 1, 3) * (freqs / SPEED_OF_LIGHT)[None, :, None]).reshape(-1, 3)
    if not np.all(np.isfinite(uvw_l[usable])):
        raise ValueError("uvw contains NaN or inf in unflagged data")
    return uvw_l


def flatten_samples(uvw, vis, weights=None, flags=None, freqs=None) -> Samples:
    """Validate gridding inputs and flatten them to `Samples`.

    ``uvw`` (..., 3): wavelengths when ``freqs`` is None, metres otherwise.
    ``vis`` (..., npol) or with ``freqs`` (..., nchan, npol), npol in 1, 2, 4.
    ``weights``/``flags`` broadcast to the visibility shape.  NaN or inf is an error
    in unflagged data and allowed where flagged (real data often carries it there).
    """
    uvw, freqs, nchan = check_coordinates(uvw, freqs)
    vis = np.asarray(vis)
    if not np.iscomplexobj(vis):
        raise TypeError(f"vis must be complex (complex64 or complex128), got dtype {vis.dtype}")
    lead = uvw.shape[:-1]
    if nchan is None:
        if vis.ndim != uvw.ndim or vis.shape[:-1] != lead:
            raise ValueError(f"vis must have shape {lead + ('npol',)} to match uvw {uvw.shape}, "
                             f"got {vis.shape} (pass freqs= for a channel axis)")
    elif vis.ndim != uvw.ndim + 1 or vis.shape[:-1] != lead + (nchan,):
        raise ValueError(f"with {nchan} freqs, vis must have shape {lead + (nchan, 'npol')}, "
                         f"got {vis.shape}")
    npol = vis.shape[-1]
    if npol not in (1, 2, 4):
        raise ValueError(f"vis must have 1, 2 or 4 polarisations on its last axis, got {npol}")

    flags = _check_flags(flags, vis.shape)
    if weights is None:
        weights = np.ones(vis.shape)
    else:
        weights = _broadcast("weights", _as_real_array("weights", weights), vis.shape)
    weights = np.where(flags, 0.0, weights.reshape(flags.shape))
    if np.any(np.isnan(weights)) or np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError("weights must be finite and >= 0 where not flagged")
    vis = vis.reshape(flags.shape).astype(np.complex128, copy=False)
    usable = ~flags.all(axis=1)
    uvw_l = in_wavelengths(uvw, freqs, usable)
    if not np.all(np.isfinite(vis[~flags])):
        raise ValueError("vis contains NaN or inf in unflagged data")
    weighted = np.where(flags, 0.0, vis * weights)
    return Samples(uvw_l, weighted, weights, flags, usable, lead, nchan)


def flatten_positions(uvw, npol: int, flags=None, freqs=None) -> Samples:
    """Validate degridding inputs, where the visibilities are the output, and flatten them.

    ``uvw`` and ``freqs`` as for `flatten_samples`; the visibilities will have shape
    (..., npol) or (..., nchan, npol), and ``flags`` broadcast to that shape.
    """
    uvw, freqs, nchan = check_coordinates(uvw, freqs)
    shape = uvw.shape[:-1] + ((nchan,) if nchan is not None else ()) + (npol,)
    flags = _check_flags(flags, shape)
    usable = ~flags.all(axis=1)
    uvw_l = in_wavelengths(uvw, freqs, usable)
    return Samples(uvw_l, None, np.where(flags, 0.0, 1.0), flags, usable, uvw.shape[:-1], nchan)


def grid_indices(uvw, grid_size, cell_size, kernels: KernelStack):
    """Seed 003 Listing 1 index arithmetic, in float64, for uvw in wavelengths.

    Returns int64 arrays ``grid_u, grid_v, off_u, off_v, plane`` and bool ``conj``.
    """
    du = 1.0 / (grid_size * cell_size)
    pos_u = uvw[:, 0] / du
    pos_v = uvw[:, 1] / du
    near_u = round_half_away(pos_u)
    near_v = round_half_away(pos_v)
    os = kernels.oversample
    off_u = round_half_away((near_u - pos_u) * os)
    off_v = round_half_away((near_v - pos_v) * os)
    plane = round_half_away(np.sqrt(np.abs(uvw[:, 2] * kernels.w_scale)))
    conj = uvw[:, 2] < 0          # planes are the kernels for w >= 0 (clgrid.sources.tables)
    half = grid_size // 2
    as_int = lambda a: np.clip(a, -2**62, 2**62).astype(np.int64)  # noqa: E731 (far-off points stay far off)
    return (as_int(near_u) + half, as_int(near_v) + half, as_int(off_u), as_int(off_v),
            as_int(plane), conj)


@dataclass
class Positions:
    """Planned positions as host arrays, in the caller's sample order: what the float64
    reference grids, and what strategies that order visibilities on the host read
    (`clgrid.planning.plan.Plan.host`).

    Arrays are for the kept samples only; ``sample`` maps them back to the
    flattened inputs.  ``weight_sum`` is each one's sum of Re kernel, and ``norm``
    sum(weight * weight_sum) per polarisation, the normalisation of seed 003 Listing 1.  ``position`` (num_kept, 3) float64, for
    interpolated kernels only (`clgrid.sources.interpolation`): ``(frac_u, frac_v, z)``; the
    weights then come from it, ``support`` is the footprint S and the offsets are unused;
    for an analytic kernel source (`clgrid.sources.analytic`) too, where the kernel is
    evaluated at ``-frac`` (the offsets then serve the norm's weight sums alone).
    """

    grid_size: int
    npol: int
    sample: np.ndarray
    grid_u: np.ndarray
    grid_v: np.ndarray
    off_u: np.ndarray
    off_v: np.ndarray
    plane: np.ndarray
    conj: np.ndarray
    support: np.ndarray
    num_samples: int
    num_flagged: int
    num_off_grid: int
    num_beyond_stack: int
    norm: np.ndarray = field(repr=False)
    position: np.ndarray | None = field(default=None, repr=False)
    weight_sum: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def from_packed(cls, grid_size: int, sample, packed, support, weight_sum, num_samples: int,
                    counts: dict) -> "Positions":
        """Positions from the device form (`packed`), one polarisation, norm of unit weights."""
        packed = np.asarray(packed, np.int32).reshape(-1, 4)
        z, w = packed[:, 2], packed[:, 3]
        return cls(grid_size, 1, sample, packed[:, 0].copy(), packed[:, 1].copy(),
                   ((z << 16) >> 16).astype(np.int32), (z >> 16).astype(np.int32),
                   (w & 0x7FFFFFFF).astype(np.int32), w < 0, support, num_samples=num_samples,
                   num_flagged=counts["flagged"], num_off_grid=counts["off_grid"],
                   num_beyond_stack=counts["beyond_kernel_stack"], norm=np.array([weight_sum.sum()]),
                   weight_sum=weight_sum)

    @property
    def num_kept(self) -> int:
        return int(self.sample.size)

    @property
    def num_dropped(self) -> int:
        return self.num_off_grid + self.num_beyond_stack

    @property
    def grid_point_additions(self) -> int:
        """Complex multiply-adds into grid points, per polarisation (seed 004's GGPAPS count)."""
        return int(((2 * self.support.astype(np.int64) + 1) ** 2).sum()) * self.npol

    def packed(self) -> np.ndarray:
        """Device form, one int4 per visibility (decoded by ``plan.cl``).

        x = grid_u, y = grid_v, z = off_u in the low 16 bits and off_v in the high
        16 (both signed), w = plane with bit 31 set when the kernel is conjugated.
        """
        out = np.empty((self.num_kept, 4), np.uint32)
        out[:, 0] = self.grid_u
        out[:, 1] = self.grid_v
        out[:, 2] = (self.off_u.astype(np.int64) & 0xFFFF) | ((self.off_v.astype(np.int64) & 0xFFFF) << 16)
        out[:, 3] = self.plane.astype(np.int64) | (self.conj.astype(np.int64) << 31)
        return out.view(np.int32)

    def take(self, order: np.ndarray) -> "Positions":
        """The same work with the kept visibilities in ``order`` (a permutation)."""
        names = _PER_VISIBILITY + tuple(name for name in ("position", "weight_sum")
                                        if getattr(self, name) is not None)
        return replace(self, **{name: getattr(self, name)[order] for name in names})

    def _counts(self, done: str) -> dict:
        return {"samples": self.num_samples, done: self.num_kept, "flagged": self.num_flagged,
                "off_grid": self.num_off_grid, "beyond_kernel_stack": self.num_beyond_stack}

    def report(self) -> dict:
        """Counts for the caller: what was gridded and what was left out and why."""
        return {**self._counts("gridded"), "grid_point_additions": self.grid_point_additions,
                "norm": self.norm.copy()}

    def degrid_report(self) -> dict:
        """Counts for the caller: what was degridded and what was left out and why."""
        return {**self._counts("degridded"), "grid_point_reads": self.grid_point_additions}


_PER_VISIBILITY = ("sample", "grid_u", "grid_v", "off_u", "off_v", "plane", "conj", "support")


def plan_visibilities(samples: Samples, grid_size: int, cell_size: float, kernels: KernelStack,
                      on_dropped: str = "warn", done: str = "gridded", interpolation: str = "nearest") -> Positions:
    """Index every usable sample, drop and count the ones that cannot be gridded.

    A sample is *off the grid* when any cell of its kernel footprint is outside
    ``[0, grid_size)`` and *beyond the kernel stack* when its w-plane index exceeds
    the last plane.  ``on_dropped`` says what happens then: "warn" (default),
    "raise" (`DroppedVisibilitiesError`) or "ignore"; the counts are kept either way.
    ``done`` names the work in the message ("gridded" or "degridded").
    ``interpolation="linear"`` plans for kernels interpolated in (u, v, w)
    (`clgrid.sources.interpolation`): footprints of the interpolated support, the sampler's
    positions in ``Positions.position`` and the norm of the interpolated weights.
    """
    if on_dropped not in ON_DROPPED:
        raise ValueError(f"on_dropped must be one of {ON_DROPPED}, got {on_dropped!r}")
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}")
    check_grid_geometry(grid_size, cell_size)
    if kernels.max_support * 2 + 1 > grid_size:
        raise ValueError(f"kernels of support {kernels.max_support} do not fit a {grid_size}^2 grid")
    usable = np.flatnonzero(samples.usable)
    gu, gv, ou, ov, plane, conj = grid_indices(samples.uvw[usable], grid_size, cell_size, kernels)
    in_stack = plane < kernels.num_planes
    linear = interpolation == "linear"
    if linear or kernels.evaluated:
        position = continuous_positions(samples.uvw[usable], grid_size, cell_size, kernels)
    if linear:
        support = np.where(in_stack, footprint_supports(kernels, position[:, 2]), 0)
    else:
        support = np.where(in_stack, kernels.supports[np.minimum(plane, kernels.num_planes - 1)], 0)
    on_grid = ((gu - support >= 0) & (gu + support < grid_size)
               & (gv - support >= 0) & (gv + support < grid_size))
    keep = in_stack & on_grid
    num_beyond = int((~in_stack).sum())
    num_off = int((in_stack & ~on_grid).sum())
    r = offset_range(kernels.oversample)
    sample = usable[keep]
    plane_k = plane[keep].astype(np.int32)
    ou_k, ov_k = ou[keep].astype(np.int32), ov[keep].astype(np.int32)
    if linear:
        position = position[keep]
        sums = interpolated_norm_sums(kernels, position, support[keep])
    else:
        position = position[keep] if kernels.evaluated else None
        sums = kernels.weight_sums()[plane_k, ov_k + r, ou_k + r]
    norm = (samples.weights[sample] * sums[:, None]).sum(axis=0)
    plan = Positions(grid_size, samples.npol, sample, gu[keep].astype(np.int32), gv[keep].astype(np.int32),
                ou_k, ov_k, plane_k, conj[keep], support[keep].astype(np.int32),
                num_samples=samples.uvw.shape[0], num_flagged=int((~samples.usable).sum()),
                num_off_grid=num_off, num_beyond_stack=num_beyond, norm=norm, position=position,
                     weight_sum=np.asarray(sums, np.float64))
    report_dropped(num_off, num_beyond, plan.num_samples, grid_size, kernels, on_dropped, done, stacklevel=None)
    return plan


def report_dropped(num_off: int, num_beyond: int, num_samples: int, grid_size: int, kernels: KernelStack,
                   on_dropped: str, done: str, stacklevel: int | None = None) -> None:
    """Warn (or raise) about samples that cannot be gridded, as `on_dropped` says (the
    warning at ``stacklevel``, `clgrid.call_warnings.warn`'s: None, the caller's line)."""
    if not (num_off + num_beyond) or on_dropped == "ignore":
        return
    msg = (f"{num_off + num_beyond} of {num_samples} visibilities not {done}: "
           f"{num_off} off the {grid_size}^2 grid, {num_beyond} beyond the last w-plane "
           f"(|w| > {kernels.plane_w(kernels.num_planes - 1):.4g} wavelengths)")
    if on_dropped == "raise":
        raise DroppedVisibilitiesError(msg)
    warn(msg, stacklevel=stacklevel)


# -- w-stacking (clgrid.imaging) ---------------------------------------------------------

def stacked_points(uvw, scale, keep, signs, fold: bool):
    """u, v, w (wavelengths, flipped, folded) of the kept samples, their flat indices and
    whether each moved to -uvw (w < 0 with ``fold``: the point is conjugated)."""
    nchan = scale.size
    flat = np.flatnonzero(keep.reshape(-1)) if keep is not None else np.arange(uvw.shape[0] * nchan)
    rows, chans = np.divmod(flat, nchan)
    f = scale[chans]
    u, v, w = (uvw[rows, axis] * signs[axis] * f for axis in range(3))
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(v)) and np.all(np.isfinite(w))):
        raise ValueError("uvw has NaN or infinite entries (in unmasked samples)")
    moved = (w < 0) if fold else np.zeros(w.shape, bool)
    if fold:
        u, v, w = (np.where(moved, -a, a) for a in (u, v, w))
    return u, v, w, flat, moved


def stacked_positions(uvw, scale, keep, signs, geometry, fold: bool, planes: range | None = None) -> dict:
    """The w-stacking plan in numpy, float64, in the caller's sample order: the reference the
    device planning (``clgrid/cl_kernels/plan_positions.cl``, ``classify_stacked``) matches
    bit for bit, and the planning of devices without fp64.

    ``uvw`` (nrow, 3) metres, ``scale`` (nchan,) frequency / c, ``keep`` (nrow, nchan) bool or
    None, ``signs`` the flips (+1 or -1 per axis), ``geometry`` a
    `clgrid.imaging.geometry.ImageGeometry`.  Returns ``sample`` (int32, flat sample index),
    ``packed`` (int32 (n, 4): first u cell and first v cell modulo the grid, 0, first plane
    with bit 31 set where the point moved), ``fraction`` (float64 (n, 4): the first taps'
    offsets from the point in cells and planes, in [-W/2, -W/2 + 1)), ``phase``
    (complex128, the factor gridding applies, or None where the geometry has none) and
    ``flagged`` (the samples ``keep`` leaves out).  ``planes`` (a range; None: all): only the
    points with a tap on them."""
    g, support = geometry, geometry.kernel.support
    u, v, w, flat, moved = stacked_points(uvw, scale, keep, signs, fold)
    if g.do_wgridding and g.tilted:          # a recentred image's tilted w term (ImageGeometry.w_term)
        u, v = u + g.tilt_x * w, v + g.tilt_y * w
    half = support / 2.0
    cells_u, cells_v = g.cells_per_wavelength
    pos_u, pos_v = u * cells_u, v * cells_v
    first_u, first_v = np.ceil(pos_u - half), np.ceil(pos_v - half)
    if g.do_wgridding:
        pos_w = g.plane_positions(w)
        first_w = g.first_planes(w)
        frac_w = first_w - pos_w
    else:
        first_w = frac_w = np.zeros_like(u)
    flagged = uvw.shape[0] * scale.size - flat.size
    if g.do_wgridding and planes is not None:          # (before the stack's check: a slab's geometry
        on = (first_w < planes.stop) & (first_w + support > planes.start)     # holds its own points only)
        if not on.all():
            u, v, w, flat, moved = u[on], v[on], w[on], flat[on], moved[on]
            pos_u, pos_v, first_u, first_v = pos_u[on], pos_v[on], first_u[on], first_v[on]
            first_w, frac_w = first_w[on], frac_w[on]
    if g.do_wgridding and (np.any(first_w < 0) or np.any(first_w + support > g.num_planes)):
        raise RuntimeError("clgrid internal error: a point's w-planes fall outside the stack")
    packed = np.zeros((u.size, 4), np.int64)
    packed[:, 0] = first_u.astype(np.int64) % g.nu
    packed[:, 1] = first_v.astype(np.int64) % g.nv
    packed[:, 3] = first_w.astype(np.int64) | (moved.astype(np.int64) << 31)
    fraction = np.zeros((u.size, 4), np.float64)
    fraction[:, 0], fraction[:, 1], fraction[:, 2] = first_u - pos_u, first_v - pos_v, frac_w
    phase = None
    if g.has_phase:
        phase = np.exp(2j * np.pi * (u * g.center_x + v * g.center_y - w * g.nshift))
    return dict(sample=flat.astype(np.int32), packed=packed.astype(np.uint32).view(np.int32), fraction=fraction,
                phase=phase, flagged=flagged)
