"""How the benchmark scripts time a call: once, the median after a warm-up, and several
calls interleaved round by round (so that a drift of the machine falls on all alike)."""

from __future__ import annotations

import time

import numpy as np

__all__ = ["timed", "median_time", "interleaved"]


def timed(fn):
    """(seconds, result) of one call of ``fn``."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def median_time(fn, repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``fn`` after one untimed."""
    fn()
    return float(np.median([timed(fn)[0] for _ in range(repeats)]))


def interleaved(runs: dict, repeats: int) -> tuple:
    """Each run once (warm-up; its output kept), then ``repeats`` rounds of all, interleaved:
    (medians, all times, the warm-up outputs)."""
    outputs = {k: fn() for k, fn in runs.items()}
    times = {k: [] for k in runs}
    for _ in range(repeats):
        for k, fn in runs.items():
            times[k].append(timed(fn)[0])
    return {k: float(np.median(v)) for k, v in times.items()}, times, outputs
