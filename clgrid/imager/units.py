"""Angles as WSClean reads and prints them: ``20asec``, ``1.5amin``, ``0.01deg``, ``2e-5rad``.

A number, optional spaces, then a unit: ``deg``/``degrees``, ``amin``/``arcmin``/``'``,
``asec``/``arcsec``/``''``, ``mas``/``masec``/``marcsec``, ``rad``/``radians`` (any case);
without a unit the caller's default unit (degrees for ``--scale``, as WSClean).
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_angle", "format_angle"]

_UNITS = {
    "deg": math.pi / 180, "degrees": math.pi / 180,
    "amin": math.pi / 180 / 60, "arcmin": math.pi / 180 / 60, "'": math.pi / 180 / 60,
    "asec": math.pi / 180 / 3600, "arcsec": math.pi / 180 / 3600, "''": math.pi / 180 / 3600,
    "mas": math.pi / 180 / 3.6e6, "masec": math.pi / 180 / 3.6e6, "marcsec": math.pi / 180 / 3.6e6,
    "rad": 1.0, "radians": 1.0,
}
_NUMBER = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def parse_angle(text, what: str = "angle", default_unit: str = "deg") -> float:
    """``text`` in radians; ValueError naming ``what`` if it is not a finite number with one
    of the units above."""
    match = _NUMBER.fullmatch(str(text))
    unit = match.group(2).lower() if match else None
    if not match or (unit and unit not in _UNITS):
        raise ValueError(f"{what}: cannot read {text!r} as an angle (a number and a unit among "
                         f"deg, amin, asec, mas, rad; no unit: {default_unit})")
    value = float(match.group(1)) * _UNITS[unit or default_unit]
    if not math.isfinite(value):
        raise ValueError(f"{what}: {text!r} is not finite")
    return value


def format_angle(radians: float) -> str:
    """A short human form: degrees from 2 deg, arcmin from 2', else arcsec (or mas)."""
    degrees = math.degrees(abs(radians))
    sign = "-" if radians < 0 else ""
    if degrees >= 2:
        return f"{sign}{degrees:.4g} deg"
    if degrees * 60 >= 2:
        return f"{sign}{degrees * 60:.4g}'"
    if degrees * 3600 >= 1:
        return f"{sign}{degrees * 3600:.4g}''"
    return f"{sign}{degrees * 3.6e6:.4g} mas"
