"""Sign conventions checked from first principles, not through pyuvdata's phase().

A point source is simulated here from antenna positions and a source direction (astropy
gives both directions in the Earth-fixed frame at each time), with the convention
pyuvdata documents (docs/conventions.rst): ``V_12 = <X_1^* X_2>`` and
``uvw = xyz(ant2) - xyz(ant1)`` projected on (east, north, phase centre).  With the
correlator's spectrum ``X(nu) = int x(t) exp(-2 pi i nu t) dt``, an antenna at ``x`` sees
a plane wave from ``s`` ``x . s / c`` early, so ``X_i = X exp(+2 pi i x_i . s / lambda)``
and, after the phase centre's delay is taken out,

    V = S exp(+2 pi i (b . (s - s0)) / lambda) = S exp(+2 pi i (u l + v m + w (n - 1))).

pyuvdata's own phase() multiplies by exp(-2 pi i dw / lambda) when it moves the phase
centre, the same convention, and its uvw agree with the ones computed here (checked
below), so files it writes hold this.  The files are written with pyuvdata (UVH5 and
UVFITS, which stores the conjugate with negated uvw), read with clgrid.io, imaged with
w-gridding on; the source must land on its pixel with its flux.
"""

import warnings

import os

import numpy as np
import pytest

import clgrid

# PoCL on CI; CLGRID_TEST_DEVICE=nvidia runs the same tests on a GPU (benchmarks/gpu.sh)
DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")

pyuvdata = pytest.importorskip("pyuvdata", reason="writing measurement files needs the io extra")
astropy_coords = pytest.importorskip("astropy.coordinates")

C = 299792458.0


def _unit_itrs(ra, dec, times):
    """Direction (unit vector, Earth-fixed ITRS) of an ICRS position at each time, (ntime, 3)."""
    from astropy import units
    from astropy.coordinates import ITRS, SkyCoord
    from astropy.time import Time

    sky = SkyCoord(ra=ra * units.rad, dec=dec * units.rad, frame="icrs")
    itrs = sky.transform_to(ITRS(obstime=Time(times, format="jd")))
    xyz = np.column_stack([itrs.cartesian.x.value, itrs.cartesian.y.value, itrs.cartesian.z.value])
    return xyz / np.linalg.norm(xyz, axis=1, keepdims=True)


def _basis(s0, s_north):
    """(east, north) unit vectors of the tangent plane at each direction s0 (ntime, 3), north
    towards ``s_north``, a point just north of s0 in the catalogue (ICRS) frame: pyuvdata, like
    CASA, orients uvw on the catalogue frame's north, not the Earth's pole of the date."""
    north = s_north - s0 * np.einsum("ij,ij->i", s_north, s0)[:, None]
    north /= np.linalg.norm(north, axis=1, keepdims=True)
    return np.cross(north, s0), north


