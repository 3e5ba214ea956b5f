"""Pixel size and image size chosen from the data when ``--scale`` or ``--size`` is not given.

As imagers choose them: pixels of 1/3 of the finest fringe (the longest projected
baseline at the highest frequency), and an image twice the primary beam's FWHM
(``1.2 lambda / D`` at the lowest frequency) across when the MS gives the dish diameter,
else 10 degrees, kept above the horizon (corners at most 57 degrees from the centre).
Each choice comes with a sentence saying what was chosen and why.
"""

from __future__ import annotations

import math

import numpy as np

from .units import format_angle

__all__ = ["image_defaults"]

SPEED_OF_LIGHT = 299792458.0


def longest_baseline(uvw, freqs, weights=None) -> float:
    """The longest projected baseline (u, v) in wavelengths at the highest frequency, over
    the rows with some non-zero weight (all rows without ``weights``)."""
    step = 1 << 20
    longest = 0.0
    for start in range(0, uvw.shape[0], step):
        rows = slice(start, start + step)
        length = np.hypot(uvw[rows, 0], uvw[rows, 1])
        if weights is not None:
            length = np.where(np.any(weights[rows] != 0, axis=1), length, 0.0)
        if length.size:
            longest = max(longest, float(length.max()))
    return longest * float(np.max(freqs)) / SPEED_OF_LIGHT


def image_defaults(uvw, freqs, diameter, scale=None, size=None, weights=None):
    """(pixel size in radians, (nx, ny), sentences): ``scale`` and ``size`` where given, else
    chosen as the module docstring says.  ``uvw``, ``freqs`` and ``weights`` may be lists,
    one entry per band of data (several spectral windows or MSs): the longest baseline and
    the lowest frequency are then the bands' together."""
    if not isinstance(uvw, (list, tuple)):
        uvw, freqs, weights = [uvw], [freqs], [weights]
    notes = []
    if scale is None:
        uv_max = max(longest_baseline(u, f, w) for u, f, w in zip(uvw, freqs, weights))
        if uv_max <= 0:
            raise ValueError("every baseline with data has zero length: give --scale")
        scale = 1.0 / (3.0 * uv_max)
        notes.append(f"pixel {format_angle(scale)}: 1/3 of the finest fringe (longest baseline "
                     f"{uv_max:.4g} wavelengths; --scale to choose)")
    else:
        notes.append(f"pixel {format_angle(scale)} (--scale)")
    if size is None:
        if diameter:
            fwhm = 1.2 * SPEED_OF_LIGHT / min(float(np.min(f)) for f in freqs) / diameter
            fov = 2.0 * fwhm
            notes.append(f"field {format_angle(fov)}: twice the primary beam's FWHM ({format_angle(fwhm)} "
                         f"for {diameter:g} m dishes at the lowest frequency; --size to choose)")
        else:
            fov = math.radians(10.0)
            notes.append("field 10 deg: the MS gives no dish diameter (--size to choose)")
        horizon = 2 * math.sin(math.radians(40.0))
        if fov > horizon:
            fov = horizon
            notes.append(f"field cut to {format_angle(fov)} to keep the corners above the horizon")
        n = max(16, int(math.ceil(fov / scale / 2)) * 2)
        size = (n, n)
        notes.append(f"image {n} x {n} pixels")
    else:
        notes.append(f"image {size[0]} x {size[1]} pixels (--size)")
    return float(scale), (int(size[0]), int(size[1])), notes
