"""Baseline order: visibilities as one track per baseline, ``(nbaseline, ntime, ...)``.

The moving-window gridder (seed 004) walks each baseline's samples in time, so it
needs inputs whose first axis is the baseline and whose next axes are time:
``uvw (nbaseline, ntime, 3)`` and ``vis (nbaseline, ntime, [nchan,] npol)``.
Measurement sets store rows instead (one per baseline and integration, any order,
with antenna1/antenna2/time columns): `to_baseline_order` turns those into tracks,
flagging the (baseline, time) slots no row fills.  `baseline_length`, `baseline_of`
and `hold_w` read flattened `Samples` (or a plan) in this order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .host import Samples

__all__ = ["BaselineOrdered", "to_baseline_order", "track_shape", "baseline_length", "baseline_of", "hold_w"]


@dataclass
class BaselineOrdered:
    """Row data rearranged into tracks; pass ``uvw, vis, weights, flags`` to a gridder.

    ``antenna1``/``antenna2`` (nbaseline,) name each track, ``times`` (ntime,) are the
    distinct time values in increasing order, and ``row`` (nbaseline, ntime) is the
    input row of each slot, -1 where no row filled it (those slots are flagged).
    """

    uvw: np.ndarray
    vis: np.ndarray
    weights: np.ndarray | None
    flags: np.ndarray
    antenna1: np.ndarray
    antenna2: np.ndarray
    times: np.ndarray
    row: np.ndarray


def to_baseline_order(antenna1, antenna2, time, uvw, vis, weights=None, flags=None) -> BaselineOrdered:
    """Rearrange row-ordered visibilities into ``(nbaseline, ntime, ...)`` tracks.

    ``antenna1``, ``antenna2``, ``time``: (nrow,) columns; a baseline is an ordered
    (antenna1, antenna2) pair and rows of one integration share one time value.
    ``uvw`` (nrow, 3); ``vis`` (nrow, npol) or (nrow, nchan, npol); ``weights`` and
    ``flags`` broadcast to ``vis``.  Two rows for the same baseline and time are an
    error.  Missing slots get zero uvw and visibilities and are flagged.
    """
    antenna1, antenna2 = np.asarray(antenna1), np.asarray(antenna2)
    time = np.asarray(time, np.float64)
    nrow = time.shape[0] if time.ndim == 1 else -1
    if nrow < 0 or antenna1.shape != (nrow,) or antenna2.shape != (nrow,):
        raise ValueError(f"antenna1, antenna2 and time must be 1-D columns of one length, got shapes "
                         f"{antenna1.shape}, {antenna2.shape}, {time.shape}")
    if not np.all(np.isfinite(time)):
        raise ValueError("time contains NaN or inf")
    uvw, vis = np.asarray(uvw), np.asarray(vis)
    if uvw.shape != (nrow, 3):
        raise ValueError(f"uvw must have shape ({nrow}, 3), got {uvw.shape}")
    if vis.ndim not in (2, 3) or vis.shape[0] != nrow:
        raise ValueError(f"vis must have shape ({nrow}, npol) or ({nrow}, nchan, npol), got {vis.shape}")

    pairs, baseline = np.unique(np.stack([antenna1, antenna2], axis=1), axis=0, return_inverse=True)
    times, time_index = np.unique(time, return_inverse=True)
    ntime = times.size
    slot = baseline.reshape(-1) * ntime + time_index
    row = np.full(pairs.shape[0] * ntime, -1, np.int64)
    row[slot] = np.arange(nrow)
    if np.count_nonzero(row >= 0) != nrow:
        counts = np.bincount(slot, minlength=row.size)
        b, t = divmod(int(np.argmax(counts)), ntime)
        raise ValueError(f"{counts.max()} rows for baseline ({pairs[b, 0]}, {pairs[b, 1]}) at time "
                         f"{times[t]!r}: a baseline has at most one row per time")

    def scatter(values, fill, dtype):
        out = np.full((row.size,) + vis.shape[1:], fill, dtype)
        out[slot] = np.broadcast_to(values, vis.shape)
        return out.reshape((pairs.shape[0], ntime) + vis.shape[1:])

    out_uvw = np.zeros((row.size, 3), uvw.dtype)
    out_uvw[slot] = uvw
    return BaselineOrdered(
        uvw=out_uvw.reshape(pairs.shape[0], ntime, 3),
        vis=scatter(vis, 0, vis.dtype),
        weights=None if weights is None else scatter(weights, 0, np.float64),
        flags=scatter(False if flags is None else flags, True, bool),
        antenna1=pairs[:, 0], antenna2=pairs[:, 1], times=times,
        row=row.reshape(pairs.shape[0], ntime))


def track_shape(samples: Samples) -> tuple:
    """(nbaseline, ntime, nchan) of baseline-ordered samples; a clear error otherwise.

    The one definition of a track: the last leading axis of uvw is time, all the others
    together name the baseline (``(nbaseline, ntime)``, or ``(nant, nant, ntime)``...)."""
    lead = samples.leading_shape
    if len(lead) < 2:
        raise ValueError(
            f"the moving-window gridder needs visibilities ordered by baseline then time: uvw of shape "
            f"(nbaseline, ntime, 3), got {lead + (3,)} with a single row axis. Rearrange row-ordered "
            f"data with clgrid.planning.baseline_order.to_baseline_order(antenna1, antenna2, time, uvw, vis, ...)")
    return int(np.prod(lead[:-1])), lead[-1], samples.nchan or 1


def baseline_length(samples) -> int:
    """Consecutive flattened samples of one baseline: time steps times channels (`track_shape`;
    uvw with a single row axis is one baseline)."""
    return samples.leading_shape[-1] * (samples.nchan or 1)


def baseline_of(samples: Samples, sample: np.ndarray) -> np.ndarray:
    """Baseline (`track_shape`) of flattened sample indices."""
    track_shape(samples)
    return sample // baseline_length(samples)


def hold_w(samples: Samples, time_block: int) -> Samples:
    """Samples whose w is held over blocks of ``time_block`` time steps (seed 000 §8.1).

    Within each block, every sample of a baseline and channel takes the w of the
    block's first usable time step, so its w-plane (and support) is constant over
    the block: the speed/accuracy trade-off of the adapted moving-window code.  The
    result differs from exact gridding; ``time_block <= 1`` returns ``samples``.
    """
    nbaseline, ntime, nchan = track_shape(samples)
    if time_block <= 1:
        return samples
    nblock = -(-ntime // time_block)
    usable = np.zeros((nbaseline, nblock * time_block, nchan), bool)
    usable[:, :ntime] = samples.usable.reshape(nbaseline, ntime, nchan)
    first = np.argmax(usable.reshape(nbaseline, nblock, time_block, nchan), axis=2)
    block_start = (np.arange(ntime) // time_block * time_block)[None, :, None]
    source = block_start + np.repeat(first, time_block, axis=1)[:, :ntime]
    w = samples.uvw[:, 2].reshape(nbaseline, ntime, nchan)
    uvw = samples.uvw.copy()
    uvw[:, 2] = np.take_along_axis(w, source, axis=1).ravel()
    return replace(samples, uvw=uvw)
