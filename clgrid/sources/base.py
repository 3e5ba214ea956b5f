"""The kernel-source protocol: what a gridder, degridder or imaging operator asks of the
source of its convolution weights, whichever it is — W-projection tables read at the
nearest oversampled sample or interpolated (`clgrid.sources.tables.KernelStack`), or the
exponential-of-semicircle kernel evaluated at each visibility's exact offsets
(`clgrid.sources.analytic`).

On the host a source says where a visibility's taps are (``supports`` per plane, the
``oversample`` of the plan's integer offsets, the w-planes: ``num_planes``, ``w_scale``),
whether the plan must carry exact offsets (``evaluated``), the norm's weight sums, its
largest weight (overflow bounds), the grid correction an image is divided by, and its
float64 weights for the references.  On the device it is a template include
(``device_source``: ``source_table.cl``, ``source_texture.cl`` or ``source_analytic.cl`` in
``clgrid/cl_kernels/``) defining the same names for every work distribution: the kernel
arguments it reads (``SOURCE_ARGS``, filled by ``kernel_arguments``), where a visibility's
taps are (made once per visibility) and the weight of tap (j, k) (``source_table.cl``'s
header lists them).  ``template_parameters`` are the include's variables, ``device_tables``
the arrays a table-reading kernel takes; the distributions never ask which source they run
with.
"""

from __future__ import annotations

import abc
import os

import numpy as np

__all__ = ["KernelSource", "grid_to_image"]


def grid_to_image(grid: np.ndarray) -> np.ndarray:
    """``sum G exp(+2 pi i (u l + v m))`` with both grid and image centred at N // 2, in the
    grid's precision (complex64 or complex128), on every core: the imaging convention of
    `clgrid.imaging.dirty_image`, and how a table's grid correction is made."""
    import scipy.fft  # here, not at import: scipy.fft brings scipy.special (~20 MiB) to every clgrid process

    shifted = np.fft.ifftshift(grid, axes=(-2, -1))         # a copy: the transform may overwrite it
    image = scipy.fft.ifft2(shifted, axes=(-2, -1), norm="forward", overwrite_x=True, workers=os.cpu_count())
    return np.fft.fftshift(image, axes=(-2, -1))


class KernelSource(abc.ABC):
    """The protocol every kernel source implements (see the module docstring)."""

    #: whether the weights are evaluated at each visibility's exact offset (the plan then
    #: carries the offsets: `clgrid.planning.plan.Plan.fraction`) rather than read from tables
    evaluated: bool = False

    #: int32 (num_planes,): the footprint's half-width in cells on each w-plane
    supports: np.ndarray
    #: samples per cell of the plan's integer offsets
    oversample: int
    #: a visibility's w-plane is ``round(sqrt(|w| * w_scale))`` (0: one plane)
    w_scale: float

    @property
    def num_planes(self) -> int:
        return int(np.asarray(self.supports).size)

    @property
    def max_support(self) -> int:
        return int(np.asarray(self.supports).max())

    @abc.abstractmethod
    def plane_w(self, p: int) -> float:
        """|w| in wavelengths at the centre of plane ``p``."""

    @abc.abstractmethod
    def weight_sums(self) -> np.ndarray:
        """The norm's weight per unit weight: the sum of Re(weight) over a visibility's
        footprint for each plane and pair of oversample offsets, ``(num_planes, 2R + 1,
        2R + 1)`` indexed ``[p, off_v + R, off_u + R]`` with ``R = offset_range(oversample)``."""

    @property
    @abc.abstractmethod
    def peak(self) -> float:
        """The largest |Re| or |Im| of any weight (bounds the sums a cell can reach)."""

    def template_parameters(self) -> dict:
        """The template variables of the source's device include (none for tables)."""
        return {}

    @abc.abstractmethod
    def device_source(self, interpolation: str = "nearest") -> str:
        """The template include (in ``clgrid/cl_kernels/``) that reads this source's weights
        on the device when a strategy reads them with ``interpolation`` ("nearest" or
        "linear"); a `ValueError` naming the interpolation where the source has none."""

    @abc.abstractmethod
    def kernel_arguments(self, reader, plan) -> tuple:
        """The device arrays the include's ``SOURCE_ARGS`` declare, in their order, for the
        strategy ``reader`` (its ``interpolation``, and what it uploaded: ``device_kernels``,
        a `clgrid.strategies.base.DeviceKernelStack` in its layout, or ``device_cube``) and
        its arranged ``plan`` (a `clgrid.strategies.base.DevicePlan`: ``fraction``,
        ``position``)."""

    @abc.abstractmethod
    def device_tables(self, layout: str) -> tuple:
        """``(values, starts[, sides])`` for `clgrid.strategies.base.DeviceKernelStack` in
        ``layout`` (``compact``, ``by_offset``, ``u_rows``): what a table-reading kernel takes."""

    @abc.abstractmethod
    def grid_correction(self, grid_size: int) -> np.ndarray:
        """float64 (grid_size, grid_size): what gridding multiplies a sky by on a grid of
        ``grid_size`` cells (the image of the kernel), which `clgrid.imaging.dirty_image`
        divides by."""

    @abc.abstractmethod
    def tap_weights(self, plan, sel: np.ndarray, taps: np.ndarray) -> np.ndarray:
        """float64 reference: the unconjugated weights (n, W, W) [j, k] of taps ``taps``
        (cells from the nearest cell) of the planned visibilities ``sel`` (a
        `clgrid.planning.host.Positions`), all of one plane."""
