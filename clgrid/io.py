"""Reading real measurements (UVFITS, Measurement Set, UVH5, MIRIAD) through pyuvdata.

The ``io`` extra brings pyuvdata; Measurement Sets also need python-casacore.  The
result is in the shapes `Gridder.grid` takes, so people can grid or benchmark their
own data: ``Gridder.grid(d.uvw, d.vis, weights=d.weights, flags=d.flags, freqs=d.freqs)``,
or image it: ``clgrid.vis2dirty(uvw=d.uvw.reshape(-1, 3), freq=d.freqs, vis=...)``.

Sign convention (docs/user-guide/conventions.md, "The imaging operator's conventions"; tests/test_conventions.py simulates a point
source from antenna positions to check it).  clgrid (like ducc0.wgridder) focuses a point
source of flux S at direction (l, m), l towards east and m towards north, when
``V = S exp(-2 pi i (u l + v m - w (n - 1)))``.  pyuvdata's convention (``V_12 = <X_1^* X_2>``,
``uvw = xyz(ant2) - xyz(ant1)``, and the sign of its ``phase()``) gives
``V = S exp(+2 pi i (u l + v m + w (n - 1)))`` with its uvw: u and v reversed, w the same.
Conjugating the data would move the source back but reverse w as well, which defocuses it
off-centre.  So `read_measurement` reverses u and v and keeps w and the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Measurement", "read_measurement"]


@dataclass
class Measurement:
    """Visibilities of one file, in clgrid's axis order.

    ``uvw`` in metres, ``(nbaseline, ntime, 3)`` when every baseline has every time
    (rows sorted by baseline, then time), else ``(nrow, 3)``; ``vis``, ``weights``
    and ``flags`` have the same leading axes then ``(nchan, npol)``.
    """

    uvw: np.ndarray
    vis: np.ndarray
    weights: np.ndarray
    flags: np.ndarray
    freqs: np.ndarray
    antenna1: np.ndarray
    antenna2: np.ndarray
    times: np.ndarray
    polarizations: tuple
    phase_center: tuple | None = None          # (ra, dec) in radians and the frame name
    antenna_diameter: float | None = None      # metres, the largest, when the file has it


def read_measurement(path, by_baseline: bool = True, **read_kwargs) -> Measurement:
    """Read a file pyuvdata understands; ``read_kwargs`` go to ``UVData.from_file``.

    Weights are pyuvdata's ``nsample_array``.  ``polarizations`` (AIPS codes) come in
    pyuvdata's order, which need not be the file's (an MS holding RR RL LR LL came back
    as RR LL RL LR: issue 27); `clgrid.imager.ms` reads a Measurement Set's correlations
    in its own order, with their names.  ``uvw`` is the file's with u and v
    reversed into clgrid's sign convention (module docstring); ``vis`` is the file's.  With ``by_baseline`` and a regular
    baseline-time layout, rows are ordered baseline-major as the moving-window
    strategies want; otherwise rows keep the file's order.
    """
    try:
        from pyuvdata import UVData
    except ImportError:
        raise ImportError("reading measurement files needs pyuvdata: pip install 'clgrid[io]'") from None
    uvd = UVData.from_file(str(path), **read_kwargs)
    if uvd.Npols not in (1, 2, 4):
        raise ValueError(f"{path}: {uvd.Npols} polarisations; clgrid grids 1, 2 or 4")
    freqs = np.asarray(uvd.freq_array, np.float64).reshape(-1)
    data = np.asarray(uvd.data_array).reshape(uvd.Nblts, uvd.Nfreqs, uvd.Npols)
    flags = np.asarray(uvd.flag_array).reshape(data.shape)
    weights = np.asarray(uvd.nsample_array, np.float64).reshape(data.shape)
    uvw = np.asarray(uvd.uvw_array, np.float64) * np.array([-1.0, -1.0, 1.0])  # module docstring
    ant1, ant2, times = (np.asarray(a) for a in (uvd.ant_1_array, uvd.ant_2_array, uvd.time_array))
    pols = tuple(int(p) for p in uvd.polarization_array)
    extra = dict(phase_center=_phase_center(uvd), antenna_diameter=_diameter(uvd))
    if by_baseline and uvd.Nblts == uvd.Nbls * uvd.Ntimes:
        order = np.lexsort((times, ant2, ant1))
        shape = (uvd.Nbls, uvd.Ntimes)

        def regrid(a):
            return a[order].reshape(shape + a.shape[1:])

        return Measurement(regrid(uvw), regrid(data), regrid(weights), regrid(flags), freqs,
                           regrid(ant1), regrid(ant2), regrid(times), pols, **extra)
    return Measurement(uvw, data, weights, flags, freqs, ant1, ant2, times, pols, **extra)


def _phase_center(uvd):
    """(ra, dec, frame) of the one sidereal phase centre, else None."""
    catalog = getattr(uvd, "phase_center_catalog", None) or {}
    ids = np.unique(np.asarray(uvd.phase_center_id_array)) if uvd.phase_center_id_array is not None else []
    if len(ids) != 1 or int(ids[0]) not in catalog:
        return None
    entry = catalog[int(ids[0])]
    if entry.get("cat_type") != "sidereal":
        return None
    return float(entry["cat_lon"]), float(entry["cat_lat"]), str(entry.get("cat_frame") or "icrs")


def _diameter(uvd):
    diameters = getattr(uvd.telescope, "antenna_diameters", None)
    if diameters is None or not np.size(diameters):
        return None
    return float(np.max(diameters))
