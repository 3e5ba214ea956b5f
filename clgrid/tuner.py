"""`clgrid tune`: measure a strategy's parameter space on the device in hand.

Candidates come from ``[tune.<strategy>]`` in platforms/generic.toml, pruned by
simple rules (a work-group shape the strategy can launch, a multiple of the
device's SIMD width and within its limit; atomic paths the device has).  Each candidate is timed after a warm-up;
one that fails to build or exceeds a resource is skipped and reported.  The winner
is checked against the float64 reference before it is saved to the user's tuning
file, which later runs pick up (see `clgrid.tuning`).
"""

from __future__ import annotations

import itertools
import re
import sys
import tomllib
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from . import reference
from .atomics import atomic_unavailable
from .bench import device_times
from .gridder import Gridder
from .runtime import device_facts, get_queue
from .strategies import GRIDDING_METHODS, spelling
from .tuning import TuningTableError, format_entry, resolve_tuning, schema, tune_space, user_tuning_path

__all__ = ["TuneResult", "candidates", "tune", "save_user_entry", "strategy_values"]

# SIMD width to prune work-groups to, by device type (NVIDIA warps, AMD wavefronts).
SIMD_WIDTH = {"nvidia": 32, "amd": 64}


@dataclass
class TuneResult:
    strategy: str
    device: str
    best: dict
    best_seconds: float
    error: float
    timings: list = field(default_factory=list)   # (params, seconds or None, reason)

    @property
    def skipped(self) -> list:
        return [(p, why) for p, t, why in self.timings if t is None]


def candidates(strategy: str, facts, space: dict | None = None) -> list[dict]:
    """The pruned parameter space for ``strategy`` on a device."""
    space = space if space is not None else tune_space(strategy)
    if not space:
        raise ValueError(f"no tuning space for {strategy!r} in platforms/generic.toml")
    simd = next((w for k, w in SIMD_WIDTH.items() if k in facts.platform.lower()), 1)
    defaults = resolve_tuning(strategy, None, facts)
    keys = list(space)
    out = []
    for values in itertools.product(*(space[k] for k in keys)):
        c = dict(zip(keys, values))
        try:
            wg = int(np.prod(GRIDDING_METHODS[strategy].work_group_shape({**defaults, **c})))
        except TuningTableError:   # a combination the strategy cannot launch
            continue
        if wg > facts.max_work_group_size or wg % simd:
            continue
        if "atomic" in c and atomic_unavailable(c["atomic"], facts, double=False):
            continue
        out.append(c)
    return out


def tune(workload, device=None, strategy: str = "atomic", space: dict | None = None,
         repeats: int = 3, precision: str = "single", progress: bool = True) -> TuneResult:
    """Time every candidate on ``workload`` (a `clgrid.bench.Workload`); return the best."""
    queue = get_queue(device)
    facts = device_facts(queue.device)
    cands = candidates(strategy, facts, space)
    timings = []
    for cand in tqdm(cands, desc=f"tune {strategy}", disable=not (progress and sys.stderr.isatty())):
        try:
            gridder = Gridder(workload.grid_size, workload.cell_size, workload.kernels, **spelling("grid", strategy),
                              device=queue, precision=precision, tuning=cand, on_dropped="ignore")
            prepared = gridder.prepare(workload.uvw, workload.vis)
            timings.append((cand, float(np.median(device_times(gridder, prepared, repeats))), ""))
        except Exception as exc:  # a candidate the device refuses is skipped, not fatal
            timings.append((cand, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"))
    timed = [(c, t) for c, t, _ in timings if t is not None]
    if not timed:
        raise RuntimeError(f"every candidate failed on {facts.name}: {timings[0][2] if timings else 'none'}")
    best, best_t = min(timed, key=lambda ct: ct[1])
    gridder = Gridder(workload.grid_size, workload.cell_size, workload.kernels, **spelling("grid", strategy),
                      device=queue, precision=precision, tuning=best, on_dropped="ignore")
    sub = slice(0, min(20000, workload.uvw.shape[0]))
    got = gridder.grid(workload.uvw[sub], workload.vis[sub])
    ref = reference.grid(workload.uvw[sub], workload.vis[sub], workload.grid_size, workload.cell_size,
                         workload.kernels, on_dropped="ignore")
    error = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    limit = 1e-5 if precision == "single" else 1e-12
    if not error <= limit:
        raise RuntimeError(f"tuned {strategy} on {facts.name} is wrong: error {error:.2e} > {limit}")
    return TuneResult(strategy, facts.name, resolve_tuning(strategy, best, facts), best_t, error, timings)


def strategy_values(result: TuneResult) -> dict:
    """The winner's values of the strategy's own section (not ``[common]``), for a table entry."""
    common = schema().get("common", {})
    return {k: v for k, v in result.best.items() if k not in common}


def device_match(facts) -> dict:
    """Match keys that pick out exactly this device type in a tuning file."""
    return {"platform": facts.platform, "name": "^" + re.escape(facts.name) + "$"}


def save_user_entry(result: TuneResult, facts, path=None) -> str:
    """Add or replace this device's entry for the strategy in the user tuning file."""
    path = path or user_tuning_path()
    match = device_match(facts)
    params = strategy_values(result)
    kept = []
    if path.is_file():
        with open(path, "rb") as f:
            data = tomllib.load(f)
        for entry in data.get("devices", []):
            same = all(entry.get(k) == v for k, v in match.items())
            if same:
                entry.pop(result.strategy, None)
            sections = {k: v for k, v in entry.items() if isinstance(v, dict)}
            if sections:
                m = {k: v for k, v in entry.items() if not isinstance(v, dict)}
                kept.extend(format_entry(m, s, p) for s, p in sections.items())
    comment = (f"clgrid tune: {result.strategy} on {facts.name}, median {result.best_seconds * 1e3:.3f} ms, "
               f"error {result.error:.1e}")
    kept.append(format_entry(match, result.strategy, params, comment))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(kept))
    return str(path)
