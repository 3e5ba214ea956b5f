"""A Measurement Set read by several processes (`clgrid.imager.parallel_reading`) gives the
same arrays, counts and time range as the read in one process, bit for bit: on an MS built
here with python-casacore with two spectral windows, two fields, random WEIGHT_SPECTRUM,
5% flagged samples, autocorrelations and rows flagged whole (FLAG_ROW); on one with WEIGHT
only, read as strided slices; Stokes IQUV (complex coefficients) and correlations; several
channel groups; blocks that do not divide the readers' rows.  Also: how many readers are
chosen, a reader's failure raised with its message, and `clgrid image -j`."""

import os

import numpy as np
import pytest

from conftest import optional

optional("casacore.tables", "ms")
optional("astropy.io.fits", "ms")

from clgrid.imager import ms as reading  # noqa: E402
from clgrid.imager.correlations import parse_polarizations  # noqa: E402
from clgrid.imager.ms_rows import RowSpec  # noqa: E402
from clgrid.tools import simulated_ms as simulate  # noqa: E402
from test_imager import close, image_of, run_cli, sky  # noqa: E402
from test_imager_bands import merge_as_spectral_windows  # noqa: E402


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """``mixed``: two spectral windows (DATA_DESC_ID 0 and 1), a tenth of the rows moved to
    field 1, some rows flagged whole; ``plain``: random WEIGHT only, one window, circular feeds."""
    from casacore.tables import table

    seed = int(os.environ.get("CLGRID_TEST_SEED", np.random.SeedSequence().entropy % 2 ** 32))
    print(f"random seed {seed}")
    rng = np.random.default_rng(seed)
    sources = sky(rng)
    folder = tmp_path_factory.mktemp("parallel")
    parts = [simulate.write_ms(str(folder / f"{name}.ms"), sources, stations=10, ntime=7, nchan=5, freq=freq,
                               hours=3, weights="random", weight_spectrum=True, flag_fraction=0.05,
                               autocorrelations=True, seed=seed + k, correlations=feeds)
             for k, (name, freq, feeds) in enumerate((("a", (70e6, 76e6), "linear"), ("b", (80e6, 86e6), "linear")))]
    mixed = str(folder / "mixed.ms")
    merge_as_spectral_windows(parts[0].path, parts[1].path, mixed)
    with table(f"{mixed}::FIELD", readonly=False, ack=False) as fields:
        fields.copyrows(fields, startrowin=0, nrow=1)  # a second field, same phase centre
    with table(mixed, readonly=False, ack=False) as t:
        n = t.nrows()
        field = np.zeros(n, np.int32)
        field[rng.choice(n, n // 10, replace=False)] = 1
        t.putcol("FIELD_ID", field)
        assert "FLAG_ROW" in t.colnames()
        flag_row = np.zeros(n, bool)
        flag_row[rng.choice(n, n // 20, replace=False)] = True
        t.putcol("FLAG_ROW", flag_row)
    plain = simulate.write_ms(str(folder / "plain.ms"), sources, stations=9, ntime=6, nchan=4, freq=(70e6, 80e6),
                              weights="random", flag_fraction=0.1, correlations="circular", seed=seed + 7)
    return {"mixed": mixed, "plain": plain.path}


def same(a, b):
    assert np.array_equal(a.uvw, b.uvw)
    assert a.counts == b.counts and a.time_range == b.time_range and a.groups == b.groups
    assert a.vis.keys() == b.vis.keys()
    for p in a.vis:
        for g in range(len(a.groups)):
            assert a.vis[p][g].dtype == b.vis[p][g].dtype and a.wgt[p][g].dtype == b.wgt[p][g].dtype
            assert np.array_equal(a.vis[p][g], b.vis[p][g]) and np.array_equal(a.wgt[p][g], b.wgt[p][g])


@pytest.mark.parametrize("pols", ["IQUV", "xx,yy", "I"])
def test_readers_read_what_one_process_reads(made, pols):
    with reading.open_ms(made["mixed"]) as ms:
        assert len(ms.bands) == 2
        polarizations = parse_polarizations(pols)
        for band in range(2):
            b = ms.bands[band]
            groups = [slice(0, 2), slice(2, 2), slice(2, 5)]    # an empty group too
            one = ms.read(polarizations, groups, block_rows=11, band=band, readers=1)
            assert one.readers == 1
            for readers in (2, 5):
                rows, begun = [], []
                several = ms.read(polarizations, groups, block_rows=11, band=band, readers=readers,
                                  progress=rows.append, begun=lambda: begun.append(1))
                assert several.readers == readers
                same(one, several)
                assert sum(rows) == b.nrow and begun == [1]   # the progress bar's rows, all of them
            assert one.counts["autocorrelation rows"] > 0 and one.counts["flagged rows"] > 0
            assert one.uvw.shape[0] == b.nrow and 0 < b.nrow < ms.nrow
            for p in polarizations:
                w = one.wgt[p][0]
                assert 0 < np.count_nonzero(w) < w.size   # flags, autocorrelations, FLAG_ROW: zeros


def test_readers_read_strided_slices_of_weight_only(made, monkeypatch):
    """WEIGHT (one per correlation), slices of the correlations (RR of RR RL LR LL)."""
    monkeypatch.setattr(reading, "WHOLE_CELLS_UP_TO", 0)
    with reading.open_ms(made["plain"]) as ms:
        assert ms.weight_column == "WEIGHT"
        groups = reading.channel_groups(ms.freqs, 2)
        for pols in ("RR", "V", "LL,RR"):
            one = ms.read(parse_polarizations(pols), groups, block_rows=5, readers=1)
            several = ms.read(parse_polarizations(pols), groups, block_rows=5, readers=3)
            same(one, several)


def test_shared_arrays_outlive_the_ms_and_can_be_written(made):
    import gc

    with reading.open_ms(made["plain"]) as ms:
        data = ms.read(("I",), reading.channel_groups(ms.freqs, 1), readers=2)
        want = data.wgt["I"][0].copy()
    gc.collect()
    assert np.array_equal(data.wgt["I"][0], want)
    data.wgt["I"][0][:] *= 2                          # the imager applies weights in place
    assert np.array_equal(data.wgt["I"][0], want * 2)


def test_how_many_readers(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert reading.reader_count(None, 64_000_000 * 4) == 16
    assert reading.reader_count(None, reading.READER_FROM_SAMPLES - 1) == 1
    assert reading.reader_count(None, reading.READER_FROM_SAMPLES) == \
        min(16, reading.READER_FROM_SAMPLES // reading.READER_MIN_SAMPLES)
    assert reading.reader_count(3, 10) == 3 and reading.reader_count(1, 10 ** 9) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert reading.reader_count(None, 10 ** 9) == 1   # too few cores: one process
    with pytest.raises(reading.MSError, match="--parallel-reading"):
        reading.reader_count(0, 10)
    monkeypatch.delattr(os, "memfd_create")
    assert reading.reader_count(None, 10 ** 9) == 1 and reading.reader_count(4, 10 ** 9) == 1


def test_a_failing_reader_is_raised_with_its_message(made):
    from clgrid.imager.parallel_reading import read_in_processes

    with reading.open_ms(made["plain"]) as ms:
        nrow, nchan = ms.nrow, ms.freqs.size
    spec = RowSpec("NO_SUCH_COLUMN", False, True, 0, 3, 1, nchan, 4, [("I", (0, 3), (0.5, 0.5))], [(0, nchan)],
                   True, 10)
    with pytest.raises(RuntimeError, match=r"(?s)reader process of rows 0-.*NO_SUCH_COLUMN"):
        read_in_processes(made["plain"], [], spec, nrow, ["I"], 2)


def test_clgrid_image_with_reader_processes(made, tmp_path, capsys):
    images = {}
    for readers in (1, 3):
        name = tmp_path / f"j{readers}"
        # double precision: the device's sums in another order then move the image by ~1e-15,
        # where single's moved it by up to 1.4e-5 under load (an order, not a reading, difference)
        assert run_cli(made["mixed"], "-o", name, "--size", 64, 64, "--scale", "30asec", "-j", readers,
                       "--precision", "double", "--device", os.environ.get("CLGRID_TEST_DEVICE", "pocl")) == 0
        said = capsys.readouterr().out
        assert ("by 3 reader processes" in said) == (readers == 3)
        images[readers] = image_of(f"{name}-dirty.fits")
    # same data; the device's sums in any order move the double image by ~1e-15, which float32
    # FITS can still round one way or the other: one rounding, 2**-24 of the peak, at most
    close(images[3][0], images[1][0], 1e-7)
    assert images[3][1]["WSCNVIS"] == images[1][1]["WSCNVIS"]
    assert run_cli(made["mixed"], "-o", tmp_path / "bad", "--parallel-reading", 0) == 2
    assert "--parallel-reading must be >= 1" in capsys.readouterr().err
