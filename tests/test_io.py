"""Reading a real measurement file (UVFITS written by pyuvdata) and gridding it."""

import warnings

import numpy as np
import pytest

import clgrid
from clgrid.io import read_measurement

from conftest import optional, relative_error


@pytest.fixture
def uvfits(tmp_path, rng):
    optional("pyuvdata", "io")
    from astropy import units
    from astropy.coordinates import EarthLocation
    from pyuvdata import Telescope, UVData

    n = 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        telescope = Telescope.new(
            location=EarthLocation.from_geodetic(21.44 * units.deg, -30.7 * units.deg, 1050 * units.m),
            name="test", antenna_positions=rng.normal(size=(n, 3)) * 300,
            antenna_names=[f"a{i}" for i in range(n)], antenna_numbers=np.arange(n), instrument="test",
            feed_array=[["x", "y"]] * n, feed_angle=[[np.pi / 2, 0]] * n, mount_type="fixed")
        uvd = UVData.new(freq_array=np.array([1.40e9, 1.41e9, 1.42e9]), polarization_array=np.array([-5, -6]),
                         telescope=telescope, times=2460000.0 + np.arange(4) / 1440,
                         antpairs=[(0, 1), (0, 2), (1, 3), (2, 4)], do_blt_outer=True,
                         time_axis_faster_than_bls=False, empty=True)
        uvd.data_array = rng.normal(size=uvd.data_array.shape) + 1j * rng.normal(size=uvd.data_array.shape)
        uvd.flag_array[::5] = True
        path = tmp_path / "small.uvfits"
        uvd.write_uvfits(str(path), force_phase=True)
        written = UVData.from_file(str(path))
    return path, written


def test_read_orders_by_baseline_and_grids(uvfits, queue):
    path, written = uvfits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = read_measurement(path)
    assert m.uvw.shape == (4, 4, 3) and m.vis.shape == (4, 4, 3, 2) and m.polarizations == (-5, -6)
    np.testing.assert_array_equal(m.freqs, written.freq_array.reshape(-1))
    # every (baseline, time) row of the file is there, baseline-major, times increasing
    assert np.all(np.diff(m.times, axis=1) > 0)
    for b in range(4):
        assert len(set(zip(m.antenna1[b], m.antenna2[b]))) == 1
    rows = {(a, t): i for i, (a, t) in enumerate(zip(zip(written.ant_1_array, written.ant_2_array),
                                                      written.time_array))}
    i = rows[((m.antenna1[2, 1], m.antenna2[2, 1]), m.times[2, 1])]
    np.testing.assert_array_equal(m.vis[2, 1], written.data_array[i].reshape(3, 2))
    np.testing.assert_array_equal(m.uvw[2, 1], written.uvw_array[i] * [-1, -1, 1])  # clgrid's sign (io.py)
    assert m.flags.any() and not m.flags.all()

    n = 256
    uv_max = np.abs(m.uvw[..., :2]).max() * m.freqs.max() / clgrid.planning.host.SPEED_OF_LIGHT
    cell = 0.8 * (n // 2 - 10) / uv_max / n
    w_max = np.abs(m.uvw[..., 2]).max() * m.freqs.max() / clgrid.planning.host.SPEED_OF_LIGHT + 1
    stack = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=w_max, num_planes=4,
                                            oversample=8, max_support=8)
    args = dict(weights=m.weights, flags=m.flags, freqs=m.freqs)
    ref = clgrid.reference.grid(m.uvw, m.vis, n, cell, stack, **args)
    got = clgrid.Gridder(n, cell, stack, device=queue).grid(m.uvw, m.vis, **args)
    assert relative_error(got, ref) <= 1e-5
