"""`clgrid image` of several spectral windows and several Measurement Sets in one image, as
WSClean images them: two MSs of one sky and one track at different frequencies, and the
same two merged into one MS with two spectral windows (DATA_DESCRIPTION rows 0 and 1),
built here with python-casacore.  Checked against a direct Fourier sum over all the
samples with WSClean's weighting written out cell by cell (tests/test_imager.py's
references), against each other, and against WSClean 3.1 itself where it is installed
(required under CLGRID_REQUIRE_WSCLEAN=1); `--channels-out` dividing the bands' channels as
WSClean divides them; MSs that cannot be combined refused by name."""

import os
import shutil

import numpy as np
import pytest

from conftest import optional

optional("casacore.tables", "ms")
optional("astropy.io.fits", "ms")

from clgrid.imager.ms import output_channels  # noqa: E402
from clgrid.tools import simulated_ms as simulate  # noqa: E402
from test_imager import (ACCURATE, NX, NY, SCALE, SCALE_RAD, close, direct_image, formed, image_of,  # noqa: E402
                         read_table, run_cli, same_as_wsclean, sky, wsclean, wsclean_weights)

# two bands of 3 channels: with --channels-out 3, output channel 1 takes the first band's
# last channel and the second band's first (WSClean's runs of the 6 channels: 0-1, 2-3, 4-5)
BANDS = {"low": (70e6, 76e6), "high": (80e6, 86e6)}


def merge_as_spectral_windows(first: str, second: str, out: str) -> None:
    """``out``: ``first``'s MS with ``second``'s rows appended as spectral window 1
    (DATA_DESC_ID 1; the same correlations and channel count, so the columns' shapes hold)."""
    from casacore.tables import table

    with table(first, ack=False) as t:
        t.copy(out, deep=True).close()
    with table(f"{second}::SPECTRAL_WINDOW", ack=False) as src, \
            table(f"{out}::SPECTRAL_WINDOW", readonly=False, ack=False) as dst:
        src.copyrows(dst)
    with table(f"{out}::DATA_DESCRIPTION", readonly=False, ack=False) as dd:
        dd.addrows(1)
        dd.putcell("SPECTRAL_WINDOW_ID", 1, 1)
        dd.putcell("POLARIZATION_ID", 1, 0)
        dd.putcell("FLAG_ROW", 1, False)
    with table(second, ack=False) as src, table(out, readonly=False, ack=False) as dst:
        start = dst.nrows()
        src.copyrows(dst)
        dst.putcol("DATA_DESC_ID", np.ones(src.nrows(), np.int32), start, src.nrows())


@pytest.fixture(scope="module")
def bands(tmp_path_factory):
    """The two MSs (one track, one sky, random weights and 5% flags each) and their merge."""
    seed = int(os.environ.get("CLGRID_TEST_SEED", np.random.SeedSequence().entropy % 2 ** 32))
    print(f"random seed {seed}")
    rng = np.random.default_rng(seed)
    sources = sky(rng)
    folder = tmp_path_factory.mktemp("bands")
    made = {name: simulate.write_ms(str(folder / f"{name}.ms"), sources, stations=12, ntime=6, nchan=3, freq=freq,
                                    hours=4, columns={"DATA": 1.0, "CORRECTED_DATA": 2.0}, weights="random",
                                    weight_spectrum=True, flag_fraction=0.05,
                                    autocorrelations=True, seed=seed + k)
            for k, (name, freq) in enumerate(BANDS.items())}
    merged = str(folder / "merged.ms")
    merge_as_spectral_windows(made["low"].path, made["high"].path, merged)
    return made["low"].path, made["high"].path, merged


def reference(paths, channels=None, mode="uniform"):
    """The direct Fourier sum of Stokes I over the MSs' samples (all channels, or
    ``channels`` of the channel axis the MSs make end to end), weighted by WSClean's formula
    on one grid: the MSs share their uvw (one track), so their channels are one axis."""
    tables = [read_table(p) for p in paths]
    assert all(np.array_equal(t["UVW"], tables[0]["UVW"]) for t in tables)
    freqs = np.concatenate([t["freqs"] for t in tables])
    formed_i = [formed(t, "I", column="DATA") for t in tables]
    vis = np.concatenate([v for v, _ in formed_i], axis=1)
    w = np.concatenate([w for _, w in formed_i], axis=1)
    if channels is not None:
        freqs, vis, w = freqs[channels], vis[:, channels], w[:, channels]
    w = wsclean_weights(tables[0]["UVW"], freqs, w, mode, NX, NY, SCALE_RAD)
    return direct_image(tables[0]["UVW"], freqs, vis, w), w


