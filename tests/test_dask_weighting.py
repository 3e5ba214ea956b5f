"""`clgrid.dask.imaging_weights` on Dask's synchronous scheduler against the library's
`WeightGrid` on the whole data (the host float64 path `clgrid image` uses): MeerKAT tracks,
several row and channel chunkings, natural, uniform and Briggs 0 (and one with the rank
filter off and other padding); exactly equal where the cell sums are exact (unit
weights), to float64 rounding otherwise; masked samples out of the density and at 0;
lazy until computed, one finishing task; bad input refused by name.  Imaging with the
weights over the 2-worker cluster: tests/test_dask.py."""

import math

import numpy as np
import pytest

from conftest import optional, poisoned_buffers

dask = optional("dask", "dask")
da = optional("dask.array", "dask")
import clgrid.dask as cd  # noqa: E402  (needs dask)
import clgrid.dask.weighting  # noqa: E402
from clgrid.imager.weighting import WeightGrid  # noqa: E402

NX, NY, SCALE = 256, 192, math.radians(3 / 3600)
GRID = dict(npix_x=NX, npix_y=NY, pixsize_x=SCALE, pixsize_y=SCALE)


def tracks(rng, ntime=10, nchan=6, dtype=np.float64):
    """MeerKAT's 2016 baselines over ``ntime`` integrations of a 6-hour track, ``nchan``
    channels at 1.3-1.4 GHz, random weights (20% zeros), a mask with 10% out, and the
    longest 1% of baselines pushed beyond the weight grid."""
    from clgrid.tools import datasets

    layout = datasets.load_layout("meerkat")
    hours = np.linspace(-3, 3, ntime) * np.pi / 12 + rng.uniform(-0.01, 0.01)
    uvw = datasets.simulate_uvw(layout, declination=rng.uniform(-1.2, -0.2), hour_angles=hours).reshape(-1, 3)
    length = np.sqrt((uvw ** 2).sum(axis=1))
    uvw[length > np.quantile(length, 0.99), :2] *= 3
    freqs = np.sort(rng.uniform(1.3e9, 1.4e9, nchan))
    shape = (uvw.shape[0], nchan)
    weights = (rng.uniform(0.1, 4.0, shape) * (rng.random(shape) > 0.2)).astype(dtype)
    mask = (rng.random(shape) > 0.1).astype(np.uint8)
    return uvw, freqs, weights, mask


def library(uvw, freqs, weights, mask, mode, **keywords):
    """The library's weights on the whole data: `WeightGrid` (host) add, finish, apply."""
    used = np.where(mask != 0, weights, 0).astype(weights.dtype)
    grid = WeightGrid(mode, NX, NY, SCALE, SCALE, **keywords)
    grid.add(uvw, freqs, used)
    grid.finish()
    grid.apply(uvw, freqs, used)
    return used


CHUNKINGS = [(None, None), (4000, None), (3001, (1, 3, 2)), ((9000, 11160), 2)]
MODES = [("natural", {}), ("uniform", {}), ("briggs", {"robust": 0.0}),
         ("briggs", {"robust": -1.0, "rank_filter": 0.0, "padding": 1.5})]


@pytest.mark.parametrize("mode, keywords", MODES)
def test_dask_weights_equal_the_library_on_the_whole_data(rng, mode, keywords):
    uvw, freqs, weights, mask = tracks(rng)
    expected = library(uvw, freqs, weights, mask, mode, **keywords)
    ones = np.ones_like(weights, np.float32)
    exact = library(uvw, freqs, ones, mask, mode, **keywords)
    assert np.count_nonzero(expected) > 0.5 * expected.size
    for rows, channels in CHUNKINGS:
        chunks = (rows or uvw.shape[0], channels or freqs.size)
        w = da.from_array(weights, chunks=chunks)
        m = da.from_array(mask, chunks=chunks)
        u = da.from_array(uvw, chunks=(chunks[0], 3))
        with dask.config.set(scheduler="sync"):
            got = cd.imaging_weights(u, freqs, w, m, mode=mode, **keywords, **GRID)
            assert got.chunks == w.chunks and got.dtype == weights.dtype
            result = got.compute()
            np.testing.assert_allclose(result, expected, rtol=1e-12, atol=0)
            assert np.array_equal(result == 0, expected == 0)       # the same samples kept
            np.testing.assert_array_equal(got.compute(), result)    # same bits from run to run
            # unit weights: the cell sums are integers, exact in float64 in any order
            unit = cd.imaging_weights(u, freqs, None, m, mode=mode, **keywords, **GRID).compute()
            assert unit.dtype == np.float32
            np.testing.assert_array_equal(unit, exact)


