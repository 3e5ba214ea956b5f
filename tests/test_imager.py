"""`clgrid image` (clgrid.imager): Measurement Sets built here with python-casacore, imaged, and
checked against computations made here from first principles: a direct Fourier sum of the
visibilities (fluxes not divided by n), WSClean's weighting written out cell by cell from its
documented formula, the polarisations formed from the correlations, the FITS axes and
reference pixel, the PSF and its beam, per-channel and MFS images, the data column WSClean
would choose, offline reading of a CASA-like MS, and errors before any work.
tests/test_imager_wsclean.py compares with WSClean itself."""

import math
import os
import socket

import numpy as np
import pytest

from conftest import optional, poisoned_buffers

optional("casacore.tables", "ms")
fits = optional("astropy.io.fits", "ms")

from clgrid.imager import weighting  # noqa: E402
from clgrid.imager.beam import fit_beam  # noqa: E402
from clgrid.imager.correlations import parse_polarizations  # noqa: E402
from clgrid.imager.units import parse_angle  # noqa: E402
from clgrid.tools import cli  # noqa: E402
from clgrid.tools import simulated_ms as simulate  # noqa: E402

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
C = 299792458.0
NX, NY = 64, 48                      # not square: a transposed image would not fit
SCALE = "3amin"
SCALE_RAD = math.radians(3 / 60)
# double precision and a tight epsilon: the comparisons below hold to 1e-6 of the peak
ACCURATE = ["--precision", "double", "--epsilon", "1e-8", "--device", DEVICE, "--quiet"]


def sky(rng, count=3):
    """Point sources within the image (well off centre: n differs from 1 by up to 1e-3),
    polarised, with random fluxes."""
    sources = []
    for _ in range(count):
        l_ = rng.uniform(-0.4, 0.4) * NX * SCALE_RAD
        m_ = rng.uniform(-0.4, 0.4) * NY * SCALE_RAD
        i = rng.uniform(0.5, 2.0)
        q, u, v = rng.uniform(-0.3, 0.3, 3) * i
        sources.append(simulate.PointSource(l_, m_, i, q, u, v))
    return sources


@pytest.fixture(scope="module")
def observation(tmp_path_factory):
    """Two MSs of one sky, one with linear and one with circular feeds: 20 MeerKAT dishes,
    8 integrations, 4 channels at 70-80 MHz, random weights per channel (WEIGHT_SPECTRUM),
    5% of the samples flagged (each correlation on its own), autocorrelations, DATA twice
    the sky and CORRECTED_DATA the sky."""
    seed = int(os.environ.get("CLGRID_TEST_SEED", np.random.SeedSequence().entropy % 2 ** 32))
    print(f"random seed {seed}")
    rng = np.random.default_rng(seed)
    sources = sky(rng)
    folder = tmp_path_factory.mktemp("imager")
    made = {}
    for feeds in ("linear", "circular"):
        made[feeds] = simulate.write_ms(str(folder / f"{feeds}.ms"), sources, stations=20, ntime=8, nchan=4,
                                        freq=(70e6, 80e6), hours=4, correlations=feeds,
                                        columns={"DATA": 2.0, "CORRECTED_DATA": 1.0}, weights="random",
                                        weight_spectrum=True, flag_fraction=0.05, autocorrelations=True,
                                        seed=seed)
    return made


# -- the references ----------------------------------------------------------------------

def read_table(path):
    from casacore.tables import table

    with table(path, ack=False) as t:
        columns = {c: t.getcol(c) for c in ("UVW", "ANTENNA1", "ANTENNA2", "FLAG", "WEIGHT_SPECTRUM",
                                             "DATA", "CORRECTED_DATA")}
    with table(path + "::POLARIZATION", ack=False) as t:
        codes = list(t.getcol("CORR_TYPE")[0])
    with table(path + "::SPECTRAL_WINDOW", ack=False) as t:
        columns["freqs"] = t.getcol("CHAN_FREQ")[0]
    names = {5: "RR", 6: "RL", 7: "LR", 8: "LL", 9: "XX", 10: "XY", 11: "YX", 12: "YY"}
    columns["corr"] = [names[c] for c in codes]
    return columns


# Stokes parameters from correlations, written out as WSClean's documentation gives them
FORMED = {"I": [(("XX", "YY"), lambda a, b: (a + b) / 2), (("RR", "LL"), lambda a, b: (a + b) / 2)],
          "Q": [(("XX", "YY"), lambda a, b: (a - b) / 2), (("RL", "LR"), lambda a, b: (a + b) / 2)],
          "U": [(("XY", "YX"), lambda a, b: (a + b) / 2), (("RL", "LR"), lambda a, b: -1j * (a - b) / 2)],
          "V": [(("XY", "YX"), lambda a, b: -1j * (a - b) / 2), (("RR", "LL"), lambda a, b: (a - b) / 2)]}


def formed(t, pol, column="CORRECTED_DATA"):
    """(vis, visibility weight) of ``pol``: a correlation as it is, or a Stokes parameter from
    two, kept where both are unflagged, weight 4 min(w_a, w_b); autocorrelations weigh 0."""
    corr, data, flags, w = t["corr"], t[column], t["FLAG"], t["WEIGHT_SPECTRUM"]
    if pol in corr:
        k = corr.index(pol)
        vis, wgt = data[..., k], np.where(flags[..., k], 0.0, w[..., k])
    else:
        (a, b), combine = next((pair, f) for pair, f in FORMED[pol] if all(p in corr for p in pair))
        ia, ib = corr.index(a), corr.index(b)
        vis = combine(data[..., ia], data[..., ib])
        wgt = np.where(flags[..., ia] | flags[..., ib], 0.0, 4 * np.minimum(w[..., ia], w[..., ib]))
    wgt = np.where((t["ANTENNA1"] == t["ANTENNA2"])[:, None], 0.0, wgt)
    return vis.astype(np.complex128), wgt.astype(np.float64)