def test_output_channels_divide_every_bands_channels_as_wsclean():
    """The distinct channels of all bands sorted, cut into runs of n/K, each run taking every
    band's channels from its lowest to its highest frequency (a decreasing band and a
    channel two bands share included)."""
    low = (np.array([1.0, 2.0, 3.0]), np.full(3, 0.5))
    high = (np.array([6.0, 5.0, 4.0, 3.0]), np.full(4, 0.5))            # decreasing; 3.0 shared
    out = output_channels([low, high], 3)                                # 6 distinct: runs 0-1, 2-3, 4-5
    assert [o.slices for o in out] == [[slice(0, 2), slice(0, 0)], [slice(2, 3), slice(2, 4)],
                                       [slice(0, 0), slice(0, 2)]]
    assert [o.band for o in out] == [(0.75, 2.25), (2.75, 4.25), (4.75, 6.25)]
    assert [o.slices for o in output_channels([low], 2)] == [[slice(0, 1)], [slice(1, 3)]]
    with pytest.raises(ValueError, match="--channels-out must be between 1 and the distinct channels of all "
                                         "spectral windows: 6"):
        output_channels([low, high], 7)
    with pytest.raises(ValueError, match="spectral window 1's channel frequencies neither only increase"):
        output_channels([low, (np.array([4.0, 6.0, 5.0]), np.ones(3))], 1)


def test_two_spectral_windows_and_two_mss_make_one_image(bands, tmp_path):
    low, high, merged = bands
    want, w = reference([low, high])
    for name, paths in (("spws", [merged]), ("mss", [low, high])):
        assert run_cli(*paths, "-o", tmp_path / name, "--size", NX, NY, "--scale", SCALE, "--data-column", "DATA",
                       *ACCURATE) == 0
        got, header = image_of(tmp_path / f"{name}-dirty.fits")
        close(got, want)
        assert header["WSCIMGWG"] == pytest.approx(w.sum(), rel=1e-6)
        assert header["WSCNVIS"] == np.count_nonzero(w)
        assert header["CRVAL3"] == pytest.approx((BANDS["low"][0] - 1.5e6 + BANDS["high"][1] + 1.5e6) / 2)
    # one band alone is not the whole image
    assert run_cli(low, "-o", tmp_path / "low", "--size", NX, NY, "--scale", SCALE, "--data-column", "DATA",
                   *ACCURATE) == 0
    assert np.abs(image_of(tmp_path / "low-dirty.fits")[0] - want).max() > 1e-3 * np.abs(want).max()


