"""Tests for clgrid.tools.datasets: shipped layouts, geodesy and uvw geometry."""

import math

import numpy as np
import pytest

from clgrid.tools import datasets as ds
from clgrid.tools.datasets import ArrayLayout

# name -> (station count, reference latitude in degrees, (min, max) longest baseline in km)
EXPECTED = {
    "ska_low": (512, -26.8247, (60.0, 70.0)),
    "lofar_hba": (62, 52.915, (100.0, 130.0)),
    "meerkat": (64, -30.7111, (7.0, 8.5)),
}


def two_station(b_enu, latitude):
    """ArrayLayout with station 0 at the origin and station 1 at b_enu."""
    return ArrayLayout(
        name="pair",
        station_names=("a", "b"),
        enu=np.array([[0.0, 0.0, 0.0], list(b_enu)]),
        latitude=latitude,
        source="hand-made test layout",
    )


# ---------------------------------------------------------------- layouts

def test_available_layouts_lists_shipped_files():
    names = ds.available_layouts()
    assert names == sorted(names)
    assert set(EXPECTED) <= set(names)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_layout_is_sane(name):
    nstation, lat_deg, (bmin_km, bmax_km) = EXPECTED[name]
    lay = ds.load_layout(name)
    assert lay.name == name
    assert lay.enu.shape == (nstation, 3)
    assert lay.enu.dtype == np.float64
    assert np.all(np.isfinite(lay.enu))
    assert len(lay.station_names) == nstation
    assert len(set(lay.station_names)) == nstation
    assert lay.num_stations == nstation
    assert lay.num_baselines == nstation * (nstation - 1) // 2
    assert math.degrees(lay.latitude) == pytest.approx(lat_deg, abs=1e-3)
    assert bmin_km * 1e3 < lay.max_baseline < bmax_km * 1e3
    # A real array sits close to the tangent plane: |up| is well below the extent.
    assert np.max(np.abs(lay.enu[:, 2])) < 0.01 * lay.max_baseline
    # Attribution travels with the data.
    assert "Licence:" in lay.source
    assert ("MIT" in lay.source) or ("Apache-2.0" in lay.source)
    # Immutable and cached.
    assert not lay.enu.flags.writeable
    with pytest.raises(ValueError):
        lay.enu[0, 0] = 1.0
    assert ds.load_layout(name) is lay


def test_ska_low_core_and_arms():
    lay = ds.load_layout("ska_low")
    radius = np.hypot(lay.enu[:, 0], lay.enu[:, 1])
    core = np.array([n.startswith("C") for n in lay.station_names])
    assert core.sum() == 224
    assert radius[core].max() < 1000.0  # compact core, about 1 km across
    # Orientation: the east arm reaches furthest east, the south arm furthest south.
    assert lay.station_names[int(np.argmax(lay.enu[:, 0]))].startswith("E")
    assert lay.station_names[int(np.argmin(lay.enu[:, 1]))].startswith("S")


def test_lofar_hba_stations():
    lay = ds.load_layout("lofar_hba")
    names = lay.station_names
    assert sum(n.startswith("CS") for n in names) == 48
    assert sum(n.startswith("RS") for n in names) == 14
    assert "CS002HBA0" in names and "RS509HBA" in names
    # Superterp sub-stations lie within a few hundred metres of the reference (CS002 LBA).
    i = names.index("CS002HBA0")
    assert np.hypot(*lay.enu[i, :2]) < 200.0
    # RS509 is the northernmost remote station.
    assert names[int(np.argmax(lay.enu[:, 1]))] == "RS509HBA"


def test_unknown_layout_names_the_valid_ones():
    with pytest.raises(ValueError) as err:
        ds.load_layout("no_such_array")
    message = str(err.value)
    assert "no_such_array" in message
    for name in ds.available_layouts():
        assert name in message


@pytest.mark.parametrize("bad", [None, 3, "", "../ska_low", "ska_low.csv"])
def test_load_layout_rejects_non_names(bad):
    with pytest.raises(ValueError):
        ds.load_layout(bad)


def test_layout_validation():
    with pytest.raises(ValueError):
        ArrayLayout("x", ("a", "b"), np.zeros((3, 3)), 0.0, "s")  # count mismatch
    with pytest.raises(ValueError):
        ArrayLayout("x", ("a", "a"), np.zeros((2, 3)), 0.0, "s")  # duplicate names
    with pytest.raises(ValueError):
        ArrayLayout("x", ("a", "b"), np.zeros((2, 2)), 0.0, "s")  # not (n, 3)
    with pytest.raises(ValueError):
        ArrayLayout("x", ("a", "b"), [[0, 0, 0], [np.nan, 0, 0]], 0.0, "s")
    with pytest.raises(ValueError):
        ArrayLayout("x", ("a", "b"), np.zeros((2, 3)), 2.0, "s")  # latitude > pi/2
    with pytest.raises(ValueError):
        ArrayLayout("x", ("a",), np.zeros((1, 3)), 0.0, "s")  # one station


