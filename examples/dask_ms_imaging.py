"""Image a Measurement Set read as Dask arrays by dask-ms, with `clgrid.dask.vis2dirty` on a
`LocalCluster` (one OpenCL device per worker).

    pip install "clgrid[dask,pocl]" dask-ms python-casacore
    python examples/dask_ms_imaging.py                  # writes a small simulated MS, then images it
    python examples/dask_ms_imaging.py obs.ms --npix 2048 --pixsize 1.5 --workers 4 --rows 200000

dask-ms (`daskms.xds_from_ms`) opens the MS lazily: each column is a dask array chunked
along rows (and channels, with ``chunks={"row": ..., "chan": ...}``), and each chunk is
read by the worker that images it, so the data never pass through this process.  The
example takes pseudo Stokes I from the parallel hands, weighted by the MS's
WEIGHT_SPECTRUM where it is defined, else WEIGHT (the smaller of the two hands' weights,
as `clgrid image` and WSClean weigh a Stokes parameter formed of two correlations: natural
weighting; ``--weight uniform`` or ``--weight briggs R`` turn them into imaging weights with
`clgrid.dask.imaging_weights`, as ``clgrid image --weight`` does), masks flagged samples and
autocorrelations, and calls `clgrid.dask.vis2dirty` with the MS's uvw as they are:
Measurement Sets store uvw and visibilities in the relation clgrid's user guide describes
(docs/user-guide/conventions.md), so ``flip_u=True, flip_v=True`` put a source where it is on the sky
(x towards east, y towards north).

Without an MS of your own, `write_ms` makes one with python-casacore: MeerKAT tracks
(`clgrid.tools.datasets`), one unpolarised point source of 1 Jy off the phase centre, XX XY YX
YY correlations, a few samples flagged, and (``weights="random"``) random weights per row and
correlation.  The example then finds the source on its pixel
with a peak of 1 Jy/beam; tests/test_dask.py runs the same on a 2-worker cluster.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile

import numpy as np

import clgrid
from clgrid.tools import datasets

SPEED_OF_LIGHT = 299792458.0


def write_ms(path: str, source: tuple, ntime: int = 60, nchan: int = 8, freq=(1.30e9, 1.40e9),
             flagged: float = 0.05, seed: int = 0, weights: str = "unit") -> dict:
    """A small MS at ``path``: MeerKAT's 64 dishes (2016 baselines, no autocorrelations)
    over ``ntime`` integrations of 8 hours, ``nchan`` channels, a 1 Jy point source at
    ``source`` = (l, m) radians, about ``flagged`` of the samples flagged, WEIGHT 1 (``weights=
    "unit"``) or drawn from 0.1 to 2 per row and correlation (``"random"``).  Returns what an
    imager should find: ``{"l", "m", "freq"}``."""
    if weights not in ("unit", "random"):
        raise ValueError(f"weights must be 'unit' or 'random', got {weights!r}")
    from casacore.tables import default_ms, makearrcoldesc, maketabdesc, table

    layout = datasets.load_layout("meerkat")
    ant1, ant2 = datasets.baselines(layout)
    declination = -0.5
    tracks = datasets.simulate_uvw(layout, declination=declination, hour_angles=np.linspace(-np.pi / 3, np.pi / 3,
                                                                                            ntime))
    # rows time by time, as a correlator writes them; uvw as the MS stores them (docs/user-guide/conventions.md)
    uvw = -tracks.transpose(1, 0, 2).reshape(-1, 3)
    nbl, nrow = ant1.size, ant1.size * ntime
    freqs = np.linspace(freq[0], freq[1], nchan)
    l0, m0 = source
    n0 = np.sqrt(1.0 - l0 * l0 - m0 * m0)
    phase = 2j * np.pi * (uvw @ np.array([l0, m0, n0 - 1.0]))[:, None] * freqs[None, :] / SPEED_OF_LIGHT
    data = np.zeros((nrow, nchan, 4), np.complex64)
    data[..., 0] = data[..., 3] = np.exp(phase)            # XX = YY = I for an unpolarised source
    rng = np.random.default_rng(seed)
    flags = np.repeat((rng.random((nrow, nchan)) < flagged)[..., None], 4, axis=2)

    extra = maketabdesc([makearrcoldesc("DATA", 0j, valuetype="complex", ndim=2, shape=[nchan, 4])])
    with default_ms(path, extra) as ms:
        ms.addrows(nrow)
        ms.putcol("UVW", uvw)
        ms.putcol("DATA", data)
        ms.putcol("FLAG", flags)
        ms.putcol("ANTENNA1", np.tile(ant1, ntime).astype(np.int32))
        ms.putcol("ANTENNA2", np.tile(ant2, ntime).astype(np.int32))
        ms.putcol("TIME", np.repeat(4.9e9 + np.arange(ntime) * 8 * 3600.0 / ntime, nbl))
        ms.putcol("WEIGHT", np.ones((nrow, 4), np.float32) if weights == "unit"
                  else rng.uniform(0.1, 2.0, (nrow, 4)).astype(np.float32))
        ms.putcol("SIGMA", np.ones((nrow, 4), np.float32))
    with table(f"{path}::SPECTRAL_WINDOW", readonly=False, ack=False) as spw:
        spw.addrows(1)
        spw.putcol("CHAN_FREQ", freqs[None, :])
        spw.putcol("CHAN_WIDTH", np.full((1, nchan), freqs[1] - freqs[0] if nchan > 1 else 1e6))
        spw.putcol("NUM_CHAN", np.array([nchan], np.int32))
        spw.putcol("REF_FREQUENCY", np.array([freqs[0]]))
    with table(f"{path}::POLARIZATION", readonly=False, ack=False) as pol:
        pol.addrows(1)
        pol.putcol("CORR_TYPE", np.array([[9, 10, 11, 12]], np.int32))        # XX XY YX YY
        pol.putcol("NUM_CORR", np.array([4], np.int32))
    with table(f"{path}::DATA_DESCRIPTION", readonly=False, ack=False) as dd:
        dd.addrows(1)
        dd.putcol("SPECTRAL_WINDOW_ID", np.array([0], np.int32))
        dd.putcol("POLARIZATION_ID", np.array([0], np.int32))
    with table(f"{path}::FIELD", readonly=False, ack=False) as field:
        field.addrows(1)
        for column in ("PHASE_DIR", "DELAY_DIR", "REFERENCE_DIR"):
            field.putcol(column, np.array([[[0.0, declination]]]))
    return {"l": l0, "m": m0, "freq": freqs}


def read_ms(path: str, rows: int = 50_000, channels: int | None = None) -> dict:
    """The MS's first field and spectral window through dask-ms, lazily: ``uvw`` (nrow, 3)
    metres, pseudo Stokes I ``vis`` (nrow, nchan) from the parallel hands, its weights
    ``wgt`` (nrow, nchan; float32: WEIGHT_SPECTRUM where defined, else WEIGHT, the smaller
    of the hands'), ``mask`` (1: use; flags and autocorrelations out), chunked ``rows`` x
    ``channels``; ``freq`` (nchan,) Hz as numpy."""
    from casacore.tables import table
    from daskms import xds_from_ms, xds_from_table

    with table(path, ack=False) as main_table:
        spectrum = ("WEIGHT_SPECTRUM" in main_table.colnames() and main_table.nrows() > 0
                    and main_table.iscelldefined("WEIGHT_SPECTRUM", 0))
    chunks = {"row": rows} if channels is None else {"row": rows, "chan": channels}
    weight_column = "WEIGHT_SPECTRUM" if spectrum else "WEIGHT"
    ms = xds_from_ms(path, columns=["UVW", "DATA", "FLAG", "ANTENNA1", "ANTENNA2", weight_column],
                     group_cols=["FIELD_ID", "DATA_DESC_ID"], chunks=chunks)[0]
    spw = xds_from_table(f"{path}::SPECTRAL_WINDOW")[0]
    pol = xds_from_table(f"{path}::POLARIZATION")[0]
    corr = [int(c) for c in pol.CORR_TYPE.data[0].compute()]
    parallel = [corr.index(c) for pair in ((9, 12), (5, 8), (1, 4)) if all(x in corr for x in pair) for c in pair]
    if not parallel:
        raise ValueError(f"{path}: no parallel hands among the correlations {corr} (XX/YY, RR/LL or I)")
    data, flag = ms.DATA.data, ms.FLAG.data
    hands = parallel[:2] if len(parallel) >= 2 else parallel[:1]
    vis = sum(data[..., h] for h in hands) / len(hands)
    cross = (ms.ANTENNA1.data != ms.ANTENNA2.data)[:, None]
    mask = (~functools.reduce(np.logical_or, [flag[..., h] for h in hands]) & cross).astype(np.uint8)
    weight = ms[weight_column].data                        # (nrow, nchan, ncorr), or (nrow, ncorr)
    wgt = functools.reduce(np.minimum, [weight[..., h] for h in hands]).astype(np.float32)
    if not spectrum:                                       # one weight a row: the same for every channel
        import dask.array as da

        wgt = da.broadcast_to(wgt[:, None], vis.shape, chunks=vis.chunks)
    return {"uvw": ms.UVW.data, "vis": vis, "wgt": wgt, "mask": mask,
            "freq": np.asarray(spw.CHAN_FREQ.data[0].compute(), np.float64)}


def image(observation: dict, npix: int, pixsize: float, epsilon: float = 1e-4, weight: str = "natural",
          robust: float = 0.0) -> np.ndarray:
    """`clgrid.dask.vis2dirty` of ``read_ms``'s arrays with w-gridding, in Jy/beam (divided by
    the sum of the weights the image was made with); runs on the current Dask client.
    ``weight``: "natural" (the MS's weights as they are), "uniform" or "briggs" (with
    ``robust``): imaging weights from `clgrid.dask.imaging_weights`, as ``clgrid image
    --weight`` computes them, made on the workers chunk by chunk."""
    import clgrid.dask

    wgt = observation["wgt"]
    if weight != "natural":
        wgt = clgrid.dask.imaging_weights(observation["uvw"], observation["freq"], wgt, observation["mask"],
                                          mode=weight, robust=robust, npix_x=npix, npix_y=npix, pixsize_x=pixsize,
                                          pixsize_y=pixsize)
    dirty = clgrid.dask.vis2dirty(uvw=observation["uvw"], freq=observation["freq"], vis=observation["vis"],
                                  wgt=wgt, mask=observation["mask"], npix_x=npix, npix_y=npix,
                                  pixsize_x=pixsize, pixsize_y=pixsize, epsilon=epsilon, do_wgridding=True,
                                  flip_u=True, flip_v=True)
    return dirty / float((wgt * observation["mask"]).sum(dtype=np.float64).compute())


def weighting(parser, values: list) -> tuple:
    """``--weight``'s values as ``(mode, robust)``, as ``clgrid image`` reads them."""
    mode, *rest = [v.lower() for v in values]
    if mode not in ("natural", "uniform", "briggs") or len(rest) != (mode == "briggs"):
        parser.error(f"--weight must be natural, uniform or briggs ROBUST, got {' '.join(values)}")
    try:
        return mode, float(rest[0]) if rest else 0.0
    except ValueError:
        parser.error(f"--weight briggs: the robustness must be a number, got {rest[0]!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ms", nargs="?", help="a Measurement Set (default: write a small simulated one)")
    p.add_argument("--npix", type=int, default=256)
    p.add_argument("--pixsize", type=float, default=None,
                   help="arcseconds (default: 1/3 of the finest fringe; 1.5 for the simulated MS)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rows", type=int, default=50_000, help="rows per chunk")
    p.add_argument("--channels", type=int, default=None, help="channels per chunk (default: all)")
    p.add_argument("--device", default=os.environ.get("CLGRID_DEVICE", "pocl"), help="each worker's device")
    p.add_argument("--weight", nargs="+", default=["natural"], metavar="MODE",
                   help="natural (default), uniform or briggs ROBUST, as clgrid image --weight")
    a = p.parse_args(argv)
    weight, robust = weighting(p, a.weight)
    import dask
    from distributed import Client, LocalCluster

    # workers without Dask's MALLOC_TRIM_THRESHOLD_: with it, every large temporary (the host
    # FFT makes some per call) is fresh pages, and the FFT takes longer (docs/user-guide/dask.md)
    no_trim = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
    with tempfile.TemporaryDirectory() as tmp, dask.config.set(no_trim), \
            LocalCluster(n_workers=a.workers, threads_per_worker=1, dashboard_address=None,
                         env={"CLGRID_DEVICE": a.device}) as cluster, Client(cluster):
        truth, path = None, a.ms
        pixsize = None if a.pixsize is None else np.deg2rad(a.pixsize / 3600.0)
        if path is None:             # a source 40 pixels east and 30 south of the centre, on a pixel
            path = os.path.join(tmp, "simulated.ms")
            pixsize = pixsize or np.deg2rad(1.5 / 3600.0)
            truth = write_ms(path, source=(40 * pixsize, -30 * pixsize))
            print(f"wrote {path}: a 1 Jy source at l = {truth['l']:.3g}, m = {truth['m']:.3g} rad")
        observation = read_ms(path, a.rows, a.channels)
        uvw = observation["uvw"]
        if pixsize is None:
            longest = float(np.abs(uvw[:, :2]).max().compute()) * observation["freq"].max() / SPEED_OF_LIGHT
            pixsize = 1.0 / (3.0 * 2.0 * longest)
        print(f"{uvw.shape[0]:,} rows x {observation['freq'].size} channels in {uvw.numblocks[0]} x "
              f"{observation['vis'].numblocks[1]} chunks; {a.npix}^2 pixels of {np.rad2deg(pixsize) * 3600:.2f}\"")
        dirty = image(observation, a.npix, pixsize, weight=weight, robust=robust)
        print(f"{weight}{f' {robust:g}' if weight == 'briggs' else ''} weighting")
        ix, iy = np.unravel_index(np.argmax(dirty), dirty.shape)
        print(f"peak {dirty[ix, iy]:.3f} Jy/beam at pixel ({ix}, {iy}): l = {(ix - a.npix // 2) * pixsize:.5f}, "
              f"m = {(iy - a.npix // 2) * pixsize:.5f} rad")
        if truth is not None:
            expected = (a.npix // 2 + round(truth["l"] / pixsize), a.npix // 2 + round(truth["m"] / pixsize))
            print(f"expected at pixel {expected}: {'found' if (ix, iy) == expected else 'NOT found'}")
    return dirty


if __name__ == "__main__":
    main()