def test_channels_out_across_the_bands(bands, tmp_path):
    """--channels-out 3 over 2 x 3 channels: output channel 1 takes one channel of each band
    (WSClean's division), each channel weighted on its own grid; the MFS image and the PSF."""
    low, high, merged = bands
    common = ["--size", NX, NY, "--scale", SCALE, "--data-column", "DATA", "--channels-out", 3, "--make-psf"]
    assert run_cli(merged, "-o", tmp_path / "spws", *common, *ACCURATE) == 0
    assert run_cli(low, high, "-o", tmp_path / "mss", *common, *ACCURATE) == 0
    for k, channels in enumerate(([0, 1], [2, 3], [4, 5])):
        want, w = reference([low, high], channels)
        got, header = image_of(tmp_path / f"spws-{k:04d}-dirty.fits")
        psf, _ = image_of(tmp_path / f"spws-{k:04d}-psf.fits")
        # with a PSF the image is divided by its centre too (WSClean), which is the sum of the
        # weights: the same image
        close(got, want)
        assert psf[NY // 2, NX // 2] == pytest.approx(1.0, abs=1e-6)
        edges = np.concatenate([np.linspace(*BANDS["low"], 3), np.linspace(*BANDS["high"], 3)])[channels]
        assert header["CRVAL3"] == pytest.approx((edges[0] + edges[-1]) / 2)
        assert header["CDELT3"] == pytest.approx(edges[-1] - edges[0] + 3e6)
        assert header["WSCIMGWG"] == pytest.approx(w.sum(), rel=1e-6)
        for kind in ("dirty", "psf"):
            np.testing.assert_allclose(image_of(tmp_path / f"mss-{k:04d}-{kind}.fits")[0],
                                       image_of(tmp_path / f"spws-{k:04d}-{kind}.fits")[0], rtol=0,
                                       atol=1e-9 * np.abs(got).max())
    assert sorted(p.name for p in tmp_path.glob("spws-MFS-*")) == ["spws-MFS-dirty.fits", "spws-MFS-psf.fits"]


def test_wsclean_images_the_bands_as_clgrid(bands, tmp_path):
    """WSClean 3.1 (its w-gridder, no small inversion) on the merged MS and on the two MSs,
    --channels-out 3 with the PSF: every file as clgrid's."""
    low, high, merged = bands
    common = ["-size", NX, NY, "-scale", SCALE, "-channels-out", 3, "-make-psf", "-data-column", "DATA"]
    files = ["0000-dirty.fits", "0000-psf.fits", "0001-dirty.fits", "0001-psf.fits", "0002-dirty.fits",
             "0002-psf.fits", "MFS-dirty.fits", "MFS-psf.fits"]
    for name, paths in (("spws", [merged]), ("mss", [low, high])):
        wsclean(*common, "-use-wgridder", "-wgridder-accuracy", "1e-5", "-name", f"ws-{name}", *paths, cwd=tmp_path)
        assert run_cli(*paths, "-name", tmp_path / f"cl-{name}", *common, *ACCURATE) == 0
        assert sorted(p.name[len(f"cl-{name}-"):] for p in tmp_path.glob(f"cl-{name}-*")) == files
        for file in files:
            same_as_wsclean(tmp_path / f"cl-{name}-{file}", tmp_path / f"ws-{name}-{file}")


def test_mss_that_cannot_be_combined_are_refused_by_name_before_reading(bands, tmp_path, monkeypatch, capsys):
    from clgrid.imager import ms as ms_module

    low, high, _ = bands
    table_of = read_table(low)
    elsewhere = simulate.write_ms(str(tmp_path / "elsewhere.ms"), [simulate.PointSource(0.0, 0.0, 1.0)],
                                  stations=12, ntime=6, nchan=3, freq=BANDS["high"], hours=4, ra=1.0 + 1e-4)
    assert table_of["freqs"].size == 3

    def no_reading(*args, **kwargs):
        raise AssertionError("read before the MSs were checked")

    monkeypatch.setattr(ms_module.MeasurementSet, "read", no_reading)
    assert run_cli(low, elsewhere.path, "-o", tmp_path / "x", "--size", NX, NY, "--scale", SCALE, "--quiet") == 2
    err = capsys.readouterr().err
    assert f"{elsewhere.path} has its phase centre at RA" in err and f"from {low}'s" in err
    assert "one phase centre" in err
    # more output channels than the bands have distinct channels
    assert run_cli(low, high, "-o", tmp_path / "x", "--size", NX, NY, "--scale", SCALE, "--channels-out", 7,
                   "--quiet") == 2
    assert "--channels-out must be between 1 and the distinct channels of all spectral windows: 6" in \
        capsys.readouterr().err
    # a polarisation one of them cannot form
    circular = simulate.write_ms(str(tmp_path / "circular.ms"), [simulate.PointSource(0.0, 0.0, 1.0)], stations=12,
                                 ntime=6, nchan=3, freq=BANDS["high"], hours=4, correlations="circular")
    assert run_cli(low, circular.path, "-o", tmp_path / "x", "--size", NX, NY, "--scale", SCALE, "--pol", "XX",
                   "--quiet") == 2
    assert f"clgrid image: {circular.path}: " in capsys.readouterr().err
    assert not list(tmp_path.glob("x*"))
