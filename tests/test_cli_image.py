"""`clgrid image`: a Measurement Set written by pyuvdata in, a FITS image with a WCS out, the
source where the sky has it.  (`clgrid image` reads Measurement Sets with python-casacore
since issue 27; this file's simulation, made with pyuvdata and astropy from antenna
positions, is written as an MS by pyuvdata, a second writer beside clgrid.imager.simulate.)"""

import warnings

import os

import numpy as np
import pytest

from clgrid.tools import cli

# PoCL on CI; CLGRID_TEST_DEVICE=nvidia runs the same tests on a GPU (benchmarks/gpu.sh)
DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")

from conftest import optional

optional("pyuvdata", "io")
optional("casacore.tables", "ms")
fits = optional("astropy.io.fits", "ms")


@pytest.fixture(scope="module")
def point_file(tmp_path_factory):
    from test_conventions import simulate_point_source

    rng = np.random.default_rng()
    east, north = rng.uniform(2, 4) * rng.choice([-1, 1]), rng.uniform(2, 4) * rng.choice([-1, 1])
    uvd, _, lm, source, centre = simulate_point_source(rng, east, north, nant=12, ntime=3)
    uvd.telescope.antenna_diameters = np.full(uvd.telescope.Nants, 12.0)
    path = tmp_path_factory.mktemp("cli") / "point.ms"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uvd.write_ms(str(path))
    return path, source, centre


@pytest.mark.filterwarnings("ignore:'datfix' made the change")
def test_image_writes_a_fits_with_the_source_at_its_sky_position(point_file, tmp_path, capsys):
    from astropy import units
    from astropy.coordinates import SkyCoord
    from astropy.wcs import WCS

    path, (ra_s, dec_s), (ra_c, dec_c) = point_file
    out = tmp_path / "image-dirty.fits"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the simulation has XX only: Stokes I cannot be formed (WSClean refuses it too)
        assert cli.main(["image", str(path), "-o", str(tmp_path / "image"), "--pol", "XX", "--epsilon", "1e-5",
                         "--device", DEVICE]) == 0
    printed = capsys.readouterr().out
    assert "primary beam" in printed and "finest fringe" in printed     # the defaults, said
    with fits.open(out) as hdul:
        data, header = hdul[0].data, hdul[0].header
    wcs = WCS(header).celestial
    data = data[0, 0]
    assert header["CDELT1"] < 0 < header["CDELT2"]
    # the defaults: 12 m dishes at 150 MHz, field 2 x 1.2 lambda / D = 23 deg, 3 pixels a fringe
    assert 20 < data.shape[1] * abs(header["CDELT1"]) < 26
    iy, ix = np.unravel_index(np.argmax(data), data.shape)
    peak = wcs.pixel_to_world(ix, iy)
    true = SkyCoord(ra=ra_s * units.rad, dec=dec_s * units.rad, frame="icrs")
    pixel = abs(header["CDELT2"]) * units.deg
    assert peak.separation(true) < 1.5 * pixel, (peak, true, pixel)
    # Jy/beam: the source's flux 1, less what sampling 3 pixels a fringe costs a peak up to
    # half a pixel off the source along each axis (0.96 typical, 0.83 seen at the worst
    # offsets); the two hands' mean, not their sum; the image is not divided by n
    # (WSClean's convention, not ducc0's), so no pixel exceeds 1
    assert 0.75 < data.max() <= 1.0 + 1e-5
    # the phase centre is at CRPIX and the image is not mirrored: the source is on the
    # side of the centre it is on the sky
    centre = SkyCoord(ra=ra_c * units.rad, dec=dec_c * units.rad, frame=wcs.wcs.radesys.lower() or "icrs")
    assert wcs.world_to_pixel(centre)[0] == pytest.approx(header["CRPIX1"] - 1, abs=1e-6)
    assert np.sign(ix - (header["CRPIX1"] - 1)) == -np.sign(np.sin(ra_s - ra_c))   # east is left


def test_image_refuses_a_bad_size_by_name(point_file, tmp_path, capsys):
    path = point_file[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(["image", str(path), "-o", str(tmp_path / "x"), "--size", "33", "33", "--quiet"])
    assert code == 2 and "--size" in capsys.readouterr().err
