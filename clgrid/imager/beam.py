"""The restoring beam: an elliptical Gaussian fitted to the PSF's main lobe, as WSClean fits it.

The model is a Gaussian of peak 1 centred on the PSF's centre pixel (column ``nx // 2``,
row ``ny // 2``: the phase centre),

    g(x, y) = exp(-x^2 / (2 sx^2) + beta x y / (sx sy) - y^2 / (2 sy^2)),

fitted by least squares (x, y in pixels) to a box of the PSF around its centre.  The box
is ``10 x`` the initial estimate of the beam wide (at least 10 pixels, even), the
estimate being the theoretical resolution ``1 / (longest baseline in wavelengths)``; when
the fitted major axis comes out wider than 0.8 of a tenth of the box, the box is widened
to ``10 x`` that and the fit made again (at most 5 times).  The result, as FITS wants
it: FWHM of the major and minor axes and the position angle of the major axis, east of
north (the image has east to the left: columns run towards decreasing right ascension).

WSClean (3.1, and schaapcommon's fitter it uses, as of 2024) computes the pixel offsets
from the box's centre as unsigned integers, so every pixel left of or below the centre is
placed ~1e19 pixels away, where the model is 0: its fit uses only the quadrant x >= 0,
y >= 0 of the box.  The PSF is point-symmetric, so that quadrant and its mirror carry the
fit; the other two, which tell a tilted beam's orientation best, are left out.
`fit_beam` fits the same quadrant by default, and so writes WSClean's BMAJ, BMIN and BPA
(tests/test_imager.py: to 1e-6 on WSClean's own PSF); ``whole_box=True`` fits every pixel
of the box (a smaller residual; the beam differs by a few per cent on an elongated PSF).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Beam", "fit_beam"]

_SIGMA_TO_FWHM = 2.0 * math.sqrt(2.0 * math.log(2.0))
_BOX_SCALE = 10.0


class Beam(tuple):
    """(major, minor, position angle): FWHMs in radians, angle in degrees east of north in
    (-90, 90]."""

    __slots__ = ()

    def __new__(cls, major, minor, angle):
        return super().__new__(cls, (float(major), float(minor), float(angle)))

    major = property(lambda self: self[0])
    minor = property(lambda self: self[1])
    angle = property(lambda self: self[2])


def _fit_box(psf, box_x: int, box_y: int, estimate: float, quadrant: bool):
    """(sx, sy, beta) in pixels of the Gaussian fitted to the centred box (its quadrant
    x >= 0, y >= 0 only with ``quadrant``), by Levenberg-Marquardt from a circular beam of
    the estimated size."""
    ny, nx = psf.shape
    x0, y0 = (nx - box_x) // 2, (ny - box_y) // 2
    patch = np.asarray(psf[y0:y0 + box_y, x0:x0 + box_x], np.float64)
    y, x = np.mgrid[0:box_y, 0:box_x]
    x = (x - box_x // 2).ravel().astype(np.float64)
    y = (y - box_y // 2).ravel().astype(np.float64)
    target = patch.ravel()
    if quadrant:
        used = (x >= 0) & (y >= 0)
        x, y, target = x[used], y[used], target[used]
    xx, yy, xy = x * x, y * y, x * y

    def model(p):
        sx, sy, beta = p
        return np.exp(-xx / (2 * sx * sx) + beta * xy / (sx * sy) - yy / (2 * sy * sy))

    def jacobian(p, g):
        sx, sy, beta = p
        return np.column_stack([(xx / sx ** 3 - beta * xy / (sx * sx * sy)) * g,
                                (yy / sy ** 3 - beta * xy / (sy * sy * sx)) * g,
                                xy / (sx * sy) * g])

    start = max(estimate, 1e-3) / _SIGMA_TO_FWHM
    p = np.array([start, start, 0.0])
    g = model(p)
    r = g - target
    cost, damping = float(r @ r), 1e-3
    for _ in range(500):
        jac = jacobian(p, g)
        normal = jac.T @ jac
        gradient = jac.T @ r
        try:
            step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-30), -gradient)
        except np.linalg.LinAlgError:
            damping *= 10
            continue
        trial = p + step
        if trial[0] <= 0 or trial[1] <= 0 or abs(trial[2]) >= 1:
            damping *= 10
        else:
            g_trial = model(trial)
            r_trial = g_trial - target
            cost_trial = float(r_trial @ r_trial)
            if cost_trial <= cost:
                done = np.all(np.abs(step) <= 1e-10 * (np.abs(p) + 1e-10))
                p, g, r, cost = trial, g_trial, r_trial, cost_trial
                damping = max(damping / 10, 1e-15)
                if done:
                    break
            else:
                damping *= 10
        if damping > 1e15:
            break
    return p


def _ellipse(sx, sy, beta):
    """FWHM major, minor (pixels) and position angle (degrees east of north) of the fit."""
    scale = 1.0 - beta * beta
    cov = np.array([[sx * sx, beta * sx * sy], [beta * sx * sy, sy * sy]]) / scale
    values, vectors = np.linalg.eigh(cov)
    if not np.all(np.isfinite(values)):
        return abs(sx) * _SIGMA_TO_FWHM, abs(sx) * _SIGMA_TO_FWHM, 0.0
    major, minor = (math.sqrt(abs(v)) * _SIGMA_TO_FWHM for v in values[::-1])
    vx, vy = vectors[:, 1]                     # the major axis, in (column, row) pixels
    # north is +row, east is -column: the angle from north towards east
    angle = math.degrees(math.atan2(-vx, vy))
    angle = (angle + 90.0) % 180.0 - 90.0
    if angle == -90.0:
        angle = 90.0
    return major, minor, angle


def fit_beam(psf, pixsize_x: float, pixsize_y: float, estimate: float, whole_box: bool = False) -> Beam:
    """Fit the beam to ``psf`` (ny, nx): rows towards north, columns towards east-to-west
    as FITS stores them, peak 1 at the centre pixel.  ``pixsize_x, pixsize_y`` and
    ``estimate`` (the theoretical beam) in radians.  ``whole_box``: fit every pixel of the
    box rather than WSClean's quadrant (module docstring)."""
    psf = np.asarray(psf)
    ny, nx = psf.shape
    scale = 0.5 * (pixsize_x + pixsize_y)
    estimate_px = max(estimate, min(pixsize_x, pixsize_y)) / scale
    size = max(math.ceil(_BOX_SCALE), math.ceil(estimate_px * _BOX_SCALE))
    size += size % 2
    if size >= nx and size >= ny:
        major, minor, angle = _ellipse(*_fit_box(psf, nx, ny, estimate_px, not whole_box))
    else:
        for _ in range(5):
            box_x, box_y = min(size, nx), min(size, ny)
            major, minor, angle = _ellipse(*_fit_box(psf, box_x, box_y, estimate_px, not whole_box))
            large_enough = ((major * _BOX_SCALE * 0.8 < box_x or box_x >= nx)
                            and (major * _BOX_SCALE * 0.8 < box_y or box_y >= ny))
            if large_enough:
                break
            size = max(math.ceil(_BOX_SCALE), math.ceil(major * _BOX_SCALE))
            size += size % 2
            estimate_px = max(major, estimate_px)
    return Beam(major * scale, minor * scale, angle)
