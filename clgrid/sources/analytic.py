"""An analytic kernel source for the seeds' work distributions: the exponential-of-semicircle
kernel of `clgrid.sources.accuracy`, evaluated on the device by Horner's rule at each visibility's
exact offset, beside the W-projection tables of `clgrid.sources.tables`.

Why not a finer table: the plan stores oversample offsets in 16 bits, and the nearest
offset of even the finest table that fits (``oversample = 32768``) moves each visibility by
up to 1/65536 of a cell, which costs about ``0.75 / (oversample * sigma)`` of the image
(`benchmarks/analytic_offsets.py`, 2-D, random points: 9e-6 to 1.3e-5 at 32768, 2e-2 at
16), the whole error budget of single precision and far above double's.  So a plan for an analytic kernel also carries each
sample's exact offset from its nearest cell, ``fraction = nearest - position`` in cells
(`clgrid.planning.plan.Plan.fraction`, planned in float64), and a tap ``k`` cells from the
nearest cell weighs ``psi(k + fraction)``: the kernel at that tap's true distance.

The kernel is ``psi(x) = exp(beta (sqrt(1 - x^2) - 1)) / c(0)`` on ``|x| = 2 d / W <= 1``
for a cell ``d`` cells from the point, one polynomial per tap (`horner_coefficients`,
the very code of the w-gridding operator: ``clgrid/cl_kernels/es_horner.cl``).  It is divided by
``c(0)``, its integral, so that a visibility's weights sum to 1 as a W-projection plane's
do: norms and `clgrid.imaging.dirty_image` mean the same for both sources.  Width,
``beta`` and the grid padding ``sigma`` come from a requested ``epsilon``
(`clgrid.sources.accuracy.choose_kernel`, 2-D); the image is then accurate to ``accuracy`` over
its central ``grid_size / sigma`` pixels once divided by the kernel's exact Fourier
transform (`transform`; `clgrid.imaging` does it for this source).

`AnalyticKernel` is a kernel source of its own (`clgrid.sources.base.KernelSource`, not a
table): one plane (no W-projection: w is not corrected), the plan's integer offsets at
``TABLE_OVERSAMPLE`` serving the norm's weight sums only (computed from the polynomials);
the work distributions that evaluate it are those with ``analytic_source`` set
(`clgrid.strategies`), and the others refuse it by name.  `StackedKernel` is the same
kernel over u, v and stacked w-planes, the imaging operator's source.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .accuracy import choose_kernel, expected_error, horner_coefficients, kernel_transform
from .base import KernelSource
from .tables import offset_range

__all__ = ["AnalyticKernel", "StackedKernel", "TABLE_OVERSAMPLE"]

# Oversampling of the stored table and of the plan's integer offsets: they serve the norm's
# weight sums only, which hardly vary with the offset (by the kernel's aliasing, ~epsilon).
TABLE_OVERSAMPLE = 16


@dataclass(frozen=True, eq=False)
class AnalyticKernel(KernelSource):
    """The exponential-of-semicircle kernel as a kernel source (`KernelStack.analytic`).

    ``width`` (W, cells the kernel spans; the footprint is ``2 * (W // 2) + 1`` cells a
    side), ``beta`` (its shape), ``sigma`` (the grid padding its accuracy assumes: grid
    ``sigma`` times the image), ``accuracy`` (the relative L2 error expected of the image's
    central ``grid_size / sigma`` pixels in ``precision``).  One w-plane: w is not
    corrected.  Its plan's integer offsets, at ``TABLE_OVERSAMPLE``, serve the norm's
    weight sums only; the kernels evaluate it at the exact offsets.
    """

    width: int
    beta: float
    sigma: float = 1.0
    precision: str = "single"
    accuracy: float = 0.0
    evaluated = True

    def __post_init__(self):
        if int(self.width) != self.width or self.width < 2:
            raise ValueError(f"an analytic kernel's width must be an integer >= 2, got {self.width!r}")
        if not (np.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"an analytic kernel's beta must be positive, got {self.beta!r}")

    @classmethod
    def for_epsilon(cls, epsilon: float, precision: str = "single", sigma_min: float = 1.1,
                    sigma_max: float = 2.6) -> "AnalyticKernel":
        """The cheapest kernel (fewest footprint cells, then least padding) whose 2-D image
        error is at most ``epsilon`` in ``precision`` with ``sigma`` in the given range."""
        choice = choose_kernel(epsilon, precision, 2, cost=lambda r: (2 * (r.support // 2) + 1, r.sigma),
                               sigma_min=sigma_min, sigma_max=sigma_max)
        return cls(int(choice.support), float(choice.beta), sigma=choice.sigma, precision=precision,
                   accuracy=expected_error(choice, precision, 2))

    # -- the protocol -------------------------------------------------------------------
    @property
    def supports(self) -> np.ndarray:
        out = np.array([self.width // 2], np.int32)
        out.flags.writeable = False
        return out

    @property
    def oversample(self) -> int:
        return TABLE_OVERSAMPLE

    @property
    def w_scale(self) -> float:
        return 0.0

    def plane_w(self, p: int) -> float:
        return 0.0

    def weight_sums(self) -> np.ndarray:
        """The norm's weights: a visibility at oversample offsets (off_u, off_v) sums
        ``s(off_u) s(off_v)`` over its footprint, ``s(o) = sum_k psi(k + o / oversample)``."""
        return self._weight_sums

    @cached_property
    def _weight_sums(self) -> np.ndarray:
        r = offset_range(TABLE_OVERSAMPLE)
        s = int(self.width // 2)
        offsets = np.arange(-r, r + 1) / TABLE_OVERSAMPLE
        sums = self.weights(np.arange(-s, s + 1)[None, :] + offsets[:, None]).sum(axis=1)
        out = np.outer(sums, sums)[None]
        out.flags.writeable = False
        return out

    @property
    def peak(self) -> float:
        return float(self.weights(0.0)) ** 2

    def device_source(self, interpolation: str = "nearest") -> str:
        """``source_analytic.cl``: evaluated at the exact offsets, so nothing to interpolate."""
        if interpolation != "nearest":
            raise ValueError(f"an analytic kernel source is evaluated at each visibility's exact offset; "
                             f"interpolation={interpolation!r} does not apply to it")
        return "source_analytic.cl"

    def kernel_arguments(self, reader, plan) -> tuple:
        """Each visibility's offset from its cell, in the plan's order, and the supports."""
        return plan.fraction, reader.device_kernels.supports

    def device_tables(self, layout: str) -> tuple:
        """No tables: the kernels evaluate the polynomials; a placeholder of each array."""
        return np.zeros(1, np.complex128), np.zeros(1, np.int32), np.ones(1, np.int32)

    def grid_correction(self, grid_size: int) -> np.ndarray:
        """The kernel's exact transform ``c(l) c(m)``: visibilities sit anywhere between
        cells, and only the continuous transform says what their footprints multiply the
        sky by."""
        c = self.transform((np.arange(grid_size) - grid_size // 2) / grid_size)
        return np.outer(c, c)

    def tap_weights(self, plan, sel: np.ndarray, taps: np.ndarray) -> np.ndarray:
        """Tap k lies ``k - frac`` cells from the visibility (``frac`` = position - nearest cell)."""
        wu = self.weights(taps - plan.position[sel, 0, None])   # (n, W)
        wv = self.weights(taps - plan.position[sel, 1, None])
        return (wv[:, :, None] * wu[:, None, :]).astype(np.complex128)

    @staticmethod
    def _scaled_coefficients(width: int, beta: float) -> np.ndarray:
        return horner_coefficients(width, beta) / kernel_transform(0.0, width, beta)

    @cached_property
    def coefficients(self) -> np.ndarray:
        """``(degree + 1, width)`` per-tap polynomials, highest power first, scaled to sum 1
        (`clgrid.sources.accuracy.horner_coefficients` divided by the kernel's integral)."""
        coef = self._scaled_coefficients(self.width, self.beta)
        coef.flags.writeable = False
        return coef

    def weights(self, distance) -> np.ndarray:
        """The kernel in float64 at cells ``distance`` cells from a point (0 beyond its
        width): the polynomials the device evaluates, for references and tests."""
        return _evaluate(self.coefficients, self.width, distance)

    def transform(self, s) -> np.ndarray:
        """The kernel's exact Fourier transform at ``s`` cycles per cell (1 at s = 0): what
        an image of its grid is divided by, per axis."""
        return kernel_transform(s, self.width, self.beta) / kernel_transform(0.0, self.width, self.beta)

    def padded_size(self, image_size: int) -> int:
        """The smallest even grid size at least ``sigma`` times ``image_size`` pixels."""
        return 2 * int(np.ceil(self.sigma * image_size / 2))

    def template_parameters(self) -> dict:
        """``clgrid/cl_kernels/es_horner.cl``'s template variables for this kernel, and ``es_taps``, the
        taps of a footprint's side (2 support + 1) the work distributions evaluate it at."""
        return {"es_width": self.width, "es_degree": self.coefficients.shape[0] - 1,
                "es_coef": self.coefficients.tolist(), "es_taps": 2 * int(self.supports[0]) + 1}


def _evaluate(coef: np.ndarray, width: int, distance) -> np.ndarray:
    """es_horner.cl's ``es_weight`` in float64: tap ``floor(d + W/2)``'s polynomial at
    ``z = 2 (d + W/2 - tap) - 1``, 0 outside the taps."""
    t = np.asarray(distance, np.float64) + width / 2.0
    tap = np.floor(t).astype(np.int64)
    inside = (tap >= 0) & (tap < width)
    tap = np.clip(tap, 0, width - 1)
    z = 2.0 * (t - tap) - 1.0
    out = np.zeros(t.shape)
    for row in coef:
        out = out * z + row[tap]
    return np.where(inside, out, 0.0)


@dataclass(frozen=True)
class StackedKernel:
    """The exponential-of-semicircle kernel over u, v and, with w, evenly spaced w-planes
    (w-stacking): the imaging operator's kernel source (`clgrid.imaging`), evaluated on the
    device at each point's exact offsets (``clgrid/cl_kernels/source_stacked.cl``) by the
    w-stacking work distributions (`clgrid.strategies.stacked`).

    ``width`` taps per axis (the kernel spans ``width`` cells and, with w, planes), ``beta``
    its shape (`clgrid.sources.accuracy.KernelChoice`), ``num_planes`` w-planes in the
    stack, ``use_w`` whether w is stacked at all.  Unlike `AnalyticKernel` it is not scaled
    to sum 1: the imaging operator divides by the kernel's transform itself."""

    width: int
    beta: float
    num_planes: int = 1
    use_w: bool = False

    @classmethod
    def of(cls, geometry) -> "StackedKernel":
        """The source of a `clgrid.imaging.geometry.ImageGeometry`."""
        return cls(int(geometry.kernel.support), float(geometry.kernel.beta), int(geometry.num_planes),
                   bool(geometry.do_wgridding))

    @cached_property
    def coefficients(self) -> np.ndarray:
        """``(degree + 1, width)`` per-tap polynomials, highest power first."""
        coef = horner_coefficients(self.width, self.beta)
        coef.flags.writeable = False
        return coef

    def device_source(self, interpolation: str = "nearest") -> str:
        """The template include that evaluates this source on the device (the names every
        kernel source defines: ``source_table.cl``'s header); only evaluated, so
        ``interpolation`` must be "nearest"."""
        if interpolation != "nearest":
            raise ValueError(f"the w-stacking kernel source is evaluated at exact offsets; it has no "
                             f"interpolation={interpolation!r}")
        return "source_stacked.cl"

    def template_parameters(self) -> dict:
        """``source_stacked.cl``'s template variables."""
        return {"es_width": self.width, "es_degree": self.coefficients.shape[0] - 1,
                "es_coef": self.coefficients.tolist(), "use_w": self.use_w}