def test_mask_is_respected_and_numpy_inputs_are_chunked(rng):
    uvw, freqs, weights, mask = tracks(rng, ntime=6, nchan=4)
    out = mask == 0
    poisoned = weights.copy()
    poisoned[out] = 1e6                     # masked weights must change nothing
    with dask.config.set(scheduler="sync"):
        got = cd.imaging_weights(uvw, freqs, poisoned, mask, mode="uniform", row_chunks=5000, channel_chunks=3,
                                 **GRID)
        assert got.numblocks == (3, 2)
        result = got.compute()
    assert np.all(result[out] == 0)
    np.testing.assert_allclose(result, library(uvw, freqs, weights, mask, "uniform"), rtol=1e-12, atol=0)
    # beyond the grid: weight 0 in every mode
    far = np.abs(uvw[:, :2]).max(axis=1) * freqs.min() / 299792458.0 > 1.01 / (2 * SCALE)
    assert far.any() and np.all(result[far] == 0)


def test_lazy_until_computed_and_finished_once(rng, monkeypatch):
    uvw, freqs, weights, mask = tracks(rng, ntime=4, nchan=4)
    calls = {"cell_sums": 0, "finish": 0}
    cell_sums, finish = WeightGrid.cell_sums, WeightGrid.finish

    def counted(name, function):
        def call(self, *args):
            calls[name] += 1
            return function(self, *args)
        return call

    monkeypatch.setattr(WeightGrid, "cell_sums", counted("cell_sums", cell_sums))
    monkeypatch.setattr(WeightGrid, "finish", counted("finish", finish))
    got = cd.imaging_weights(da.from_array(uvw, chunks=(3000, 3)), freqs, da.from_array(weights, chunks=(3000, 2)),
                             mode="briggs", robust=0.5, **GRID)
    assert isinstance(got, da.Array) and calls == {"cell_sums": 0, "finish": 0}
    with dask.config.set(scheduler="sync"):
        got.compute()
    assert calls == {"cell_sums": got.npartitions, "finish": 1}


def test_bad_input_is_refused_by_name(rng):
    uvw, freqs, weights, mask = tracks(rng, ntime=2, nchan=4)
    u, w, m = (da.from_array(uvw, chunks=(1000, 3)), da.from_array(weights, chunks=(1000, 2)),
               da.from_array(mask, chunks=(1000, 2)))
    with pytest.raises(ValueError, match="mode must be one of 'natural', 'uniform', 'briggs', got 'robust'"):
        cd.imaging_weights(u, freqs, w, m, mode="robust", **GRID)
    with pytest.raises(ValueError, match=r"uvw is chunked along rows \(1500, "):
        cd.imaging_weights(u.rechunk((1500, 3)), freqs, w, m, **GRID)
    with pytest.raises(ValueError, match=r"mask is chunked .*: chunk weights and mask alike"):
        cd.imaging_weights(u, freqs, w, m.rechunk((1000, 4)), **GRID)
    with pytest.raises(ValueError, match=r"weights must have shape \(4032, 4\)"):
        cd.imaging_weights(u, freqs, w[:, :3], **GRID)
    with pytest.raises(TypeError, match="weights must be a float array"):
        cd.imaging_weights(u, freqs, m, **GRID)
    with pytest.raises(TypeError, match=r"uvw must be an array of shape \(nrow, 3\)"):
        cd.imaging_weights(u[:, :2], freqs, w, **GRID)
    for name, value in (("npix_x", 0), ("pixsize_y", -1.0), ("padding", 0.5), ("robust", math.inf),
                        ("rank_filter_size", 0), ("super_weight", 0)):
        with pytest.raises(ValueError, match=name):
            cd.imaging_weights(u, freqs, w, **dict(GRID, **{name: value}))
    with pytest.raises(ValueError, match="freq must be positive"):
        cd.imaging_weights(u, -freqs, w, **GRID)
    bad = weights.copy()
    bad[1500, 3] = np.nan
    with dask.config.set(scheduler="sync"), pytest.raises(ValueError, match="weights: 1 non-finite") as caught:
        cd.imaging_weights(u, freqs, da.from_array(bad, chunks=(1000, 2)), **GRID).compute()
    assert "chunk 3, rows 1000:2000, channels 2:4" in "".join(getattr(caught.value, "__notes__", []))