def test_parse_layout_text_errors():
    good = (
        "# format: 1\n# name: t\n# frame: ecef\n# reference: 6378137, 0, 0\n"
        "# source: test\n# licence: none\nstation,x_m,y_m,z_m\n"
        "a,6378137,0,0\nb,6378137,100,0\n"
    )
    lay = ds.parse_layout_text(good)
    # On the equator at longitude 0, +Y in ECEF is due east.
    np.testing.assert_allclose(lay.enu[1], [100.0, 0.0, 0.0], atol=1e-6)
    assert lay.latitude == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="missing header keys"):
        ds.parse_layout_text(good.replace("# licence: none\n", ""))
    with pytest.raises(ValueError, match="column header"):
        ds.parse_layout_text(good.replace("station,x_m,y_m,z_m", "station,lon_deg,lat_deg,height_m"))
    with pytest.raises(ValueError, match="non-numeric"):
        ds.parse_layout_text(good.replace("b,6378137,100,0", "b,6378137,oops,0"))


# ---------------------------------------------------------------- geodesy

def test_geodetic_ecef_known_points_and_round_trip():
    np.testing.assert_allclose(ds.geodetic_to_ecef(0.0, 0.0, 0.0), [ds.WGS84_A, 0, 0])
    b = ds.WGS84_A * (1 - ds.WGS84_F)  # polar radius
    np.testing.assert_allclose(ds.geodetic_to_ecef(0.0, math.pi / 2, 0.0), [0, 0, b], atol=1e-6)

    rng = np.random.default_rng(1)
    lon = rng.uniform(-math.pi, math.pi, 200)
    lat = rng.uniform(-1.5, 1.5, 200)
    h = rng.uniform(-500.0, 5000.0, 200)
    lon2, lat2, h2 = ds.ecef_to_geodetic(ds.geodetic_to_ecef(lon, lat, h))
    np.testing.assert_allclose(lon2, lon, atol=1e-12)
    np.testing.assert_allclose(lat2, lat, atol=1e-12)
    np.testing.assert_allclose(h2, h, atol=1e-6)


def test_ecef_to_enu_axes():
    lon, lat, h = math.radians(6.87), math.radians(52.91), 50.0
    ref = ds.geodetic_to_ecef(lon, lat, h)
    up = ds.geodetic_to_ecef(lon, lat, h + 100.0)
    np.testing.assert_allclose(ds.ecef_to_enu(up, ref), [0, 0, 100.0], atol=1e-6)
    # A small step in latitude is (to first order) due north.
    north = ds.geodetic_to_ecef(lon, lat + 1e-6, h)
    enu = ds.ecef_to_enu(north, ref)
    assert enu[1] > 6.0 and abs(enu[0]) < 1e-6 and abs(enu[2]) < 1e-3


def test_enu_to_xyz_hand_values():
    lat = math.pi / 6
    np.testing.assert_allclose(ds.enu_to_xyz([1.0, 0, 0], lat), [0, 1, 0], atol=1e-15)
    np.testing.assert_allclose(ds.enu_to_xyz([0, 1.0, 0], lat), [-0.5, 0, math.sqrt(3) / 2])
    np.testing.assert_allclose(ds.enu_to_xyz([0, 0, 1.0], lat), [math.sqrt(3) / 2, 0, 0.5])


# ---------------------------------------------------------------- baselines

def test_baseline_order():
    a1, a2 = ds.baselines(4)
    np.testing.assert_array_equal(a1, [0, 0, 0, 1, 1, 2])
    np.testing.assert_array_equal(a2, [1, 2, 3, 2, 3, 3])
    assert a1.dtype == np.int64 and a2.dtype == np.int64
    lay = ds.load_layout("lofar_hba")
    a1, a2 = ds.baselines(lay)
    assert a1.size == lay.num_baselines == 1891
    assert np.all(a1 < a2)
    assert np.all(np.diff(a1) >= 0)  # ant1 slowest


# ---------------------------------------------------------------- uvw geometry

L = 1000.0


