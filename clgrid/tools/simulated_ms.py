"""Simulated Measurement Sets: point sources seen by a real array, written with python-casacore.

For tests, benchmarks and trying `clgrid image` without data of one's own.  The MS is laid
out as a CASA or DP3 one is: rows time by time (every baseline of an integration, then
the next), ``UVW`` in metres and the data in the Measurement Set's relation

    V = sum_s S_s exp(+2 pi i (u l_s + v m_s + w (n_s - 1)) f / c)

(the relation UVFITS and MS files share: docs/user-guide/conventions.md), ``l`` towards east
and ``m`` towards north of the phase centre.  The subtables are those `default_ms` makes,
so the ``FEED`` table is empty and ``OBSERVATION`` has no ``TELESCOPE_LOCATION`` column,
as in MSs CASA writes.  Correlations are formed from each source's Stokes parameters with
the relations WSClean uses to go back:

    XX = I + Q, XY = U + iV, YX = U - iV, YY = I - Q
    RR = I + V, RL = Q + iU, LR = Q - iU, LL = I - V

Rows are computed and written a block at a time, so a large MS never sits in memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..imager.correlations import CORRELATION_CODES
from . import datasets

__all__ = ["PointSource", "SimulatedMS", "write_ms"]

SPEED_OF_LIGHT = 299792458.0
# MJD seconds of the first integration (2022-01-01 00:00 UTC)
_START_MJD_S = 59580.0 * 86400.0


@dataclass(frozen=True)
class PointSource:
    """A point source at (``l``, ``m``) radians from the phase centre (l east, m north),
    with Stokes parameters in Jy, the same at every frequency."""

    l: float
    m: float
    i: float = 1.0
    q: float = 0.0
    u: float = 0.0
    v: float = 0.0

    @property
    def n(self) -> float:
        return math.sqrt(1.0 - self.l ** 2 - self.m ** 2)

    def correlation(self, name: str) -> complex:
        """This source's value of correlation ``name`` (``"XX"``, ``"RL"``, ``"I"``, ...)."""
        i, q, u, v = self.i, self.q, self.u, self.v
        values = {"I": i, "Q": q, "U": u, "V": v,
                  "XX": i + q, "XY": u + 1j * v, "YX": u - 1j * v, "YY": i - q,
                  "RR": i + v, "RL": q + 1j * u, "LR": q - 1j * u, "LL": i - v}
        return complex(values[name])


@dataclass
class SimulatedMS:
    """What `write_ms` wrote: enough to know what an imager must find."""

    path: str
    ra: float
    dec: float
    freqs: np.ndarray
    correlations: tuple
    sources: tuple
    nrow: int
    columns: dict = field(default_factory=dict)


def _correlation_names(correlations) -> tuple:
    presets = {"linear": ("XX", "XY", "YX", "YY"), "circular": ("RR", "RL", "LR", "LL")}
    names = presets.get(correlations, correlations)
    names = tuple(str(c).upper() for c in names)
    unknown = [c for c in names if c not in CORRELATION_CODES]
    if unknown or not names:
        raise ValueError(f"correlations must be 'linear', 'circular' or names among "
                         f"{sorted(CORRELATION_CODES)}, got {correlations!r}")
    return names