@pytest.mark.parametrize("mode, keywords", MODES)
def test_device_weights_over_dask_agree_with_the_host_path(rng, monkeypatch, mode, keywords):
    """``weights_on="device"`` (PoCL here: each chunk's density in fixed point on the device,
    each chunk's weights applied there) against the host path over the same chunks and the
    library's `WeightGrid` with the same device on the whole data, as the library's own
    device test checks its two paths: the same samples kept, the weights to float32
    rounding; the device's new buffers poisoned."""
    import os

    device = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
    uvw, freqs, weights, mask = tracks(rng, dtype=np.float32)
    used = np.where(mask != 0, weights, 0).astype(np.float32)
    whole = WeightGrid(mode, NX, NY, SCALE, SCALE, device=device, **keywords)
    whole.add(uvw, freqs, used)
    whole.finish()
    whole.apply(uvw, freqs, used)
    poisoned_buffers(monkeypatch)
    from clgrid.imager.device_weighting import DeviceWeights

    calls = {"add": 0, "apply": 0}
    for name in calls:
        def counted(self, *args, name=name, function=getattr(DeviceWeights, name)):
            calls[name] += 1
            return function(self, *args)
        monkeypatch.setattr(DeviceWeights, name, counted)
    for rows, channels in CHUNKINGS[1:3]:
        chunks = (rows, channels)
        w, m = da.from_array(weights, chunks=chunks), da.from_array(mask, chunks=chunks)
        u = da.from_array(uvw, chunks=(rows, 3))
        with dask.config.set(scheduler="sync"):
            host = cd.imaging_weights(u, freqs, w, m, mode=mode, weights_on="host", **keywords, **GRID).compute()
            got = cd.imaging_weights(u, freqs, w, m, mode=mode, weights_on="device", device=device, **keywords,
                                     **GRID)
            assert got.dtype == np.float32 and got.chunks == w.chunks
            calls.update(add=0, apply=0)
            result = got.compute()
            assert calls == {"add": got.npartitions, "apply": got.npartitions}      # on the device, each chunk
        assert np.array_equal(result == 0, host == 0) and np.count_nonzero(result) > 0.5 * result.size
        np.testing.assert_allclose(result, host, rtol=3e-7, atol=0)
        np.testing.assert_allclose(result, used, rtol=3e-7, atol=0)


def test_where_dask_computes_the_weights(rng, monkeypatch):
    """``auto`` on a CPU device is the host path (its bits); float64 weights stay on the
    host under ``auto`` and are refused under ``device``; an unknown choice by name."""
    import os

    import pyopencl as cl

    from clgrid.device.runtime import select_device

    device = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
    uvw, freqs, weights, mask = tracks(rng, ntime=4, nchan=4, dtype=np.float32)
    u, w = da.from_array(uvw, chunks=(3000, 3)), da.from_array(weights, chunks=(3000, 2))
    with dask.config.set(scheduler="sync"):
        host = cd.imaging_weights(u, freqs, w, weights_on="host", **GRID).compute()
        auto = cd.imaging_weights(u, freqs, w, weights_on="auto", device=device, **GRID).compute()
    if select_device(device).type & cl.device_type.GPU:
        np.testing.assert_allclose(auto, host, rtol=3e-7, atol=0)
    else:
        np.testing.assert_array_equal(auto, host)
    with pytest.raises(ValueError, match="weights_on='device' takes float32 weights"):
        cd.imaging_weights(u, freqs, w.astype(np.float64), weights_on="device", **GRID)
    with pytest.raises(ValueError, match="weights_on must be auto, device or host, got 'gpu'"):
        cd.imaging_weights(u, freqs, w, weights_on="gpu", **GRID)