def test_east_west_baseline_hand_computed():
    # X = 0, Y = L, Z = 0 whatever the latitude.
    dec = -math.pi / 6  # sin = -1/2, cos = sqrt(3)/2
    lay = two_station([L, 0.0, 0.0], latitude=math.radians(-30.0))
    uvw = ds.simulate_uvw(lay, declination=dec, hour_angles=[0.0, math.pi / 2, -math.pi / 2])
    assert uvw.shape == (1, 3, 3)
    # H = 0: u = Y = L, v = 0, w = 0.
    np.testing.assert_allclose(uvw[0, 0], [L, 0.0, 0.0], atol=1e-9)
    # H = +6h: u = 0, v = sin(d) L = -L/2, w = -cos(d) L = -L sqrt(3)/2.
    np.testing.assert_allclose(uvw[0, 1], [0.0, -L / 2, -L * math.sqrt(3) / 2], atol=1e-9)
    # H = -6h: u = 0, v = +L/2, w = +L sqrt(3)/2.
    np.testing.assert_allclose(uvw[0, 2], [0.0, L / 2, L * math.sqrt(3) / 2], atol=1e-9)


def test_north_south_baseline_at_pole_hand_computed():
    # Latitude 30 deg: X = -sin(lat) L = -L/2, Y = 0, Z = cos(lat) L = L sqrt(3)/2.
    lay = two_station([0.0, L, 0.0], latitude=math.pi / 6)
    uvw = ds.simulate_uvw(lay, declination=math.pi / 2, hour_angles=[0.0, math.pi / 2])
    # At the pole: u = sin H X, v = -cos H X, w = Z (constant in time).
    np.testing.assert_allclose(uvw[0, 0], [0.0, L / 2, L * math.sqrt(3) / 2], atol=1e-9)
    np.testing.assert_allclose(uvw[0, 1], [-L / 2, 0.0, L * math.sqrt(3) / 2], atol=1e-9)


def test_source_at_zenith_gives_enu():
    # A source transiting the zenith (dec = latitude, H = 0) sees uvw = ENU.
    rng = np.random.default_rng(7)
    lat = math.radians(52.9)
    b = rng.normal(scale=3000.0, size=3)
    uvw = ds.simulate_uvw(two_station(b, lat), declination=lat, hour_angles=[0.0])
    np.testing.assert_allclose(uvw[0, 0], b, atol=1e-8)


def test_w_is_geometric_delay():
    # Independent check of the sign conventions: w is the projection of the
    # baseline on the unit vector towards the source, written in ENU from the
    # source's hour angle H and declination d at latitude phi.
    rng = np.random.default_rng(11)
    lat = math.radians(-26.8)
    dec = math.radians(-50.0)
    ha = rng.uniform(-1.5, 1.5, size=25)
    b = rng.normal(scale=2000.0, size=3)
    uvw = ds.simulate_uvw(two_station(b, lat), declination=dec, hour_angles=ha)
    s = np.stack(
        [
            -math.cos(dec) * np.sin(ha),
            math.cos(lat) * math.sin(dec) - math.sin(lat) * math.cos(dec) * np.cos(ha),
            math.sin(lat) * math.sin(dec) + math.cos(lat) * math.cos(dec) * np.cos(ha),
        ],
        axis=-1,
    )
    np.testing.assert_allclose(uvw[0, :, 2], s @ b, atol=1e-8)


def test_rotation_preserves_length():
    rng = np.random.default_rng(42)
    for _ in range(20):
        b = rng.normal(scale=5000.0, size=3)
        lat = rng.uniform(-math.pi / 2, math.pi / 2)
        dec = rng.uniform(-math.pi / 2, math.pi / 2)
        ha = rng.uniform(-math.pi, math.pi, size=17)
        uvw = ds.simulate_uvw(two_station(b, lat), declination=dec, hour_angles=ha)
        np.testing.assert_allclose(np.linalg.norm(uvw, axis=-1), np.linalg.norm(b), rtol=1e-12)


def test_real_layout_lengths_and_shape():
    lay = ds.load_layout("meerkat")
    ha = ds.hour_angle_range(1.0, 600.0)
    uvw = ds.simulate_uvw(lay, declination=math.radians(-45.0), hour_angles=ha)
    assert uvw.shape == (lay.num_baselines, ha.size, 3)
    assert uvw.dtype == np.float64
    a1, a2 = ds.baselines(lay)
    lengths = np.linalg.norm(lay.enu[a2] - lay.enu[a1], axis=1)
    np.testing.assert_allclose(np.linalg.norm(uvw, axis=-1), lengths[:, None] * np.ones(ha.size), rtol=1e-12)


