"""The analytic gridding kernel and how accurate it is: kernel, its Fourier transform, and
the choice of support, shape and padding for a requested ``epsilon``.

The kernel is the "exponential of semicircle" ``psi(x) = exp(beta * (sqrt(1 - x^2) - 1))``
on ``|x| <= 1`` (Barnett, Magland & af Klinteberg 2019, SIAM J. Sci. Comput. 41, C479),
stretched over ``support`` grid cells.  A grid padded by ``sigma`` (the oversampling
factor) leaves room for the kernel's Fourier transform to fall off before the image's
aliases begin; ``support``, ``beta`` and ``sigma`` together set the error.

`KERNEL_TABLE` holds, for each (support, sigma), the ``beta`` that gave the smallest error
and that error, *measured* by ``benchmarks/es_kernel_table.py`` against a direct Fourier
transform in one dimension (relative L2 of the whole 1-D image, random points and values).
Nothing here is copied from ducc0's or FINUFFT's tables.  The error of a d-dimensional
transform is close to sqrt(d) times the 1-D figure (errors add in quadrature over the
separable axes); `choose_kernel` keeps a margin above that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["es_kernel", "kernel_transform", "KernelChoice", "KERNEL_TABLE", "choose_kernel",
           "min_epsilon", "MAX_SUPPORT", "expected_error", "rms_amplification", "horner_coefficients",
           "float_taps_allowed"]

# (support, sigma, beta / support, measured 1-D relative L2 error); regenerate with
# `python benchmarks/es_kernel_table.py --write` (it prints this list).
KERNEL_TABLE = [
    (2, 1.2, 1.15, 0.11),
    (3, 1.2, 1.47, 0.029),
    (4, 1.2, 1.63, 0.0078),
    (5, 1.2, 1.71, 0.0022),
    (6, 1.2, 1.75, 0.00068),
    (7, 1.2, 1.78, 0.00021),
    (8, 1.2, 1.8, 7.1e-05),
    (9, 1.2, 1.81, 2.3e-05),
    (10, 1.2, 1.81, 5.3e-06),
    (11, 1.2, 1.75, 1.9e-06),
    (12, 1.2, 1.77, 5.6e-07),
    (13, 1.2, 1.78, 1.6e-07),
    (14, 1.2, 1.79, 4.4e-08),
    (15, 1.2, 1.8, 1.3e-08),
    (16, 1.2, 1.81, 3.8e-09),
    (2, 1.25, 1.26, 0.1),
    (3, 1.25, 1.56, 0.023),
    (4, 1.25, 1.72, 0.0059),
    (5, 1.25, 1.79, 0.0017),
    (6, 1.25, 1.82, 0.00048),
    (7, 1.25, 1.84, 0.00014),
    (8, 1.25, 1.85, 3.7e-05),
    (9, 1.25, 1.85, 7.2e-06),
    (10, 1.25, 1.85, 1.4e-06),
    (11, 1.25, 1.86, 4.5e-07),
    (12, 1.25, 1.86, 8.6e-08),
    (13, 1.25, 1.86, 2.2e-08),
    (14, 1.25, 1.87, 8.3e-09),
    (15, 1.25, 1.87, 1.6e-09),
    (16, 1.25, 1.87, 3.1e-10),
    (2, 1.4, 1.4, 0.07),
    (3, 1.4, 1.72, 0.013),
    (4, 1.4, 1.86, 0.0025),
    (5, 1.4, 1.91, 0.00046),
    (6, 1.4, 1.94, 8.4e-05),
    (7, 1.4, 1.96, 1.6e-05),
    (8, 1.4, 1.98, 3e-06),
    (9, 1.4, 1.89, 7.8e-07),
    (10, 1.4, 1.99, 1.3e-07),
    (11, 1.4, 2.0, 2.6e-08),
    (12, 1.4, 2.0, 5e-09),
    (13, 1.4, 2.0, 9.8e-10),
    (14, 1.4, 1.97, 1.8e-10),
    (15, 1.4, 2.01, 3.4e-11),
    (16, 1.4, 1.98, 6.2e-12),
    (2, 1.5, 1.47, 0.064),
    (3, 1.5, 1.79, 0.011),
    (4, 1.5, 1.93, 0.0017),
    (5, 1.5, 1.99, 0.00029),
    (6, 1.5, 2.02, 5.2e-05),
    (7, 1.5, 2.04, 9e-06),
    (8, 1.5, 2.05, 1.5e-06),
    (9, 1.5, 2.06, 2.6e-07),
    (10, 1.5, 2.0, 5.3e-08),
    (11, 1.5, 2.01, 8.4e-09),
    (12, 1.5, 2.07, 1.4e-09),
    (13, 1.5, 2.08, 2.4e-10),
    (14, 1.5, 2.04, 3.6e-11),
    (15, 1.5, 2.05, 5.7e-12),
    (16, 1.5, 2.06, 1.1e-12),
    (2, 1.75, 1.65, 0.046),
    (3, 1.75, 1.99, 0.0063),
    (4, 1.75, 2.11, 0.00086),
    (5, 1.75, 2.16, 0.00012),
    (6, 1.75, 2.19, 1.5e-05),
    (7, 1.75, 2.2, 2e-06),
    (8, 1.75, 2.21, 2.7e-07),
    (9, 1.75, 2.21, 3.5e-08),
    (10, 1.75, 2.22, 4.5e-09),
    (11, 1.75, 2.22, 6.4e-10),
    (12, 1.75, 2.23, 8.4e-11),
    (13, 1.75, 2.23, 1.1e-11),
    (14, 1.75, 2.2, 1.3e-12),
    (15, 1.75, 2.2, 2e-13),
    (16, 1.75, 2.21, 2.9e-14),
    (2, 2.0, 1.81, 0.039),
    (3, 2.0, 2.12, 0.0046),
    (4, 2.0, 2.22, 0.00054),
    (5, 2.0, 2.27, 6.1e-05),
    (6, 2.0, 2.3, 7.2e-06),
    (7, 2.0, 2.31, 8e-07),
    (8, 2.0, 2.32, 8.6e-08),
    (9, 2.0, 2.26, 1.2e-08),
    (10, 2.0, 2.33, 1.1e-09),
    (11, 2.0, 2.29, 1.3e-10),
    (12, 2.0, 2.34, 1.4e-11),
    (13, 2.0, 2.31, 1.5e-12),
    (14, 2.0, 2.31, 1.7e-13),
    (15, 2.0, 2.32, 2.1e-14),
    (16, 2.0, 2.32, 1.1e-14),
    (2, 2.5, 2.03, 0.033),
    (3, 2.5, 2.31, 0.0031),
    (4, 2.5, 2.4, 0.00028),
    (5, 2.5, 2.44, 2.7e-05),
    (6, 2.5, 2.46, 2.5e-06),
    (7, 2.5, 2.47, 2.2e-07),
    (8, 2.5, 2.48, 2e-08),
    (9, 2.5, 2.49, 1.8e-09),
    (10, 2.5, 2.49, 1.7e-10),
    (11, 2.5, 2.45, 1.5e-11),
    (12, 2.5, 2.46, 1.4e-12),
    (13, 2.5, 2.47, 1.2e-13),
    (14, 2.5, 2.5, 1.6e-14),
    (15, 2.5, 2.51, 1.2e-14),
    (16, 2.5, 2.41, 1.2e-14),
]

MAX_SUPPORT = 16
# The smallest epsilon each precision is asked for (ducc0's documented limits): single
# precision accumulates rounding near 1e-7 per addition, double near 1e-16.
_MIN_EPSILON = {"single": 1e-5, "double": 2e-13}
# Measured 2-D and 3-D errors sit at about sqrt(d) times the 1-D figure; the factor keeps
# the requested epsilon honoured with room for the data's own distribution.
_SAFETY = 2.0
# Relative rounding error of a gridded plane, with a margin over the measured one (float
# atomics, float kernel values: docs/benchmarks/imaging.md).
_ROUNDING = {"single": 1e-6, "double": 2e-15}
# Relative rounding of one kernel value kept in float (float32's unit roundoff).
_FLOAT_TAP_ROUNDING = 2.0 ** -24


def min_epsilon(precision: str) -> float:
    """The smallest epsilon ``precision`` ("single" or "double") is asked for."""
    if precision not in _MIN_EPSILON:
        raise ValueError(f"precision must be 'single' or 'double', got {precision!r}")
    return _MIN_EPSILON[precision]


def es_kernel(x, beta: float):
    """``exp(beta * (sqrt(1 - x^2) - 1))`` for ``|x| < 1``, else 0 (peak 1 at x = 0)."""
    x = np.asarray(x, np.float64)
    inside = np.abs(x) < 1.0
    out = np.zeros_like(x)
    out[inside] = np.exp(beta * (np.sqrt(1.0 - x[inside] ** 2) - 1.0))
    return out


@lru_cache(maxsize=64)
def _quadrature(n: int):
    # Substituting x = sin(theta) makes the integrand smooth at the ends, where sqrt(1-x^2)
    # has an infinite slope; Gauss-Legendre in theta then converges fast.
    t, w = np.polynomial.legendre.leggauss(n)
    theta = t * (np.pi / 2)
    return np.sin(theta), w * (np.pi / 2) * np.cos(theta)


def kernel_transform(s, support: int, beta: float, nodes: int | None = None):
    """``c(s) = sum over the kernel of psi((x) * 2 / support) * exp(2 pi i x s) dx``: the
    continuous Fourier transform of the kernel stretched over ``support`` cells, at ``s``
    cycles per cell.  The image of gridded data is divided by it (grid correction).
    """
    nodes = nodes or max(64, 4 * support + 40)
    x, w = _quadrature(nodes)
    s = np.asarray(s, np.float64)
    half = support / 2.0
    weights = w * es_kernel(x, beta)
    # psi is even, so the transform is real: integral of psi(y) cos(2 pi half y s) half dy.
    return half * (np.cos(2.0 * np.pi * half * np.multiply.outer(s, x)) @ weights)


@dataclass(frozen=True)
class KernelChoice:
    """Support (cells), shape ``beta`` and grid padding ``sigma``, with the 1-D error measured
    for them (the d-dimensional error is about sqrt(d) times it)."""

    support: int
    beta: float
    sigma: float
    error_1d: float


@lru_cache(maxsize=512)
def rms_amplification(support: int, beta: float, sigma: float) -> float:
    """How much the grid correction magnifies rounding on the grid, per axis: the RMS of
    c(0) / c(s) over the image, |s| <= 1 / (2 sigma) cycles per cell.  A kernel that falls
    far at the image's edge divides rounding there by a small number (single precision
    with w lost two orders of magnitude to it: docs/benchmarks/imaging.md)."""
    s = np.linspace(-0.5 / sigma, 0.5 / sigma, 101)
    c = kernel_transform(s, support, beta)
    return float(np.sqrt(np.mean((kernel_transform(0.0, support, beta) / c) ** 2)))


def expected_error(choice: KernelChoice, precision: str, ndim: int) -> float:
    """Kernel error (measured, sqrt(ndim) * 1-D, with a margin) plus rounding on the grid
    (relative, per precision) magnified by the grid correction on each axis."""
    amp = rms_amplification(choice.support, choice.beta, choice.sigma) ** ndim
    return _SAFETY * math.sqrt(ndim) * choice.error_1d + _ROUNDING[precision] * amp


def float_taps_allowed(choice: KernelChoice, precision: str, ndim: int, epsilon: float | None = None) -> bool:
    """Whether an operator of ``precision`` asked for ``epsilon`` may keep what it holds per
    point in float (4 bytes a real instead of 8: the CPUs' "rows" spread keeps 3 W kernel
    values, a value and a phase per point): always in single precision; in double where
    the kernel's expected error plus their rounding (float's unit roundoff, twice: the
    kernel values' and the value's with its phase, magnified by the grid correction on each
    axis as the grid's rounding is) is still within ``epsilon`` (None: not known, no).
    The arithmetic stays in ``precision``; only the storage is float."""
    if precision == "single":
        return True
    if epsilon is None:
        return False
    amp = rms_amplification(choice.support, choice.beta, choice.sigma) ** ndim
    return expected_error(choice, precision, ndim) + 2 * _FLOAT_TAP_ROUNDING * amp <= epsilon


def _table_rows():
    return [KernelChoice(int(w), float(b) * int(w), float(s), float(e)) for w, s, b, e in KERNEL_TABLE]


def choose_kernel(epsilon: float, precision: str, ndim: int, cost=None,
                  sigma_min: float = 1.1, sigma_max: float = 2.6) -> KernelChoice:
    """The cheapest table row whose error, sqrt(ndim) * error_1d * margin, is at most epsilon.

    ``cost(choice) -> float`` ranks the rows that qualify (the operator passes a model
    of spreading plus FFT work); without it the smallest support wins, then the
    smallest sigma.
    """
    if not np.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a positive number, got {epsilon!r}")
    floor = min_epsilon(precision)
    if epsilon < floor:
        raise ValueError(f"epsilon={epsilon:g} is below what {precision} precision allows "
                         f"({floor:g}); use complex128 visibilities or a larger epsilon")
    if not sigma_min <= sigma_max:
        raise ValueError(f"sigma_min={sigma_min} is larger than sigma_max={sigma_max}")
    rows = [r for r in _table_rows() if sigma_min <= r.sigma <= sigma_max]
    if not rows:
        raise ValueError(f"no oversampling factor in [sigma_min, sigma_max] = [{sigma_min}, "
                         f"{sigma_max}]; the table has {sorted({r.sigma for r in _table_rows()})}")
    good = [r for r in rows if expected_error(r, precision, ndim) <= epsilon]
    if not good:
        best = min(expected_error(r, precision, ndim) for r in rows)
        raise ValueError(f"epsilon={epsilon:g} is not reachable in {precision} precision with sigma in "
                         f"[{sigma_min}, {sigma_max}] (best: {best:.2g})")
    key = cost if cost is not None else (lambda r: (r.support, r.sigma))
    return min(good, key=key)


@lru_cache(maxsize=64)
def _horner(support: int, beta: float, degree: int) -> tuple:
    nodes = np.cos(np.pi * (np.arange(4 * degree + 40) + 0.5) / (4 * degree + 40))
    coef = np.zeros((degree + 1, support))
    for j in range(support):
        x = (nodes + 1.0 - support + 2.0 * j) / support      # tap j's (frac + j) * 2 / W
        cheb = np.polynomial.chebyshev.chebfit(nodes, es_kernel(x, beta), degree)
        mono = np.polynomial.chebyshev.cheb2poly(cheb)
        coef[degree + 1 - len(mono):, j] = mono[::-1]
    return tuple(map(tuple, coef))


def horner_coefficients(support: int, beta: float, degree: int | None = None) -> np.ndarray:
    """Piecewise polynomials of the kernel, one per tap, for evaluation by Horner's rule
    on the device instead of exp and sqrt (as FINUFFT does).

    Returns ``(degree + 1, support)``, highest power first: tap ``j`` of a point whose
    first tap sits ``frac`` cells from it (``frac`` in ``[-W/2, -W/2 + 1)``) has weight
    ``sum_d coef[d, j] z^(degree - d)`` with ``z = 2 frac + W - 1`` in ``[-1, 1)``.
    Fitted on Chebyshev nodes; the error, largest at the support's edge where the kernel
    has a square-root kink, is below ``exp(-beta)`` there, under the kernel's own error in
    the table (docs/benchmarks/kernels.md).
    """
    degree = support + 3 if degree is None else int(degree)
    return np.array(_horner(int(support), float(beta), degree))