def simulate_point_source(rng, offset_east_deg, offset_north_deg, nant=16, ntime=4):
    """A pyuvdata UVData of a 1 Jy point source, every number computed here.

    Returns the object, the source's (l, m) from the phase centre (mean over the times;
    they change by well under a pixel), its ICRS (ra, dec) and the phase centre's.
    """
    from astropy import units
    from astropy.coordinates import EarthLocation
    from astropy.time import Time
    from pyuvdata import Telescope, UVData
    from pyuvdata.utils import ECEF_from_ENU

    site = EarthLocation.from_geodetic(116.67 * units.deg, -26.7 * units.deg, 377 * units.m)
    enu = np.column_stack([rng.uniform(-700, 700, (nant, 2)), rng.uniform(-2, 2, nant)])
    xyz = ECEF_from_ENU(enu, latitude=site.lat.rad, longitude=site.lon.rad, altitude=site.height.to_value("m"))
    centre = np.array([site.x.to_value("m"), site.y.to_value("m"), site.z.to_value("m")])
    times = 2460000.3 + np.arange(ntime) * 300 / 86400
    lst = Time(times[0], format="jd").sidereal_time("apparent", longitude=site.lon).rad
    ra_c, dec_c = lst + rng.uniform(-0.1, 0.1), site.lat.rad + rng.uniform(-0.1, 0.1)
    dec_s = dec_c + np.radians(offset_north_deg)
    ra_s = ra_c + np.radians(offset_east_deg) / np.cos(dec_s)
    freqs = np.array([150e6, 170e6])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        telescope = Telescope.new(name="toy", location=site, instrument="toy", mount_type="fixed",
                                  antenna_positions={i: p - centre for i, p in enumerate(xyz)},
                                  feed_array=[["x", "y"]] * nant, feed_angle=[[np.pi / 2, 0]] * nant)
        uvd = UVData.new(freq_array=freqs, polarization_array=["xx"], telescope=telescope, times=times,
                         do_blt_outer=True, empty=True)
        # phase() only sets the phase-centre metadata here: the data are zeros, and uvw
        # and data are replaced by the ones computed below.
        uvd.phase(ra=ra_c, dec=dec_c, cat_name="field")
    pyuvdata_uvw = uvd.uvw_array.copy()
    itime = np.searchsorted(times, uvd.time_array - 1e-9)
    s0, s = _unit_itrs(ra_c, dec_c, times), _unit_itrs(ra_s, dec_s, times)
    east, north = _basis(s0, _unit_itrs(ra_c, dec_c + 1e-5, times))
    b = xyz[uvd.ant_2_array] - xyz[uvd.ant_1_array]                  # ant2 - ant1, Earth-fixed
    uvw = np.column_stack([np.einsum("ij,ij->i", b, basis[itime]) for basis in (east, north, s0)])
    delay = np.einsum("ij,ij->i", b, (s - s0)[itime])                   # b . (s - s0), metres
    uvd.uvw_array = uvw
    uvd.data_array = np.exp(2j * np.pi * delay[:, None, None] * freqs[None, :, None] / C)
    l0 = float(np.mean(np.einsum("ij,ij->i", s, east)))
    m0 = float(np.mean(np.einsum("ij,ij->i", s, north)))
    return uvd, pyuvdata_uvw, (l0, m0), (ra_s, dec_s), (ra_c, dec_c)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    rng = np.random.default_rng()
    east, north = rng.uniform(4, 8) * rng.choice([-1, 1]), rng.uniform(4, 8) * rng.choice([-1, 1])
    uvd, pyuvdata_uvw, lm, source, centre = simulate_point_source(rng, east, north)
    folder = tmp_path_factory.mktemp("conventions")
    paths = {"uvh5": folder / "point.uvh5", "uvfits": folder / "point.uvfits"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uvd.write_uvh5(str(paths["uvh5"]))
        uvd.write_uvfits(str(paths["uvfits"]))
    return dict(uvd=uvd, pyuvdata_uvw=pyuvdata_uvw, lm=lm, source=source, centre=centre, paths=paths,
                offset=(east, north))


def test_uvw_computed_here_are_pyuvdatas(simulated):
    """ant2 - ant1 on (east, north, centre): pyuvdata's uvw to a few cm (measured 6 mm) (it uses apparent,
    topocentric coordinates; the difference is aberration), never the negated ones."""
    mine, theirs = simulated["uvd"].uvw_array, simulated["pyuvdata_uvw"]
    assert np.abs(theirs).max() > 300                                  # a real test: long baselines
    assert np.abs(mine - theirs).max() < 0.05, np.abs(mine - theirs).max()
    assert np.abs(mine + theirs).max() > 300


def test_pyuvdata_phase_uses_the_same_sign(simulated):
    """Rephasing the simulated data with pyuvdata to the source's own position makes every
    visibility 1: pyuvdata's phase() and the simulation share a sign (not a proof, a check)."""
    uvd = simulated["uvd"].copy()
    ra_s, dec_s = simulated["source"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        uvd.phase(ra=ra_s, dec=dec_s, cat_name="source")
    cross = uvd.ant_1_array != uvd.ant_2_array
    # to within the few cm of uvw difference above, at 2 m wavelength: a phase error of ~0.1 rad
    assert np.abs(np.angle(uvd.data_array[cross])).max() < 0.3
    assert np.abs(np.angle(simulated["uvd"].data_array[cross])).max() > 3   # it was not already 1


@pytest.mark.parametrize("kind", ["uvh5", "uvfits"])
def test_point_source_from_antenna_positions_lands_on_its_pixel(simulated, kind):
    from clgrid.io import read_measurement

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = read_measurement(simulated["paths"][kind], by_baseline=False)
    l0, m0 = simulated["lm"]
    wgt = ((m.antenna1 != m.antenna2)[:, None] & ~m.flags[..., 0]).astype(np.float64)
    px = np.radians(0.004)
    common = dict(uvw=m.uvw, freq=m.freqs, vis=m.vis[..., 0], wgt=wgt, npix_x=48, npix_y=48, pixsize_x=px,
                  pixsize_y=px, center_x=l0, center_y=m0, epsilon=1e-6, do_wgridding=True,
                  divide_by_n=False, device=DEVICE)
    image = clgrid.vis2dirty(**common)
    peak = np.unravel_index(np.argmax(image), image.shape)
    assert abs(peak[0] - 24) <= 1 and abs(peak[1] - 24) <= 1, (peak, simulated["offset"])
    assert image.max() / wgt.sum() == pytest.approx(1.0, abs=0.01)
    # w with the other sign defocuses it by several per cent at these offsets
    assert clgrid.vis2dirty(**dict(common, flip_w=True)).max() < 0.97 * image.max()
    # and the files' u, v as they are (before clgrid.io's reversal) put the source elsewhere
    mirrored = clgrid.vis2dirty(**dict(common, uvw=m.uvw * np.array([-1.0, -1.0, 1.0])))
    assert mirrored.max() < 0.5 * image.max()


def test_w_projection_focuses_what_vis2dirty_focuses(rng):
    """One point source off centre with large w: its visibilities in vis2dirty's convention
    must peak higher in the W-projection image than the same with w reversed."""
    from clgrid import imaging, reference

    npix, cell = 64, 4e-3
    l0, m0 = 20 * cell, -14 * cell
    n0 = np.sqrt(1 - l0 ** 2 - m0 ** 2)
    u, v = rng.uniform(-0.4 / cell, 0.4 / cell, (2, 600))
    w = rng.uniform(-150, 150, 600)
    kernels = clgrid.KernelStack.w_projection(grid_size=npix, cell_size=cell, w_max=150.0, num_planes=32)

    def peak(w_sign):
        vis = np.exp(-2j * np.pi * (u * l0 + v * m0 - w_sign * w * (n0 - 1)))[:, None]
        grid = reference.grid(np.column_stack([u, v, w]), vis, grid_size=npix, cell_size=cell, kernels=kernels)
        image = imaging.dirty_image(grid, kernels, 1.0)[0]
        return image[npix // 2 + int(round(m0 / cell)), npix // 2 + int(round(l0 / cell))]

    assert peak(+1.0) > peak(-1.0)