def test_conjugate_baseline_flips_sign():
    rng = np.random.default_rng(3)
    b = rng.normal(scale=800.0, size=3)
    lat, dec = math.radians(-26.8), math.radians(-60.0)
    ha = np.linspace(-1.0, 1.0, 9)
    fwd = ds.simulate_uvw(two_station(b, lat), declination=dec, hour_angles=ha)
    rev = ds.simulate_uvw(
        ArrayLayout("rev", ("b", "a"), np.array([b, [0.0, 0.0, 0.0]]), lat, "test"),
        declination=dec,
        hour_angles=ha,
    )
    np.testing.assert_allclose(rev, -fwd, atol=1e-9)
    assert np.all(np.sign(rev[0, :, 2]) == -np.sign(fwd[0, :, 2]))


def test_baseline_subset():
    lay = ds.load_layout("lofar_hba")
    ha = [-0.2, 0.0, 0.3]
    full = ds.simulate_uvw(lay, declination=1.0, hour_angles=ha)
    idx = np.array([5, 1890, 0, 5])
    np.testing.assert_array_equal(ds.simulate_uvw(lay, declination=1.0, hour_angles=ha, baseline_subset=idx), full[idx])
    mask = np.zeros(lay.num_baselines, dtype=bool)
    mask[[3, 10, 100]] = True
    np.testing.assert_array_equal(
        ds.simulate_uvw(lay, declination=1.0, hour_angles=ha, baseline_subset=mask), full[mask]
    )
    for bad in ([1891], [-1], [0.5], np.ones((2, 2), dtype=int), np.ones(5, dtype=bool)):
        with pytest.raises(ValueError):
            ds.simulate_uvw(lay, declination=1.0, hour_angles=ha, baseline_subset=bad)


@pytest.mark.parametrize("dec", [math.pi / 2 + 1e-9, -2.0, float("nan"), float("inf"), "north"])
def test_bad_declination(dec):
    lay = two_station([L, 0, 0], 0.5)
    with pytest.raises(ValueError, match="declination"):
        ds.simulate_uvw(lay, declination=dec, hour_angles=[0.0])


@pytest.mark.parametrize("ha", [[0.0, float("nan")], [float("inf")], [], [[0.0, 1.0]], ["x"]])
def test_bad_hour_angles(ha):
    lay = two_station([L, 0, 0], 0.5)
    with pytest.raises(ValueError, match="hour_angles"):
        ds.simulate_uvw(lay, declination=0.1, hour_angles=ha)


def test_declination_limits_are_allowed():
    lay = two_station([L, 0, 0], 0.5)
    for dec in (math.pi / 2, -math.pi / 2, 0.0):
        assert np.all(np.isfinite(ds.simulate_uvw(lay, declination=dec, hour_angles=0.0)))


# ---------------------------------------------------------------- hour angles, uniform uvw

def test_hour_angle_range():
    ha = ds.hour_angle_range(8.0, 10.0)
    assert ha.shape == (2880,)
    step = 10.0 * 2 * math.pi / ds.SIDEREAL_DAY_S
    np.testing.assert_allclose(np.diff(ha), step, rtol=1e-12)
    np.testing.assert_allclose(ha, -ha[::-1], atol=1e-15)  # centred on transit
    assert abs(ha[0]) == pytest.approx(math.pi / 3 * (1 - 1 / 2880) * 86400 / ds.SIDEREAL_DAY_S, rel=1e-9)
    np.testing.assert_array_equal(ds.hour_angle_range(1.0, 3600.0), [0.0])
    assert ds.hour_angle_range(1.0, 7.0).size == 514  # floor(3600 / 7)
    for args in ((0.0, 10.0), (1.0, 0.0), (-1.0, 10.0), (1.0, float("nan")), (0.001, 10.0)):
        with pytest.raises(ValueError):
            ds.hour_angle_range(*args)


def test_uniform_uvw():
    uvw = ds.uniform_uvw(10000, 500.0, 40.0, np.random.default_rng(0))
    assert uvw.shape == (10000, 3) and uvw.dtype == np.float64
    assert np.all(np.abs(uvw[:, :2]) <= 500.0) and np.all(np.abs(uvw[:, 2]) <= 40.0)
    # Actually spread over the range, not clustered.
    assert uvw[:, 0].min() < -450 and uvw[:, 0].max() > 450 and np.abs(uvw[:, 2]).max() > 35
    np.testing.assert_array_equal(ds.uniform_uvw(50, 1.0, 1.0, 123), ds.uniform_uvw(50, 1.0, 1.0, 123))
    assert ds.uniform_uvw(0, 1.0, 1.0, 0).shape == (0, 3)
    np.testing.assert_array_equal(ds.uniform_uvw(5, 1.0, 0.0, 0)[:, 2], 0.0)
    for args in ((-1, 1.0, 1.0), (2.5, 1.0, 1.0), (True, 1.0, 1.0), (5, -1.0, 1.0), (5, 1.0, float("nan"))):
        with pytest.raises(ValueError):
            ds.uniform_uvw(*args, rng=0)
