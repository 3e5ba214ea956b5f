"""FITS images as WSClean writes them: four axes (RA, DEC, FREQ, STOKES), the phase centre at
pixel ``(nx / 2 + 1, ny / 2 + 1)``, the beam, the observation's date, telescope and field.

The data are ``[stokes, freq, row, column]`` with columns towards decreasing right
ascension (``CDELT1 < 0``: east to the left, as images are shown) and rows towards
increasing declination; column ``nx // 2`` and row ``ny // 2`` (0-based) hold the phase
centre, so ``CRPIX1 = nx // 2 + 1`` and ``CRPIX2 = ny // 2 + 1``, as WSClean and CASA
write them.  The frequency axis has one pixel at the centre of the imaged band, as wide as
the band.  Besides the standard keywords, the ones of WSClean's that say how the image was
made are written with WSClean's meanings (``WSCDATAC`` data column, ``WSCWEIGH``
weighting, ``WSCIMGWG`` sum of the weights the image is normalised by, ``WSCNVIS``
visibilities gridded, ``WSCVWSUM`` their visibility weights' sum), so tools that combine
WSClean's images (``WSCIMGWG``) can combine these.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

__all__ = ["ImageDescription", "FITS_STOKES", "header", "write_image"]

#: FITS STOKES axis values (Greisen & Calabretta 2002)
FITS_STOKES = {"I": 1, "Q": 2, "U": 3, "V": 4, "RR": -1, "LL": -2, "RL": -3, "LR": -4,
               "XX": -5, "YY": -6, "XY": -7, "YX": -8}


@dataclass
class ImageDescription:
    """What a header says about one image."""

    npix_x: int
    npix_y: int
    pixsize_x: float            # radians
    pixsize_y: float
    ra: float                   # phase centre, radians
    dec: float
    frame: str                  # the MS's direction reference (J2000, ICRS, ...)
    band: tuple                 # (lowest, highest) frequency edge of the band, Hz
    polarization: str
    date_obs: float | None      # MJD seconds
    telescope: str = ""
    observer: str = ""
    field_name: str = ""
    beam: tuple | None = None   # (major, minor radians, angle degrees); None: not fitted (0)
    data_column: str = ""
    weighting: str = ""
    image_weight: float = 0.0
    visibilities: int = 0
    visibility_weight_sum: float = 0.0
    history: tuple = ()


def _date(mjd_seconds: float) -> str:
    """An MS TIME (MJD seconds) as FITS's DATE-OBS, to a tenth of a second, with WSClean's
    arithmetic (its FITS writer's): the day from the Julian date, the tenths of a second
    cut (not rounded) from the MJD in days, then seconds, minutes and hours each rounded
    from what is left; so a whole second whose MJD in days falls a hair below it reads as
    WSClean writes it (TIME 5147713200 s: ``00:19:59.9``, not ``00:20:00.0``)."""
    mjd = mjd_seconds * (1.0 / 86400.0)       # days as WSClean gets them (casacore's unit conversion)
    tenths = int(math.fmod(mjd * 864000.0, 10.0))
    rest = mjd - tenths / 864000.0
    seconds = int(math.fmod(round(rest * 86400.0), 60.0))
    rest -= seconds / 86400.0
    minutes = int(math.fmod(round(rest * 1440.0), 60.0))
    rest -= minutes / 1440.0
    hours = int(math.fmod(round(rest * 24.0), 24.0))
    # the Gregorian date of the Julian date, in the integer steps WSClean takes
    z = int(mjd + 2400000.5 + 0.5)
    w = int((z - 1867216.25) / 36524.25)
    a = z + 1 + w - w // 4
    b = a + 1524
    c = int((b - 122.1) / 365.25)
    d = int(365.25 * c)
    e = int((b - d) / 30.6001)
    day = b - d - int(30.6001 * e)
    month = e - 1
    while month > 12:
        month -= 12
    year = c - 4715 - (1 if month > 2 else 0)
    return f"{year:04d}-{month:02d}-{day:02d}T{hours:02d}:{minutes:02d}:{seconds:02d}.{tenths}"


def header(d: ImageDescription):
    """The astropy ``fits.Header`` of an image described by ``d``."""
    from astropy.io import fits

    h = fits.Header()
    h["BUNIT"] = ("JY/BEAM", "Units are in Jansky per beam")
    major, minor, angle = d.beam if d.beam is not None else (0.0, 0.0, 0.0)
    h["BMAJ"], h["BMIN"], h["BPA"] = math.degrees(major), math.degrees(minor), float(angle)
    frame = d.frame.upper()
    if frame in ("J2000", "FK5"):
        h["EQUINOX"] = (2000.0, "J2000")
        h["RADESYS"] = "FK5"
    elif frame == "ICRS":
        h["RADESYS"] = "ICRS"
    h["BTYPE"] = "Intensity"
    h["TELESCOP"] = d.telescope
    h["OBSERVER"] = d.observer
    h["OBJECT"] = d.field_name
    h["ORIGIN"] = ("clgrid", "clgrid image: imaging on OpenCL devices")
    h["CTYPE1"], h["CRPIX1"] = ("RA---SIN", "Right ascension angle cosine"), float(d.npix_x // 2 + 1)
    h["CRVAL1"], h["CDELT1"] = math.degrees(d.ra) % 360.0, -math.degrees(d.pixsize_x)
    h["CUNIT1"] = "deg"
    h["CTYPE2"], h["CRPIX2"] = ("DEC--SIN", "Declination angle cosine"), float(d.npix_y // 2 + 1)
    h["CRVAL2"], h["CDELT2"] = math.degrees(d.dec), math.degrees(d.pixsize_y)
    h["CUNIT2"] = "deg"
    low, high = d.band
    h["CTYPE3"], h["CRPIX3"] = ("FREQ", "Central frequency"), 1.0
    h["CRVAL3"], h["CDELT3"], h["CUNIT3"] = 0.5 * (low + high), high - low, "Hz"
    h["CTYPE4"], h["CRPIX4"] = "STOKES", 1.0
    h["CRVAL4"], h["CDELT4"], h["CUNIT4"] = float(FITS_STOKES[d.polarization]), 1.0, ""
    h["SPECSYS"] = "TOPOCENT"
    if d.date_obs is not None and math.isfinite(d.date_obs):
        h["DATE-OBS"] = _date(d.date_obs)
    h["WSCDATAC"] = d.data_column
    h["WSCWEIGH"] = d.weighting
    h["WSCIMGWG"] = float(d.image_weight)
    h["WSCNORMF"] = float(d.image_weight)
    h["WSCNVIS"] = int(d.visibilities)
    h["WSCVWSUM"] = float(d.visibility_weight_sum)
    for line in d.history:
        h["HISTORY"] = line
    return h


def write_image(path, image, description: ImageDescription, overwrite: bool = False) -> None:
    """Write ``image`` (ny, nx), already in FITS orientation (module docstring), as float32,
    through a temporary file in the same folder renamed into place: an interrupted write
    leaves no partial file.  FileExistsError if ``path`` exists and not ``overwrite``."""
    import tempfile

    from astropy.io import fits

    data = np.asarray(image, np.float32).reshape(1, 1, description.npix_y, description.npix_x)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists (--overwrite replaces it)")
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".clgrid-", suffix=".fits.part", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            fits.PrimaryHDU(data, header(description)).writeto(stream)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
