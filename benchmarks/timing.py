"""How the benchmark scripts time a call: once, the median after a warm-up, and several
calls interleaved round by round (so that a drift of the machine falls on all alike)."""

from __future__ import annotations

import time

import numpy as np

__all__ = ["timed", "median_time", "interleaved", "paired_ratio"]


def timed(fn):
    """(seconds, result) of one call of ``fn``."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def median_time(fn, repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``fn`` after one untimed."""
    fn()
    return float(np.median([timed(fn)[0] for _ in range(repeats)]))


def interleaved(runs: dict, repeats: int, alternate: bool = False) -> tuple:
    """Each run once (warm-up; its output kept), then ``repeats`` rounds of all, interleaved
    (with ``alternate``, every other round in the reverse order, so that no run always
    follows the same one): (medians, all times, the warm-up outputs)."""
    outputs = {k: fn() for k, fn in runs.items()}
    times = {k: [] for k in runs}
    order = list(runs)
    for round_ in range(repeats):
        for k in (order[::-1] if alternate and round_ % 2 else order):
            times[k].append(timed(runs[k])[0])
    return {k: float(np.median(v)) for k, v in times.items()}, times, outputs


def paired_ratio(base: list, other: list, level: float = 0.9, draws: int = 2000, seed: int = 0) -> dict:
    """How many times faster ``other`` is than ``base``, from the two runs' times round by
    round (`interleaved`'s): each round's ratio base / other, their median, and a
    bootstrap interval at ``level`` of that median (the rounds drawn with replacement, a
    fixed seed): where the interval's low end is at least 1, ``other`` was no slower in
    these rounds beyond the host's spread."""
    ratios = np.asarray(base, float) / np.asarray(other, float)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(ratios, (draws, ratios.size)), axis=1)
    low, high = np.quantile(medians, [(1 - level) / 2, (1 + level) / 2])
    return {"ratios": [float(r) for r in ratios], "median": float(np.median(ratios)),
            "interval": [float(low), float(high)], "level": level}
