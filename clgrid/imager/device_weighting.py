"""The O(samples) passes of `clgrid.imager.weighting.WeightGrid` on an OpenCL device.

A `WeightGrid` made with ``device=`` gives its two passes over the samples to a
`DeviceWeights`: the density (each sample's visibility weight summed into its uv cell) and
the application (each sample's weight times its cell's imaging weight, with the sums the
pipeline needs).  What lies between, turning the cell sums into imaging weights (uniform,
Briggs, the rank filter), is a pass over the grid, not the samples, and stays on the host
in float64, shared with the host path.

Exactness against the host path (`clgrid/cl_kernels/imaging_weights.cl`):

- a sample's cell is computed in double precision with the host's operations in the host's
  order and no fused multiply-adds, so both paths put it in the same cell;
- the density is summed in 64-bit fixed point, in units of ``2^-k`` with ``k`` the largest
  for which the sum of |weight| of every sample added so far stays below ``2^61`` (as
  `clgrid.operators.deterministic` scales the gridded visibilities), by the project's
  deterministic atomic add (``common.cl``): integer atomics, so the grid has the same bits
  whatever the order of the adds.  A later `add` whose weights would pass the bound first
  halves the units as often as needed (the cells rounded to the new units).  Each weight is
  rounded to a multiple of ``2^-k``: at most ``2^-62`` of the total weight per sample, far
  below float32's own rounding of the weights;
- the imaging weights go back to the device in float32, as the host casts them before it
  multiplies, and the product is one float32 multiplication: the weights in the image are
  the host's to the bit; the sums (counts exactly, weight sums in float64) differ from the
  host's only in the order of addition.

Needs double precision (``cl_khr_fp64``) and 64-bit integer atomics
(``cl_khr_int64_base_atomics``); `device_weights_unavailable` says what a device lacks.
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl

from ..device.codegen import build_program, kernel as codegen_kernel, render
from ..device.reduction import DeviceSum
from ..device.runtime import device_facts, fill_zeros, get_queue
from ..device.transfer import download, shared_staging, upload

__all__ = ["DeviceWeights", "WEIGHTS_ON", "device_weights_unavailable", "fixed_point_exponent", "weights_device"]

WEIGHTS_ON = ("auto", "device", "host")

SPEED_OF_LIGHT = 299792458.0
# |sums| stay below 2^61: a rounded partial sum still fits a signed 64-bit integer with room
HEADROOM_BITS = 61
WG = 128                       # work-group size of the apply kernel (a power of two)
GROUPS_PER_UNIT = 8            # work-groups per compute unit in each pass
# DeviceSum counts in 32-bit integers: longer arrays are summed in parts of this many entries
_SUM_PART = 1 << 30


def device_weights_unavailable(device) -> str | None:
    """Why imaging weights cannot be computed on ``device`` (a pyopencl Device), or None."""
    facts = device_facts(device)
    if not facts.fp64:
        return f"{facts.name.strip()} has no double precision (cl_khr_fp64)"
    if not facts.int64_atomics:
        return f"{facts.name.strip()} has no 64-bit integer atomics (cl_khr_int64_base_atomics)"
    return None


def weights_device(spec, weights_on: str = "auto") -> tuple:
    """Where ``clgrid image`` computes the imaging weights: ``(device or None, why)``, None
    meaning the host threads.

    ``weights_on``: ``"device"`` the imaging device ``spec`` (the first of a list),
    ``"host"`` the host threads, ``"auto"`` the device where it is a GPU and the host where
    the device is the host's own CPU (PoCL, Intel's CPU runtime): there the host threads
    were the faster (docs/benchmarks/imaging.md, "Imaging weights on the device").  A device
    that lacks double precision or 64-bit atomics falls back to the host under ``"auto"``
    and is refused under ``"device"`` (ValueError naming ``--weights-on``)."""
    from ..device.runtime import select_device

    if weights_on not in WEIGHTS_ON:
        raise ValueError(f"--weights-on must be one of {', '.join(WEIGHTS_ON)}, got {weights_on!r}")
    if weights_on == "host":
        return None, "host threads (--weights-on host)"
    if isinstance(spec, (list, tuple)):
        spec = spec[0] if spec else None
    device = select_device(spec)
    name = device.name.strip()
    why = device_weights_unavailable(device)
    if why:
        if weights_on == "device":
            raise ValueError(f"--weights-on device: {why}")
        return None, f"host threads ({why})"
    if weights_on == "auto" and not device.type & cl.device_type.GPU:
        return None, f"host threads (auto: {name} is the host's CPU)"
    return device, f"{name} ({'auto: a GPU' if weights_on == 'auto' else '--weights-on device'})"


def fixed_point_exponent(bound: float) -> int:
    """The ``k`` of the units ``2^-k`` for cell sums of at most ``bound`` (module docstring)."""
    if not bound > 0 or not math.isfinite(bound):
        return 0
    return int(np.clip(math.floor(HEADROOM_BITS - math.log2(bound)), -1000, 1000))


class DeviceWeights:
    """The density grid of one `WeightGrid` on the device, and the application of its
    imaging weights.

    Parameters
    ----------
    device
        Anything `clgrid.device.runtime.get_queue` takes (a name, a pyopencl Device, Context
        or CommandQueue, or None for the default device).
    width, half_height : int
        The grid: ``half_height`` rows of ``width`` cells (the half uv plane).
    scale_x, scale_y : float
        ``width * pixel size x`` and ``height * pixel size y``: a sample at (u, v)
        wavelengths falls in column ``floor(u scale_x + width / 2)``, row ``floor(v scale_y)``.

    Raises
    ------
    clgrid.DeviceCapabilityError
        Where the device lacks what the passes need (`device_weights_unavailable`).
    """

    def __init__(self, device, width: int, half_height: int, scale_x: float, scale_y: float):
        from ..errors import DeviceCapabilityError

        self.queue = get_queue(device)
        why = device_weights_unavailable(self.queue.device)
        if why:
            raise DeviceCapabilityError(f"imaging weights on the device: {why}")
        self.width, self.half_height = int(width), int(half_height)
        self.scale_x, self.scale_y = float(scale_x), float(scale_y)
        self.cells = self.width * self.half_height
        context = self.queue.context
        facts = device_facts(self.queue.device)
        self.wg = min(WG, 1 << int(math.log2(max(1, facts.max_work_group_size))))
        self.groups = max(1, GROUPS_PER_UNIT * facts.compute_units)
        self.program = build_program(context, render("imaging_weights.cl", double=True, deterministic=True,
                                                     atomic="cas", wg=self.wg))
        self.staging = shared_staging(self.queue)
        self.density: cl.Buffer | None = None      # the fixed-point cell sums (int64)
        self.exponent = 0
        self.bound = 0.0                           # sum |weight| added so far
        self.imaging: cl.Buffer | None = None      # the imaging weights (float32), after `set_imaging`
        self._uvw = (None, None)                   # (host array, its device copy)

    def _buffer(self, host: np.ndarray, flags=cl.mem_flags.READ_ONLY) -> cl.Buffer:
        buffer = cl.Buffer(self.queue.context, flags, max(1, host.nbytes))
        upload(self.queue, host, buffer, self.staging).wait()
        return buffer

    def _uvw_buffer(self, uvw: np.ndarray) -> cl.Buffer:
        """The device copy of ``uvw``, uploaded once for the grid's passes over the same array."""
        if self._uvw[0] is not uvw:
            self._uvw = (uvw, self._buffer(np.ascontiguousarray(uvw, np.float64)))
        return self._uvw[1]

    def _abs_sum(self, weights: cl.Buffer, count: int) -> float:
        total = 0.0
        summing = DeviceSum.of(self.queue.context, np.float64, "fabs((double)w[offset + i])",
                               "__global const float *w, const ulong offset")
        for start in range(0, count, _SUM_PART):
            total += float(summing(self.queue, min(_SUM_PART, count - start), weights, np.uint64(start)).get())
        return total

    def add(self, uvw: np.ndarray, freqs: np.ndarray, weights: np.ndarray) -> None:
        """Sum ``weights`` (nrow, nchan; float32) of the samples at ``uvw`` (nrow, 3; metres) and
        ``freqs`` (nchan; Hz) into the density grid."""
        if weights.dtype != np.float32:
            raise TypeError(f"weights: the device path takes float32 weights, got {weights.dtype}")
        nrow, nchan = weights.shape
        if nrow * nchan == 0:
            return
        queue = self.queue
        wavelengths = self._buffer(SPEED_OF_LIGHT / np.asarray(freqs, np.float64))
        values = self._buffer(np.ascontiguousarray(weights, np.float32))
        bound = self.bound + self._abs_sum(values, nrow * nchan)
        exponent = fixed_point_exponent(bound)
        if self.density is None:
            self.density = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, self.cells * 8)
            fill_zeros(queue, self.density, self.cells * 8, np.int64).wait()
            self.exponent = exponent
        elif exponent < self.exponent:
            codegen_kernel(self.program, "halve_units")(
                queue, (self.groups * self.wg,), None, self.density, np.uint64(self.cells),
                np.int32(min(62, self.exponent - exponent)))
            self.exponent = exponent
        self.bound = bound
        codegen_kernel(self.program, "density")(
            queue, (self.groups * self.wg,), None, self._uvw_buffer(uvw), wavelengths, values, np.uint64(nrow),
            np.int32(nchan), np.float64(self.scale_x), np.float64(self.scale_y), np.int32(self.width),
            np.int32(self.half_height), np.int32(self.exponent), self.density).wait()

    def download_density(self, grid: np.ndarray) -> float:
        """Write the cell sums into ``grid`` (half_height, width; float64, C-contiguous),
        converted from fixed point in place, a block at a time (no second grid on the
        host); frees the device's fixed-point grid.  Returns the sum of the cells (exact:
        the integers' sum, scaled once)."""
        fixed = grid.reshape(-1).view(np.int64)
        if self.density is None:
            grid[...] = 0.0
            return 0.0
        download(self.queue, self.density, fixed, self.staging)
        self.density.release()
        self.density = None
        total = math.ldexp(float(int(fixed.sum())), -self.exponent)
        flat = grid.reshape(-1)
        step = 1 << 20
        for start in range(0, flat.size, step):
            part = slice(start, min(flat.size, start + step))
            flat[part] = np.ldexp(fixed[part].astype(np.float64), -self.exponent)
        return total

    def set_imaging(self, grid: np.ndarray) -> None:
        """Upload the imaging weights ``grid`` (float64) as float32, the host path's cast."""
        self.imaging = self._buffer(np.ascontiguousarray(grid, np.float32).reshape(-1))

    def apply(self, uvw: np.ndarray, freqs: np.ndarray, weights: np.ndarray, used: np.ndarray | None):
        """``weights`` (nrow, nchan; float32, C-contiguous) *= each sample's imaging weight, in
        place; ``used`` (bool, the same shape) |= the result is not 0.  Returns ``(before,
        kept, visibility_weight_sum, weight_sum, longest)``, ``longest`` in wavelengths."""
        if self.imaging is None:
            raise RuntimeError("DeviceWeights.apply before set_imaging")
        if weights.dtype != np.float32 or not weights.flags.c_contiguous or not weights.flags.writeable:
            raise TypeError(f"weights: the device path takes a writeable C-contiguous float32 array, "
                            f"got {weights.dtype} (contiguous: {weights.flags.c_contiguous})")
        if used is not None and (used.dtype != np.bool_ or used.shape != weights.shape
                                 or not used.flags.c_contiguous):
            raise TypeError(f"used: a C-contiguous bool array of shape {weights.shape} expected, got "
                            f"{used.dtype} {used.shape}")
        nrow, nchan = weights.shape
        if nrow * nchan == 0:
            return 0, 0, 0.0, 0.0, 0.0
        queue, flags = self.queue, cl.mem_flags
        freqs = np.asarray(freqs, np.float64)
        wavelengths = self._buffer(SPEED_OF_LIGHT / freqs)
        frequencies = self._buffer(freqs)
        values = self._buffer(weights, flags.READ_WRITE)
        mask_host = used.view(np.uint8) if used is not None else np.zeros(weights.shape, np.uint8)
        mask = self._buffer(mask_host, flags.READ_WRITE)
        counts = np.empty(2 * self.groups, np.int64)
        sums = np.empty(3 * self.groups, np.float64)
        counts_buffer = cl.Buffer(queue.context, flags.WRITE_ONLY, counts.nbytes)
        sums_buffer = cl.Buffer(queue.context, flags.WRITE_ONLY, sums.nbytes)
        done = codegen_kernel(self.program, "apply")(
            queue, (self.groups * self.wg,), (self.wg,), self._uvw_buffer(uvw), wavelengths, frequencies, values,
            self.imaging, mask, np.uint64(nrow), np.int32(nchan), np.float64(self.scale_x),
            np.float64(self.scale_y), np.int32(self.width), np.int32(self.half_height), counts_buffer, sums_buffer)
        download(queue, values, weights, self.staging, wait_for=[done])
        if used is not None:
            download(queue, mask, mask_host, self.staging)
        cl.enqueue_copy(queue, counts, counts_buffer)
        cl.enqueue_copy(queue, sums, sums_buffer).wait()
        for buffer in (values, mask, counts_buffer, sums_buffer, wavelengths, frequencies):
            buffer.release()
        counts, sums = counts.reshape(-1, 2), sums.reshape(-1, 3)
        return (int(counts[:, 0].sum()), int(counts[:, 1].sum()), float(sums[:, 0].sum()),
                float(sums[:, 1].sum()), float(sums[:, 2].max()) / SPEED_OF_LIGHT)

    def release(self) -> None:
        """Free the device buffers now (they are also freed with this object)."""
        for buffer in (self.density, self.imaging, self._uvw[1]):
            if buffer is not None:
                buffer.release()
        self.density = self.imaging = None
        self._uvw = (None, None)