def write_ms(path, sources, *, layout="meerkat", ntime: int = 16, nchan: int = 4,
             freq=(1.30e9, 1.40e9), ra: float = 1.0, dec: float = -0.5, hours: float = 6.0,
             correlations="linear", columns=None, weights=None, weight_spectrum: bool = False,
             flag_fraction: float = 0.0, autocorrelations: bool = False, telescope: str = "MeerKAT",
             stations: int | None = None, noise: float = 0.0, seed: int = 0,
             block_rows: int = 65536) -> SimulatedMS:
    """Write a Measurement Set of ``sources`` (`PointSource`\\ s) observed by ``layout``.

    Parameters
    ----------
    path : str
        The MS folder to create (refused if it exists).
    sources : sequence of PointSource
    layout : str or clgrid.tools.datasets.ArrayLayout
        A shipped layout (``"meerkat"``, ``"lofar_hba"``, ``"ska_low"``) or a ArrayLayout;
        ``stations`` keeps its first ``stations`` antennas.
    ntime, hours : int, float
        ``ntime`` integrations spread over ``hours`` hours, centred on transit.
    nchan, freq : int, (float, float)
        ``nchan`` channels from ``freq[0]`` to ``freq[1]`` Hz (a channel width apart).
    ra, dec : float
        The phase centre (radians, J2000).
    correlations : "linear", "circular" or sequence of names
        The POLARIZATION table's CORR_TYPE, in this order (``("XX", "YY")``, ``("I",)``).
    columns : dict, optional
        Data columns and the factor each holds the sky with: ``{"DATA": 1.0}`` (default);
        ``{"DATA": 2.0, "CORRECTED_DATA": 1.0}`` writes both.
    weights : str or None
        None: unit weights; ``"random"``: weights uniform in [0.5, 2) per row and
        correlation (and per channel with ``weight_spectrum``).
    weight_spectrum : bool
        Also write WEIGHT_SPECTRUM (per channel); WEIGHT then holds its channel mean.
    flag_fraction : float
        About this fraction of (row, channel, correlation) samples flagged, each
        correlation on its own.
    autocorrelations : bool
        Also write a row per antenna and integration (``uvw = 0``, the sources' sum).
    noise : float
        Gaussian noise of this rms (Jy) on the real and imaginary parts.
    block_rows : int
        Rows computed and written at a time.

    Returns
    -------
    SimulatedMS
    """
    from casacore.tables import default_ms, makearrcoldesc, maketabdesc, table

    import os

    if os.path.exists(path):
        raise FileExistsError(f"{path} exists")
    names = _correlation_names(correlations)
    columns = dict(columns or {"DATA": 1.0})
    layout = datasets.load_layout(layout) if isinstance(layout, str) else layout
    enu = np.asarray(layout.enu)[:stations] if stations else np.asarray(layout.enu)
    nant = enu.shape[0]
    ant1, ant2 = np.triu_indices(nant, k=0 if autocorrelations else 1)
    nbl = ant1.size
    # uvw in the MS's sign (module docstring): the tracks of enu[ant1] - enu[ant2]
    xyz = datasets.enu_to_xyz(enu, layout.latitude)
    hour_angles = (np.arange(ntime) - 0.5 * (ntime - 1)) * (hours * 2 * math.pi / 24 / max(ntime, 1))
    freqs = np.linspace(freq[0], freq[1], nchan) if nchan > 1 else np.array([float(freq[0])])
    width = float(freqs[1] - freqs[0]) if nchan > 1 else 1e6
    nrow, ncorr = nbl * ntime, len(names)
    rng = np.random.default_rng(seed)
    sources = tuple(sources)
    lmn = np.array([[s.l, s.m, s.n - 1.0] for s in sources]).reshape(-1, 3)
    values = np.array([[s.correlation(c) for c in names] for s in sources], np.complex128).reshape(-1, ncorr)

    tiled = dict(datamanagertype="TiledColumnStMan", datamanagergroup="TiledData")
    descs = [makearrcoldesc(name, 0j, valuetype="complex", ndim=2, shape=[nchan, ncorr], **tiled)
             for name in columns]
    if weight_spectrum:
        descs.append(makearrcoldesc("WEIGHT_SPECTRUM", 0.0, valuetype="float", ndim=2, shape=[nchan, ncorr],
                                    datamanagertype="TiledColumnStMan", datamanagergroup="TiledWeight"))
    with default_ms(path, maketabdesc(descs)) as ms:
        ms.addrows(nrow)
        for start in range(0, nrow, block_rows):
            stop = min(nrow, start + block_rows)
            rows = np.arange(start, stop)
            itime, ibl = rows // nbl, rows % nbl
            ha = hour_angles[itime]
            b = xyz[ant1[ibl]] - xyz[ant2[ibl]]
            sh, ch, sd, cd = np.sin(ha), np.cos(ha), math.sin(dec), math.cos(dec)
            uvw = np.stack([sh * b[:, 0] + ch * b[:, 1],
                            -sd * ch * b[:, 0] + sd * sh * b[:, 1] + cd * b[:, 2],
                            cd * ch * b[:, 0] - cd * sh * b[:, 1] + sd * b[:, 2]], axis=1)
            sky = np.zeros((rows.size, nchan, ncorr), np.complex128)
            for k in range(len(sources)):
                delay = uvw @ lmn[k]                                   # metres
                fringe = np.exp(2j * np.pi * delay[:, None] * (freqs[None, :] / SPEED_OF_LIGHT))
                sky += fringe[:, :, None] * values[k][None, None, :]
            for name, factor in columns.items():
                data = sky * factor
                if noise:
                    data = data + noise * (rng.standard_normal(data.shape) + 1j * rng.standard_normal(data.shape))
                ms.putcol(name, data.astype(np.complex64), start, rows.size)
            ms.putcol("UVW", uvw, start, rows.size)
            ms.putcol("ANTENNA1", ant1[ibl].astype(np.int32), start, rows.size)
            ms.putcol("ANTENNA2", ant2[ibl].astype(np.int32), start, rows.size)
            times = _START_MJD_S + (itime + 0.5) * (hours * 3600.0 / max(ntime, 1))
            ms.putcol("TIME", times, start, rows.size)
            ms.putcol("TIME_CENTROID", times, start, rows.size)
            ms.putcol("INTERVAL", np.full(rows.size, hours * 3600.0 / max(ntime, 1)), start, rows.size)
            ms.putcol("EXPOSURE", np.full(rows.size, hours * 3600.0 / max(ntime, 1)), start, rows.size)
            flags = rng.random((rows.size, nchan, ncorr)) < flag_fraction if flag_fraction else \
                np.zeros((rows.size, nchan, ncorr), bool)
            ms.putcol("FLAG", flags, start, rows.size)
            if weights == "random":
                shape = (rows.size, nchan, ncorr) if weight_spectrum else (rows.size, ncorr)
                w = rng.uniform(0.5, 2.0, shape).astype(np.float32)
            elif weights is None:
                w = np.ones((rows.size, nchan, ncorr) if weight_spectrum else (rows.size, ncorr), np.float32)
            else:
                raise ValueError(f"weights must be None or 'random', got {weights!r}")
            if weight_spectrum:
                ms.putcol("WEIGHT_SPECTRUM", w, start, rows.size)
                ms.putcol("WEIGHT", w.mean(axis=1), start, rows.size)
            else:
                ms.putcol("WEIGHT", w, start, rows.size)
            ms.putcol("SIGMA", np.ones((rows.size, ncorr), np.float32), start, rows.size)
    with table(f"{path}::SPECTRAL_WINDOW", readonly=False, ack=False) as spw:
        spw.addrows(1)
        spw.putcol("CHAN_FREQ", freqs[None, :])
        spw.putcol("CHAN_WIDTH", np.full((1, nchan), width))
        spw.putcol("EFFECTIVE_BW", np.full((1, nchan), width))
        spw.putcol("RESOLUTION", np.full((1, nchan), width))
        spw.putcol("NUM_CHAN", np.array([nchan], np.int32))
        spw.putcol("REF_FREQUENCY", np.array([freqs[0]]))
        spw.putcol("TOTAL_BANDWIDTH", np.array([width * nchan]))
        spw.putcol("MEAS_FREQ_REF", np.array([5], np.int32))      # TOPO
        spw.putcol("NAME", ["SPW0"])
    with table(f"{path}::POLARIZATION", readonly=False, ack=False) as pol:
        pol.addrows(1)
        pol.putcol("CORR_TYPE", np.array([[CORRELATION_CODES[c] for c in names]], np.int32))
        products = [[0 if c[0] in "XRI" else 1, 0 if c[-1] in "XRI" else 1] if len(c) == 2 else [0, 0]
                    for c in names]
        pol.putcol("CORR_PRODUCT", np.array([products], np.int32))
        pol.putcol("NUM_CORR", np.array([ncorr], np.int32))
    with table(f"{path}::DATA_DESCRIPTION", readonly=False, ack=False) as dd:
        dd.addrows(1)
        dd.putcol("SPECTRAL_WINDOW_ID", np.array([0], np.int32))
        dd.putcol("POLARIZATION_ID", np.array([0], np.int32))
    with table(f"{path}::FIELD", readonly=False, ack=False) as fld:
        fld.addrows(1)
        for column in ("PHASE_DIR", "DELAY_DIR", "REFERENCE_DIR"):
            fld.putcol(column, np.array([[[ra, dec]]]))
        fld.putcol("NAME", ["SIM"])
        fld.putcol("TIME", np.array([_START_MJD_S]))
    with table(f"{path}::ANTENNA", readonly=False, ack=False) as ant:
        ant.addrows(nant)
        reference = datasets.geodetic_to_ecef(0.0, layout.latitude, 0.0)
        ant.putcol("POSITION", reference + xyz)                  # at longitude 0
        ant.putcol("NAME", [str(n) for n in layout.station_names[:nant]])
        ant.putcol("STATION", [str(n) for n in layout.station_names[:nant]])
        ant.putcol("DISH_DIAMETER", np.full(nant, 13.5))
        ant.putcol("MOUNT", ["alt-az"] * nant)
        ant.putcol("TYPE", ["GROUND-BASED"] * nant)
    with table(f"{path}::OBSERVATION", readonly=False, ack=False) as obs:
        obs.addrows(1)
        obs.putcol("TELESCOPE_NAME", [telescope])
        obs.putcol("OBSERVER", ["clgrid"])
        obs.putcol("PROJECT", ["simulation"])
        obs.putcol("TIME_RANGE", np.array([[_START_MJD_S, _START_MJD_S + hours * 3600.0]]))
    return SimulatedMS(str(path), ra, dec, freqs, names, sources, nrow, columns)