def wsclean_weights(uvw, freqs, vis_weight, mode, nx, ny, scale, robust=0.0, padding=1.2, rank=3.0, size=16,
                    super_weight=1.0, gridded=None):
    """Imaging weights by WSClean's formula (docs: weighting, weight rank filter; its
    ImageWeights), one sample and one cell at a time, times ``vis_weight``.  The grid is
    made of ``gridded`` (default ``vis_weight``): WSClean makes it of the first
    polarisation's weights and uses it for every polarisation."""
    gridded = vis_weight if gridded is None else gridded
    width = math.ceil(nx * padding)
    width += (4 - width % 4) % 4
    height = math.ceil(ny * padding)
    height += (4 - height % 4) % 4
    width, height = round(width / super_weight), round(height / super_weight)
    width, height = width + width % 2, height + height % 2
    grid = np.zeros((height // 2, width))
    cell = {}
    total = 0.0
    for r in range(uvw.shape[0]):
        for c, f in enumerate(freqs):
            u, v = uvw[r, 0] / (C / f), uvw[r, 1] / (C / f)
            if v < 0:
                u, v = -u, -v
            x, y = math.floor(u * width * scale + width // 2), math.floor(v * height * scale)
            if 0 <= x < width and y < height // 2:
                cell[r, c] = (y, x)
                grid[y, x] += gridded[r, c]
                total += gridded[r, c]
    if mode == "natural":
        grid = (grid != 0).astype(float)
    elif mode == "uniform":
        grid = np.where(grid != 0, 1 / np.where(grid != 0, grid, 1), 0.0)
    else:
        s2 = (5 * 10 ** -robust) ** 2 / ((grid ** 2).sum() / total)
        grid = 1 / (1 + grid * s2)
    filtered = grid.copy()
    half = size // 2
    for y in range(grid.shape[0] if rank >= 1 else 0):        # off below 1
        for x in range(grid.shape[1]):
            if grid[y, x] != 0:
                window = grid[max(y - half, 0):min(y + half, grid.shape[0]), max(x - half, 0):min(x + half, width)]
                mean = window[window != 0].mean()
                if grid[y, x] > rank * mean:
                    filtered[y, x] = rank * mean
    imaging = np.zeros(vis_weight.shape)
    for (r, c), (y, x) in cell.items():
        imaging[r, c] = filtered[y, x]
    return vis_weight * imaging


def pixel_lm(nx=NX, ny=NY, scale=SCALE_RAD):
    """(l, m) of every pixel of a FITS image [row, column]: column nx/2, row ny/2 the phase
    centre, l towards east (decreasing column), m towards north."""
    rows, cols = np.mgrid[0:ny, 0:nx]
    return -(cols - nx // 2) * scale, (rows - ny // 2) * scale


def direct_image(uvw, freqs, vis, wgt, nx=NX, ny=NY, scale=SCALE_RAD, divide_by_n=False):
    """sum w Re(V exp(-2 pi i (u l + v m + w (n - 1)))) / sum w: the MS's relation undone,
    the image not divided by n (WSClean)."""
    l_, m_ = pixel_lm(nx, ny, scale)
    n = np.sqrt(1 - l_ ** 2 - m_ ** 2)
    lmn = np.stack([l_.ravel(), m_.ravel(), n.ravel() - 1])
    image = np.zeros(nx * ny)
    for c, f in enumerate(freqs):
        keep = wgt[:, c] != 0
        phase = np.exp(-2j * np.pi * (uvw[keep] * (f / C)) @ lmn)
        image += np.real((wgt[keep, c] * vis[keep, c]) @ phase)
    image = image.reshape(ny, nx) / wgt.sum()
    return image / n if divide_by_n else image


def image_of(path):
    with fits.open(path) as hdul:
        return hdul[0].data[0, 0].astype(np.float64), hdul[0].header


def run_cli(*args):
    return cli.main(["image", *map(str, args)])


def close(got, want, tolerance=1e-6):
    error = np.abs(got - want).max() / np.abs(want).max()
    assert error < tolerance, error


# -- the tests ---------------------------------------------------------------------------

@pytest.mark.parametrize("weight, weights_on", [(["natural"], "host"), (["uniform"], "host"),
                                               (["uniform"], "device"), (["briggs", "0"], "device"),
                                               (["briggs", "-1.5"], "host")])
def test_weighting_and_fluxes_match_a_direct_sum_with_wsclean_weights(observation, tmp_path, weight, weights_on):
    ms = observation["linear"]
    assert run_cli(ms.path, "-o", tmp_path / "w", "--size", NX, NY, "--scale", SCALE, "--weight", *weight,
                   "--weights-on", weights_on, *ACCURATE) == 0
    got, header = image_of(tmp_path / "w-dirty.fits")
    t = read_table(ms.path)
    vis, w = formed(t, "I")
    w = wsclean_weights(t["UVW"], t["freqs"], w, weight[0], NX, NY, SCALE_RAD,
                        robust=float(weight[1]) if len(weight) > 1 else 0.0)
    close(got, direct_image(t["UVW"], t["freqs"], vis, w))
    assert header["WSCIMGWG"] == pytest.approx(w.sum(), rel=1e-6)     # weights in float32, as WSClean
    assert header["WSCNVIS"] == np.count_nonzero(w)
    assert header["WSCWEIGH"] == (f"Briggs'({float(weight[1]):g})" if weight[0] == "briggs" else weight[0])


def test_weight_grid_against_the_cell_by_cell_formula(rng):
    """`WeightGrid` (vectorised, summed-area rank filter) against the loops above, on
    random tracks that reach the grid's edges, with super-weighting and other paddings."""
    nrow, freqs = 3000, np.array([1.0e8, 1.3e8])
    uvw = np.column_stack([rng.normal(0, 900, nrow), rng.normal(0, 700, nrow), rng.normal(0, 50, nrow)])
    uvw[:50, :2] *= 5                                         # some beyond the grid
    vis_weight = rng.uniform(0.1, 3.0, (nrow, 2)) * (rng.random((nrow, 2)) > 0.1)
    for mode, robust, padding, super_weight, rank in [("uniform", 0, 1.2, 1, 3), ("briggs", 0.5, 1.2, 1, 3),
                                                      ("briggs", -2, 1.5, 1, 1.5), ("uniform", 0, 1.0, 1, 0),
                                                      ("uniform", 0, 1.2, 2.5, 2)]:
        nx, ny, scale = 80, 64, 2e-3
        grid = weighting.WeightGrid(mode, nx, ny, scale, scale, robust, padding, super_weight, rank, 16)
        grid.add(uvw, freqs, vis_weight)
        grid.finish()
        got = vis_weight.copy()
        used = np.zeros(got.shape, bool)
        applied = grid.apply(uvw, freqs, got, used=used)
        kept, kept_sum = applied.kept, applied.visibility_weight_sum
        want = wsclean_weights(uvw, freqs, vis_weight, mode, nx, ny, scale, robust, padding, rank,
                               super_weight=super_weight)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        assert kept == np.count_nonzero(want)
        assert 0 < kept < np.count_nonzero(vis_weight) == applied.before   # some beyond the grid
        assert kept_sum == pytest.approx(vis_weight[got != 0].sum())
        assert applied.weight_sum == pytest.approx(want.sum()) and np.array_equal(used, want != 0)
        length = np.sqrt((uvw ** 2).sum(axis=1))[:, None] * freqs / C
        assert applied.longest == pytest.approx(length[want != 0].max())
    assert weighting.padded_size(2048) == 2460 and weighting.padded_size(512) == 616


def meerkat_tracks(rng, ntime=24, nchan=6):
    """uvw (rows, 3) of MeerKAT's 2016 baselines over ``ntime`` integrations of a 6-hour
    track, frequencies (nchan) at 1.3-1.4 GHz, and random float32 visibility weights with
    20% zeros and the longest 1% of baselines pushed beyond the grid."""
    from clgrid.tools import datasets

    layout = datasets.load_layout("meerkat")
    hours = np.linspace(-3, 3, ntime) * np.pi / 12 + rng.uniform(-0.01, 0.01)
    uvw = datasets.simulate_uvw(layout, declination=rng.uniform(-1.2, -0.2), hour_angles=hours).reshape(-1, 3)
    freqs = np.sort(rng.uniform(1.3e9, 1.4e9, nchan))
    weights = (rng.uniform(0.1, 4.0, (uvw.shape[0], nchan)) * (rng.random((uvw.shape[0], nchan)) > 0.2))
    far = np.sqrt((uvw ** 2).sum(axis=1)) > np.quantile(np.sqrt((uvw ** 2).sum(axis=1)), 0.99)
    uvw[far, :2] *= 3
    return uvw, freqs, weights.astype(np.float32)


@pytest.mark.parametrize("mode, robust, padding, super_weight, rank, mf", [
    ("natural", 0, 1.2, 1, 3, False), ("uniform", 0, 1.2, 1, 3, False), ("briggs", 0.5, 1.2, 1, 3, True),
    ("briggs", -1, 1.0, 2, 0, False), ("uniform", 0, 1.5, 1, 1.5, True)])
def test_device_weights_equal_the_host_float64_twin(rng, monkeypatch, mode, robust, padding, super_weight, rank, mf):
    """`WeightGrid(device=)` against the host threads on MeerKAT tracks: the same density
    grid (to float64 rounding), the same cells (the same samples kept, ``used`` exactly),
    the weights in the image to float32's last bit, the same sums; buffers poisoned.  With
    ``mf`` (MF weighting), two calls to ``add``, the second with weights 50x larger, so
    that the device's fixed-point units are coarsened between them."""
    uvw, freqs, weights = meerkat_tracks(rng)
    nx, ny, scale = 512, 384, math.radians(3 / 3600)
    split = uvw.shape[0] // 2
    if mf:
        adds = [(uvw, freqs[:3], weights[:, :3]), (uvw[:split], freqs[3:], weights[:split, 3:] * np.float32(50))]
        applies = [(freqs[:3], weights[:, :3]), (freqs[3:], weights[:, 3:] * np.float32(50))]
    else:
        adds, applies = [(uvw, freqs, weights)], [(freqs, weights)]
    already = [rng.random(w.shape) < 0.05 for _, w in applies]        # `used` is or-ed into
    results = {}
    for device in (None, DEVICE):
        if device is not None:
            poisoned_buffers(monkeypatch)
        grid = weighting.WeightGrid(mode, nx, ny, scale, scale, robust, padding, super_weight, rank, 16, device=device)
        for points, f, w in adds:
            grid.add(points, f, np.array(w, order="C"))
        grid.finish()
        got, used, applied = [], [], []
        for (f, w), before in zip(applies, already):
            values, mask = np.array(w, order="C"), before.copy()       # copies: apply works in place
            applied.append(grid.apply(uvw, f, values, used=mask))
            got.append(values)
            used.append(mask)
            assert np.array_equal(mask, before | (values != 0))
        results[device] = (grid.grid.copy(), grid.total, used, got, applied)
    host, dev = results[None], results[DEVICE]
    assert np.isfinite(dev[0]).all()
    np.testing.assert_allclose(dev[0], host[0], rtol=1e-12, atol=1e-12 * np.abs(host[0]).max())
    assert dev[1] == pytest.approx(host[1], rel=1e-12)
    for h_values, d_values, h_used, d_used, h_applied, d_applied in zip(host[3], dev[3], host[2], dev[2], host[4],
                                                                        dev[4]):
        assert np.array_equal(d_used, h_used)
        np.testing.assert_allclose(d_values, h_values, rtol=3e-7, atol=0)
        assert (d_values == 0).sum() == (h_values == 0).sum()
        assert (d_applied.before, d_applied.kept) == (h_applied.before, h_applied.kept)
        assert 0 < h_applied.kept < h_applied.before                           # some beyond the grid
        assert d_applied.visibility_weight_sum == pytest.approx(h_applied.visibility_weight_sum, rel=1e-12)
        assert d_applied.weight_sum == pytest.approx(h_applied.weight_sum, rel=1e-6)
        assert d_applied.longest == pytest.approx(h_applied.longest, rel=1e-14)


def test_where_the_imaging_weights_are_computed():
    from clgrid.device.runtime import select_device
    from clgrid.imager.device_weighting import weights_device

    device = select_device(DEVICE)
    assert weights_device(DEVICE, "host") == (None, "host threads (--weights-on host)")
    chosen, why = weights_device(DEVICE, "device")
    assert chosen == device and "--weights-on device" in why
    chosen, why = weights_device(DEVICE, "auto")
    assert (chosen is None) == (not device.type & cl_device_type_gpu()) and "auto" in why
    with pytest.raises(ValueError, match="--weights-on must be one of auto, device, host"):
        weights_device(DEVICE, "gpu")
    with pytest.raises(TypeError, match="weights: the device path takes float32"):
        weighting.WeightGrid("uniform", 64, 64, 1e-3, 1e-3, device=DEVICE).add(
            np.zeros((4, 3)), np.array([1e8]), np.ones((4, 1)))


def cl_device_type_gpu():
    import pyopencl as cl

    return cl.device_type.GPU


@pytest.mark.filterwarnings("ignore:'datfix' made the change")
def test_fits_axes_reference_pixel_and_sky_position(observation, tmp_path):
    """WSClean's axes and CRPIX; the brightest source lands where the WCS puts its RA, Dec."""
    from astropy.wcs import WCS

    ms = observation["linear"]
    assert run_cli(ms.path, "-o", tmp_path / "f", "--size", NX, NY, "--scale", SCALE, *ACCURATE) == 0
    data, header = image_of(tmp_path / "f-dirty.fits")
    assert data.shape == (NY, NX)
    assert [header[f"CTYPE{k}"] for k in range(1, 5)] == ["RA---SIN", "DEC--SIN", "FREQ", "STOKES"]
    assert (header["CRPIX1"], header["CRPIX2"]) == (NX // 2 + 1, NY // 2 + 1)
    assert header["CDELT1"] == pytest.approx(-3 / 60) and header["CDELT2"] == pytest.approx(3 / 60)
    assert (header["CRVAL1"], header["CRVAL2"]) == pytest.approx((math.degrees(ms.ra) % 360, math.degrees(ms.dec)))
    width = ms.freqs[1] - ms.freqs[0]
    assert header["CRVAL3"] == pytest.approx(ms.freqs.mean()) and header["CDELT3"] == pytest.approx(4 * width)
    assert header["CRVAL4"] == 1 and header["BUNIT"] == "JY/BEAM" and header["TELESCOP"] == "MeerKAT"
    assert header["DATE-OBS"].startswith("2022-01-01T00:15:00")   # the first integration's TIME (of 30 min)
    assert header["WSCDATAC"] == "CORRECTED_DATA"
    # one source on a pixel's centre (l, m whole pixels off the phase centre, east and south):
    # the image's peak is that pixel, and the WCS puts the source's RA, Dec on it
    source = simulate.PointSource(5 * SCALE_RAD, -3 * SCALE_RAD, 1.0)
    single = simulate.write_ms(str(tmp_path / "one.ms"), [source], stations=20, ntime=8, nchan=4,
                               freq=(70e6, 80e6), hours=4, correlations="linear", columns={"DATA": 1.0})
    assert run_cli(single.path, "-o", tmp_path / "one", "--size", NX, NY, "--scale", SCALE, *ACCURATE) == 0
    data, header = image_of(tmp_path / "one-dirty.fits")
    dec = math.asin(source.m * math.cos(single.dec) + source.n * math.sin(single.dec))
    ra = single.ra + math.atan2(source.l, source.n * math.cos(single.dec) - source.m * math.sin(single.dec))
    column, row = WCS(header).celestial.world_to_pixel_values(math.degrees(ra), math.degrees(dec))
    assert abs(column - round(float(column))) < 1e-6 and abs(row - round(float(row))) < 1e-6
    assert np.unravel_index(data.argmax(), data.shape) == (round(float(row)), round(float(column)))
    assert (round(float(row)), round(float(column))) == (NY // 2 - 3, NX // 2 - 5)       # east is left, south down


def test_not_divided_by_n_unless_asked(observation, tmp_path):
    ms = observation["linear"]
    args = ["--size", NX, NY, "--scale", SCALE, "--weight", "natural", *ACCURATE]
    assert run_cli(ms.path, "-o", tmp_path / "a", *args) == 0
    assert run_cli(ms.path, "-o", tmp_path / "b", "--divide-by-n", *args) == 0
    wsclean, ducc0 = image_of(tmp_path / "a-dirty.fits")[0], image_of(tmp_path / "b-dirty.fits")[0]
    l_, m_ = pixel_lm()
    n = np.sqrt(1 - l_ ** 2 - m_ ** 2)
    assert n.min() < 1 - 5e-4                                 # the test sees the difference
    # both images come through float32 FITS: two roundings of 2**-24 each bound the
    # difference by 1.19e-7 of the peak (1.09e-7 seen in CI), against the 5e-4 it must see
    close(ducc0 * n, wsclean, 2.5e-7)


@pytest.mark.parametrize("feeds", ["linear", pytest.param("circular", marks=pytest.mark.slow)])
def test_polarisations_from_the_correlations(observation, tmp_path, feeds):
    ms = observation[feeds]
    own = ms.correlations[0]                                     # XX or RR: the MS's own
    assert run_cli(ms.path, "-o", tmp_path / "p", "--size", NX, NY, "--scale", SCALE, "--weight", "natural",
                   "--pol", f"i,q,u,v,{own.lower()}", *ACCURATE) == 0
    t = read_table(ms.path)
    first = formed(t, "I")[1]                 # the grid of the first polarisation serves them all
    for pol in ("I", "Q", "U", "V", own):
        got, header = image_of(tmp_path / f"p-{pol}-dirty.fits")
        vis, w = formed(t, pol)
        w = wsclean_weights(t["UVW"], t["freqs"], w, "natural", NX, NY, SCALE_RAD, gridded=first)
        close(got, direct_image(t["UVW"], t["freqs"], vis, w))
        assert header["CRVAL4"] == {"I": 1, "Q": 2, "U": 3, "V": 4, "XX": -5, "RR": -1}[pol]
    # one sky: Stokes I from circular feeds is Stokes I from linear ones (same samples flagged)
    if feeds == "circular":
        other = tmp_path / "lin"
        assert run_cli(observation["linear"].path, "-o", other, "--size", NX, NY, "--scale", SCALE, "--weight",
                       "natural", *ACCURATE) == 0
        close(image_of(tmp_path / "p-I-dirty.fits")[0], image_of(tmp_path / "lin-dirty.fits")[0], 1e-6)


def test_psf_and_the_beam_fitted_to_it(observation, tmp_path):
    ms = observation["linear"]
    assert run_cli(ms.path, "-o", tmp_path / "s", "--size", NX, NY, "--scale", SCALE, "--make-psf", *ACCURATE) == 0
    psf, header = image_of(tmp_path / "s-psf.fits")
    t = read_table(ms.path)
    _, w = formed(t, "I")
    w = wsclean_weights(t["UVW"], t["freqs"], w, "uniform", NX, NY, SCALE_RAD)
    want = direct_image(t["UVW"], t["freqs"], np.ones(w.shape), w)
    close(psf, want)
    assert psf[NY // 2, NX // 2] == pytest.approx(1.0, abs=1e-6) and psf.max() == pytest.approx(1.0, abs=1e-6)
    beam = fit_beam(psf, SCALE_RAD, SCALE_RAD, 1e-3)
    dirty_header = image_of(tmp_path / "s-dirty.fits")[1]
    for h in (header, dirty_header):
        assert (h["BMAJ"], h["BMIN"], h["BPA"]) == pytest.approx((math.degrees(beam.major),
                                                                  math.degrees(beam.minor), beam.angle), rel=1e-4)
    assert 0 < header["BMIN"] <= header["BMAJ"] < 10 * 3 / 60


@pytest.mark.parametrize("whole_box", [False, True])
def test_beam_fit_recovers_a_gaussian_and_its_position_angle(rng, whole_box):
    """A Gaussian beam drawn here (major axis at PA east of north: towards smaller columns
    and larger rows) is found again, axes and angle."""
    scale = math.radians(1 / 3600)
    for _ in range(4):
        major, minor = rng.uniform(3, 8), None
        minor = major * rng.uniform(0.4, 0.95)
        angle = rng.uniform(-89, 89)
        rows, cols = np.mgrid[0:128, 0:96]
        x, y = cols - 48, rows - 64
        t = math.radians(angle)
        along = -x * math.sin(t) + y * math.cos(t)
        across = x * math.cos(t) + y * math.sin(t)
        sigma = 1 / (2 * math.sqrt(2 * math.log(2)))
        psf = np.exp(-along ** 2 / (2 * (major * sigma) ** 2) - across ** 2 / (2 * (minor * sigma) ** 2))
        beam = fit_beam(psf, scale, scale, 2 * scale, whole_box=whole_box)
        assert beam.major / scale == pytest.approx(major, rel=1e-6)
        assert beam.minor / scale == pytest.approx(minor, rel=1e-6)
        assert beam.angle == pytest.approx(angle, abs=1e-4)


def test_channels_out_and_the_mfs_image(observation, tmp_path):
    ms = observation["linear"]
    assert run_cli(ms.path, "-o", tmp_path / "c", "--size", NX, NY, "--scale", SCALE, "--channels-out", 2,
                   "--make-psf", *ACCURATE) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["c-0000-dirty.fits", "c-0000-psf.fits", "c-0001-dirty.fits", "c-0001-psf.fits",
                     "c-MFS-dirty.fits", "c-MFS-psf.fits"]
    t = read_table(ms.path)
    vis, w = formed(t, "I")
    weighted, sums = 0.0, 0.0
    for k, chans in enumerate([slice(0, 2), slice(2, 4)]):
        got, header = image_of(tmp_path / f"c-{k:04d}-dirty.fits")
        wk = wsclean_weights(t["UVW"], t["freqs"][chans], w[:, chans], "uniform", NX, NY, SCALE_RAD)
        want = direct_image(t["UVW"], t["freqs"][chans], vis[:, chans], wk)
        close(got, want)
        width = ms.freqs[1] - ms.freqs[0]
        assert header["CRVAL3"] == pytest.approx(ms.freqs[chans].mean())
        assert header["CDELT3"] == pytest.approx(2 * width)
        assert header["WSCIMGWG"] == pytest.approx(wk.sum(), rel=1e-6)
        weighted, sums = weighted + want * wk.sum(), sums + wk.sum()
    mfs, header = image_of(tmp_path / "c-MFS-dirty.fits")
    close(mfs, weighted / sums)
    assert header["CRVAL3"] == pytest.approx(ms.freqs.mean()) and header["CDELT3"] == pytest.approx(4 * width)
    psf, header = image_of(tmp_path / "c-MFS-psf.fits")
    assert psf[NY // 2, NX // 2] == pytest.approx(1.0, abs=1e-6) and header["BMAJ"] > 0


def test_data_column_defaults_to_corrected_data_as_wsclean(observation, tmp_path, capsys):
    ms = observation["linear"]
    common = ["--size", NX, NY, "--scale", SCALE, "--weight", "natural", *ACCURATE]
    assert run_cli(ms.path, "-o", tmp_path / "d", *common) == 0
    assert "data column CORRECTED_DATA (the MS has one" in capsys.readouterr().out
    assert run_cli(ms.path, "-o", tmp_path / "e", "--data-column", "DATA", *common) == 0
    corrected, data = image_of(tmp_path / "d-dirty.fits")[0], image_of(tmp_path / "e-dirty.fits")[0]
    close(data, 2 * corrected, 1e-6)                          # DATA holds twice the sky
    # without CORRECTED_DATA, DATA
    plain = simulate.write_ms(str(tmp_path / "plain.ms"), ms.sources, stations=8, ntime=3, nchan=2,
                              freq=(70e6, 80e6))
    assert run_cli(plain.path, "-o", tmp_path / "g", *common) == 0
    assert "data column DATA (the MS has no CORRECTED_DATA)" in capsys.readouterr().out


def test_reads_a_casa_like_ms_offline(observation, tmp_path, monkeypatch):
    """An empty FEED table and no OBSERVATION::TELESCOPE_LOCATION (CASA writes neither), with
    every network connection refused: read from the MS's own tables."""
    from casacore.tables import table

    ms = observation["circular"]
    with table(ms.path + "::FEED", ack=False) as feed:
        assert feed.nrows() == 0
    with table(ms.path + "::OBSERVATION", ack=False) as obs:
        assert "TELESCOPE_LOCATION" not in obs.colnames()

    def refuse(*args, **kwargs):
        raise OSError("network access in a test of offline reading")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert run_cli(ms.path, "-o", tmp_path / "o", "--size", NX, NY, "--scale", SCALE, *ACCURATE) == 0
    assert image_of(tmp_path / "o-dirty.fits")[1]["TELESCOP"] == "MeerKAT"


def test_bad_input_is_refused_by_name_before_any_work(observation, tmp_path, monkeypatch, capsys):
    from clgrid.imager import ms as ms_module

    def no_reading(*args, **kwargs):
        raise AssertionError("the MS was read before the arguments were checked")

    monkeypatch.setattr(ms_module.MeasurementSet, "read", no_reading)
    path = observation["circular"].path
    (tmp_path / "exists-dirty.fits").write_bytes(b"keep me")
    (tmp_path / "folder").mkdir()
    (tmp_path / "taken-dirty.fits").mkdir()
    (tmp_path / "file.txt").write_text("not an MS")
    common = ["--size", NX, NY, "--scale", SCALE, "--quiet"]
    cases = [
        ([tmp_path / "folder", "-o", tmp_path / "x"], "is not a Measurement Set"),
        ([tmp_path / "file.txt", "-o", tmp_path / "x"], "is not a Measurement Set"),
        ([tmp_path / "missing.ms", "-o", tmp_path / "x"], "no such file or folder"),
        ([path, "-o", tmp_path / "x", "--data-column", "MODEL_DATA"], "--data-column MODEL_DATA"),
        ([path, "-o", tmp_path / "x", "--pol", "Z"], "--pol: unknown polarisation Z"),
        ([path, "-o", tmp_path / "x", "--pol", "XX"], "--pol XX: the MS has the correlations RR RL LR LL"),
        ([path, "-o", tmp_path / "nowhere" / "x"], "does not exist"),
        ([path, "-o", tmp_path / "exists"], "exists (--overwrite replaces it)"),
        ([path, "-o", tmp_path / "taken", "--overwrite"], "taken-dirty.fits is a folder"),
        ([path, "-o", tmp_path / "x", "--channels-out", "5"], "--channels-out must be between 1 and the MS's 4"),
        ([path, "-o", tmp_path / "x", "--size", 33, 33], "--size"),
        ([path, "-o", tmp_path / "x", "--scale", "3 parsecs"], "--scale"),
        ([path, "-o", tmp_path / "x", "--weight", "briggs"], "--weight briggs needs its robustness"),
        ([path, "-o", tmp_path / "x", "--weight", "robust"], "--weight must be natural, uniform or briggs"),
        ([path, "-o", tmp_path / "x", "--size", 4096, 4096, "--scale", "1deg"], "past the horizon"),
    ]
    for args, message in cases:
        code = run_cli(*common, *args)                      # the case's own --size, --scale win
        err = capsys.readouterr().err
        assert code == 2 and message in err, (args, err)
    assert (tmp_path / "exists-dirty.fits").read_bytes() == b"keep me"
    assert not list(tmp_path.glob("x*"))


def test_an_interrupted_write_leaves_no_partial_file(observation, tmp_path, monkeypatch):
    from astropy.io.fits import PrimaryHDU

    def interrupted(self, stream, *args, **kwargs):
        stream.write(b"SIMPLE  =                    T" + b" " * 2000)
        raise KeyboardInterrupt

    monkeypatch.setattr(PrimaryHDU, "writeto", interrupted)
    code = run_cli(observation["linear"].path, "-o", tmp_path / "i", "--size", NX, NY, "--scale", SCALE, *ACCURATE)
    assert code == 130
    assert list(tmp_path.iterdir()) == []                     # neither the file nor its temporary


def test_overwrite_and_wsclean_spellings(observation, tmp_path):
    """-name, -size, -scale, -weight, -pol as WSClean spells them; --overwrite replaces."""
    path = observation["linear"].path
    args = [path, "-name", tmp_path / "n", "-size", NX, NY, "-scale", SCALE, "-weight", "briggs", "0.5",
            "-pol", "I", *ACCURATE]
    assert run_cli(*args) == 0
    first = image_of(tmp_path / "n-dirty.fits")
    assert run_cli(*args) == 2
    assert run_cli(*args, "--overwrite") == 0
    close(image_of(tmp_path / "n-dirty.fits")[0], first[0], 1e-12)
    assert first[1]["WSCWEIGH"] == "Briggs'(0.5)"


def test_argument_parsers():
    assert parse_angle("20asec", "--scale") == pytest.approx(math.radians(20 / 3600))
    assert parse_angle("1.5 amin", "--scale") == pytest.approx(math.radians(1.5 / 60))
    assert parse_angle("0.01", "--scale") == pytest.approx(math.radians(0.01))
    assert parse_angle("2e-5rad", "--scale") == pytest.approx(2e-5)
    assert parse_angle("3MAS", "--scale") == pytest.approx(math.radians(3e-3 / 3600))
    for bad in ("", "deg", "1 lightyear", "nan", "1e999"):
        with pytest.raises(ValueError, match="--scale"):
            parse_angle(bad, "--scale")
    assert parse_polarizations("IQUV") == ("I", "Q", "U", "V")
    assert parse_polarizations("xx,yy") == ("XX", "YY")
    assert parse_polarizations("i") == ("I",)
    for bad in ("IQUVX", "I,I", "", "P"):
        with pytest.raises(ValueError, match="--pol"):
            parse_polarizations(bad)


# -- WSClean itself ------------------------------------------------------------------------

def wsclean(*args, cwd):
    """Run WSClean 3.x, skipped where it is not installed (an error under
    CLGRID_REQUIRE_WSCLEAN=1, which .ci/run sets after installing it).

    Always with ``-no-small-inversion``: by default WSClean images a field whose pixels are
    much smaller than the beam (these tests': 3' pixels, a 25' beam) on a smaller grid and
    interpolates the image up, which moves it by 2% of the peak here; clgrid images the
    field as asked (see clgrid/imager/pipeline.py)."""
    import shutil
    import subprocess

    if shutil.which("wsclean") is None:
        reason = "wsclean is not installed (Debian/Ubuntu: apt-get install wsclean)"
        if os.environ.get("CLGRID_REQUIRE_WSCLEAN") == "1":
            pytest.fail(f"{reason}, and CLGRID_REQUIRE_WSCLEAN=1 requires it", pytrace=False)
        pytest.skip(reason)
    done = subprocess.run(["wsclean", "-quiet", "-no-small-inversion", *map(str, args)], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


SAME_KEYWORDS = ("NAXIS1", "NAXIS2", "NAXIS3", "NAXIS4", "CTYPE1", "CTYPE2", "CTYPE3", "CTYPE4", "CRPIX1", "CRPIX2",
                 "CRPIX3", "CRPIX4", "CRVAL1", "CRVAL2", "CRVAL3", "CRVAL4", "CDELT1", "CDELT2", "CDELT3", "CDELT4",
                 "BUNIT", "TELESCOP", "OBSERVER", "OBJECT", "WSCDATAC", "WSCWEIGH", "SPECSYS")


def same_as_wsclean(ours, theirs, tolerance=5e-5, beam=True):
    """Pixels within ``tolerance`` of the peak (WSClean's w-gridder works in single precision),
    the keywords above equal, the weight sum and the beam as WSClean's."""
    a, ha = image_of(ours)
    b, hb = image_of(theirs)
    close(a, b, tolerance)
    for key in SAME_KEYWORDS:
        assert ha[key] == (pytest.approx(hb[key], rel=1e-9) if isinstance(hb[key], float) else hb[key]), key
    assert ha["WSCIMGWG"] == pytest.approx(hb["WSCIMGWG"], rel=1e-6)
    if hb["WSCNVIS"] and "MFS" not in str(ours):       # WSClean's w-gridder does not count them, and
        assert ha["WSCNVIS"] == hb["WSCNVIS"]           # its MFS files keep channel 0's count
    if "DATE-OBS" in ha and not hb["DATE-OBS"].startswith("1858"):     # WSClean's PSFs carry no date
        if "MFS" in str(ours):
            # WSClean's MFS files can carry a tenth of a second less than its channel files
            # (seen: 00:19:59.9 in each channel's, 00:19:59.8 in the MFS file's)
            from datetime import datetime
            apart = datetime.fromisoformat(ha["DATE-OBS"]) - datetime.fromisoformat(hb["DATE-OBS"])
            assert abs(apart.total_seconds()) <= 0.1 + 1e-9
        else:
            assert ha["DATE-OBS"] == hb["DATE-OBS"]
    if beam:
        assert (ha["BMAJ"], ha["BMIN"]) == pytest.approx((hb["BMAJ"], hb["BMIN"]), rel=1e-3)
        assert (ha["BPA"] - hb["BPA"] + 90) % 180 - 90 == pytest.approx(0, abs=0.05)


def test_wsclean_agrees_uniform_psf_channels_and_mfs(observation, tmp_path):
    ms = observation["linear"]
    common = ["-size", NX, NY, "-scale", SCALE, "-channels-out", 2, "-make-psf"]
    wsclean(*common, "-use-wgridder", "-wgridder-accuracy", "1e-5", "-name", "ws", ms.path, cwd=tmp_path)
    # the imaging weights on the device here (the other WSClean tests: the host's)
    assert run_cli(ms.path, "-name", tmp_path / "cl", *common, "--weights-on", "device", *ACCURATE) == 0
    ours = sorted(p.name[3:] for p in tmp_path.glob("cl-*"))
    theirs = sorted(p.name[3:] for p in tmp_path.glob("ws-*") if not p.name.endswith("-image.fits"))
    assert ours == theirs == ["0000-dirty.fits", "0000-psf.fits", "0001-dirty.fits", "0001-psf.fits",
                              "MFS-dirty.fits", "MFS-psf.fits"]
    for name in ours:
        same_as_wsclean(tmp_path / f"cl-{name}", tmp_path / f"ws-{name}")


@pytest.mark.parametrize("weight", [["natural"], ["briggs", "0"]])
def test_wsclean_agrees_on_stokes_from_circular_feeds(observation, tmp_path, weight):
    """30% of the samples flagged, each correlation on its own: Q and U samples whose
    cell holds no Stokes I weight, which WSClean weighs 0 (its grid is Stokes I's)."""
    ms = simulate.write_ms(str(tmp_path / "flagged.ms"), observation["circular"].sources, stations=20, ntime=8,
                           nchan=4, freq=(70e6, 80e6), hours=4, correlations="circular", weights="random",
                           weight_spectrum=True, flag_fraction=0.3)
    common = ["-size", NX, NY, "-scale", SCALE, "-pol", "iquv", "-weight", *weight]
    wsclean(*common, "-use-wgridder", "-wgridder-accuracy", "1e-5", "-name", "ws", ms.path, cwd=tmp_path)
    assert run_cli(ms.path, "-name", tmp_path / "cl", *common, *ACCURATE) == 0
    for pol in "IQUV":
        same_as_wsclean(tmp_path / f"cl-{pol}-dirty.fits", tmp_path / f"ws-{pol}-dirty.fits", beam=False)


def test_as_close_to_wsclean_default_gridder_as_its_own_w_gridder(observation, tmp_path):
    """WSClean's default (w-stacking) gridder is less accurate than its w-gridder; clgrid's
    image is as close to it as WSClean's w-gridder image is."""
    ms = observation["linear"]
    common = ["-size", NX, NY, "-scale", SCALE]
    wsclean(*common, "-name", "stack", ms.path, cwd=tmp_path)
    wsclean(*common, "-use-wgridder", "-name", "wg", ms.path, cwd=tmp_path)
    assert run_cli(ms.path, "-name", tmp_path / "cl", *common, *ACCURATE) == 0
    stack, w_gridder, ours = (image_of(tmp_path / f"{n}-dirty.fits")[0] for n in ("stack", "wg", "cl"))
    theirs = np.abs(w_gridder - stack).max()
    assert np.abs(ours - stack).max() <= 1.01 * theirs + 1e-5 * np.abs(stack).max()


@pytest.mark.parametrize("pols", ["I", "XX", "IQUV", "yy"])
def test_whole_cells_and_strided_slices_read_the_same(observation, tmp_path, monkeypatch, pols):
    """`MeasurementSet.read` reads whole cells where they hold at most twice the correlations
    needed (faster in casacore) and strided slices otherwise: the same visibilities, weights
    and counts, with WEIGHT_SPECTRUM (the fixture's: random, 5% flags, autocorrelations) and
    with WEIGHT alone, in blocks that do not divide the rows."""
    from clgrid.imager import ms as reading

    plain = simulate.write_ms(str(tmp_path / "weight.ms"), observation["linear"].sources, stations=10, ntime=5,
                              nchan=3, freq=(70e6, 80e6), weights="random", flag_fraction=0.1)
    for path in (observation["linear"].path, observation["circular"].path, plain.path):
        with reading.open_ms(path) as ms:
            if not all(p in ms.correlations for p in parse_polarizations(pols) if len(p) == 2):
                continue
            groups = reading.channel_groups(ms.freqs, 2 if ms.freqs.size > 2 else 1)
            got = {}
            for factor in (2, 0):
                monkeypatch.setattr(reading, "WHOLE_CELLS_UP_TO", factor)
                got[factor] = ms.read(parse_polarizations(pols), groups, block_rows=37)
        a, b = got[2], got[0]
        assert np.array_equal(a.uvw, b.uvw) and a.counts == b.counts and a.time_range == b.time_range
        for p in a.vis:
            for g in range(len(groups)):
                assert np.array_equal(a.vis[p][g], b.vis[p][g]) and np.array_equal(a.wgt[p][g], b.wgt[p][g])
                assert np.count_nonzero(a.wgt[p][g]) > 0
