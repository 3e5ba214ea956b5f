"""`clgrid tune`: measure a strategy's parameter space on the device in hand.

Any gridding method (``atomic``, ``tiled``, ...) or degridding method
(``degrid-gather``, ... as `clgrid bench` names them) can be tuned, and the imaging
operator's strategies (``bins``, ``points``, ``degrid_points``, ``rows_stacked``:
`tune_imaging`, timed on its spread or interpolation of every w-plane).  Candidates come
from ``[tune.<section>]`` in clgrid/platforms/generic.toml, pruned by simple rules (a
work-group shape the strategy can launch, a multiple of the device's SIMD width and
within its limit; atomic paths and sub-groups the device has).  Each candidate, and
the table's default for the device, is timed by `clgrid.tools.bench.run_benchmark` after a
warm-up, and checked against the float64 reference on a few visibilities; one that
fails, or is less accurate than the default and the precision's bound, is skipped and
reported.  The winner is checked again on more visibilities before it is saved to the
user's tuning file, which later runs pick up (see `clgrid.device.tuning`).
"""

from __future__ import annotations

import itertools
import re
import sys
import tomllib
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from ..device.atomics import atomic_unavailable
from .bench import DEGRID_PREFIX, run_benchmark
from ..device.runtime import device_facts, get_queue
from ..strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, IMAGING
from ..device.tuning import TuningTableError, format_entry, resolve_tuning, schema, tune_space, user_tuning_path

__all__ = ["TuneResult", "Timing", "candidates", "tune", "save_user_entry", "strategy_values", "method_of",
           "imaging_candidates", "imaging_section", "tune_imaging"]

# SIMD width to prune work-groups to, by device type (NVIDIA warps, AMD wavefronts).
SIMD_WIDTH = {"nvidia": 32, "amd": 64}
# Relative error a candidate may have against the float64 reference (or the default's, if larger).
ERROR_BOUND = {"single": 1e-5, "double": 1e-12}
# Visibilities each candidate is checked on; the winner is checked on WINNER_CHECK.
CANDIDATE_CHECK, WINNER_CHECK = 2000, 20000


@dataclass
class Timing:
    """Repeated device times of one parameter set (seconds), or why it was skipped."""

    params: dict
    median: float | None = None
    low: float | None = None
    high: float | None = None
    error: float | None = None
    reason: str = ""

    def describe(self) -> str:
        """``median ms (min-max)`` of the repeats."""
        return f"{self.median * 1e3:.3f} ms ({self.low * 1e3:.3f}-{self.high * 1e3:.3f})"


@dataclass
class TuneResult:
    strategy: str              # the table section: "atomic", "degrid_gather", ...
    device: str
    best: dict                 # every parameter of the section (and [common]) for the winner
    best_seconds: float
    error: float
    timings: list = field(default_factory=list)   # Timing of each candidate
    default: Timing | None = None                  # the table's own values for the device

    @property
    def skipped(self) -> list:
        return [(t.params, t.reason) for t in self.timings if t.median is None]

    @property
    def winner(self) -> Timing:
        return min((t for t in self.timings if t.median is not None), key=lambda t: t.median)


def method_of(name: str) -> tuple:
    """``(bench method, table section, strategy class)`` for a method or section name:
    "atomic", "degrid-gather" and "degrid_gather" are all understood."""
    if name in GRIDDING_METHODS:
        return name, name, GRIDDING_METHODS[name]
    for method, cls in DEGRIDDING_METHODS.items():
        if name in (DEGRID_PREFIX + method, cls.name):
            return DEGRID_PREFIX + method, cls.name, cls
    known = list(GRIDDING_METHODS) + [DEGRID_PREFIX + m for m in DEGRIDDING_METHODS]
    raise ValueError(f"unknown method {name!r}; choose one of {known}")


def candidates(strategy: str, facts, space: dict | None = None) -> list[dict]:
    """The pruned parameter space for ``strategy`` (a method or section name) on a device."""
    _, section, cls = method_of(strategy)
    return _pruned(section, cls, facts, space)


def _pruned(section: str, cls, facts, space: dict | None) -> list[dict]:
    """Every combination of ``space`` (default: the section's [tune.*]) that ``cls`` can
    launch on the device: a work-group within its limit and a multiple of its SIMD width
    (or one work-item), atomic paths and sub-groups it has."""
    space = space if space is not None else tune_space(section)
    if not space:
        raise ValueError(f"no tuning space for {section!r}: add [tune.{section}] to clgrid/platforms/generic.toml")
    simd = next((w for k, w in SIMD_WIDTH.items() if k in facts.platform.lower()), 1)
    defaults = resolve_tuning(section, None, facts)
    keys = list(space)
    out = []
    for values in itertools.product(*(space[k] for k in keys)):
        c = dict(zip(keys, values))
        try:
            wg = int(np.prod(cls.work_group_shape({**defaults, **c})))
        except TuningTableError:   # a combination the strategy cannot launch
            continue
        if wg > facts.max_work_group_size or (wg % simd and wg > 1):   # FPGA tasks are one work-item
            continue
        if "atomic" in c and atomic_unavailable(c["atomic"], facts, double=False):
            continue
        if c.get("reduction") == "subgroup" and not facts.subgroups:
            continue
        out.append(c)
    return out


def _timing(workload, queue, method, precision, repeats, params, error_subset) -> Timing:
    run = run_benchmark(workload, device=queue, method=method, precision=precision, repeats=repeats,
                        error_subset=error_subset, tuning=params)
    if run.failed:
        return Timing(params or {}, reason=run.failed[:200])
    return Timing(params or {}, run.median_s, run.min_s, run.max_s, run.error)


def tune(workload, device=None, strategy: str = "atomic", space: dict | None = None,
         repeats: int = 3, precision: str = "single", progress: bool = True) -> TuneResult:
    """Time every candidate and the table's default on ``workload`` (a `clgrid.tools.bench.Workload`);
    return the best.  ``strategy`` is a gridding method, ``degrid-<method>`` or a section name."""
    method, section, _ = method_of(strategy)
    queue = get_queue(device)
    facts = device_facts(queue.device)
    cands = candidates(section, facts, space)
    default = _timing(workload, queue, method, precision, repeats, None, CANDIDATE_CHECK)
    bound = max(ERROR_BOUND[precision], 2 * (default.error or 0.0))
    timings = []
    for cand in tqdm(cands, desc=f"tune {section}", disable=not (progress and sys.stderr.isatty())):
        timing = _timing(workload, queue, method, precision, repeats, cand, CANDIDATE_CHECK)
        if timing.median is not None and not timing.error <= bound:
            timing = Timing(cand, reason=f"error {timing.error:.1e} against the reference > {bound:.1e}")
        timings.append(timing)
    timed = [t for t in timings if t.median is not None]
    if not timed:
        raise RuntimeError(f"every candidate failed on {facts.name}: {timings[0].reason if timings else 'none'}")
    best = min(timed, key=lambda t: t.median)
    check = _timing(workload, queue, method, precision, 1, best.params, WINNER_CHECK)
    if check.median is None or not check.error <= bound:
        raise RuntimeError(f"tuned {section} on {facts.name} is wrong: {check.reason or f'error {check.error:.2e}'}"
                           f" (bound {bound:.1e})")
    return TuneResult(section, facts.name, resolve_tuning(section, best.params, facts), best.median,
                      check.error, timings, default)


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


# -- the imaging operator's strategies (clgrid.imaging) ------------------------------------

def imaging_section(name: str) -> tuple:
    """``(spread label, direction, strategy class)`` of an imaging strategy's section
    (``bins``, ``points``, ``degrid_points``, ``rows_stacked``)."""
    for label, (spread, interp) in IMAGING.items():
        if name == spread.name:
            return label, "grid", spread
    for label, (spread, interp) in IMAGING.items():
        if name == interp.name:
            return label, "degrid", interp
    known = sorted({cls.name for pair in IMAGING.values() for cls in pair})
    raise ValueError(f"unknown imaging strategy {name!r}; choose one of {known}")


def imaging_candidates(section: str, facts, space: dict | None = None) -> list[dict]:
    """The pruned parameter space of an imaging strategy's section on a device."""
    return _pruned(section, imaging_section(section)[2], facts, space)


def tune_imaging(section: str, device=None, num_vis: int = 1_000_000, npix: int = 2048, epsilon: float = 1e-4,
                 space: dict | None = None, repeats: int = 3, precision: str = "single",
                 progress: bool = True) -> TuneResult:
    """Time every candidate of an imaging strategy's section, and the table's default, on
    MeerKAT tracks imaged with w (``num_vis`` visibilities, ``npix``^2, ``epsilon``): the
    device time of spreading, or interpolating, every w-plane once (median of
    ``repeats``); each candidate's image (or visibilities) checked against the default's."""
    import clgrid
    from .datasets import baselines, load_layout, simulate_uvw

    label, direction, _ = imaging_section(section)
    queue = get_queue(device)
    facts = device_facts(queue.device)
    layout = load_layout("meerkat")
    ntime = max(1, num_vis // baselines(layout)[0].size)
    uvw = simulate_uvw(layout, declination=-0.5, hour_angles=np.linspace(-np.pi / 3, np.pi / 3, ntime))
    uvw = uvw.reshape(-1, 3)[:num_vis]
    freq = np.array([1.4e9])
    pix = 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq[0] / 299792458.0)
    rng = np.random.default_rng(1)
    real, cplx = (np.float32, np.complex64) if precision == "single" else (np.float64, np.complex128)
    vis = (rng.normal(size=(len(uvw), 1)) + 1j * rng.normal(size=(len(uvw), 1))).astype(cplx)
    dirty = rng.normal(size=(npix, npix)).astype(real)

    def run(params):
        try:
            op = clgrid.WGridder(uvw, freq, npix, npix, pix, pix, epsilon, do_wgridding=True, precision=precision,
                                 device=queue, tuning={"spread": label, **(params or {})})
            result = op.vis2dirty(vis) if direction == "grid" else op.dirty2vis(dirty)
            times = [op.engine.stage_seconds(direction) for _ in range(repeats + 1)][1:]
        except Exception as exc:           # a candidate the device cannot build or run
            return Timing(params or {}, reason=str(exc)[:200]), None
        return Timing(params or {}, float(np.median(times)), min(times), max(times)), result

    default, reference = run(None)
    if default.median is None:
        raise RuntimeError(f"the table's {section} fails on {facts.name}: {default.reason}")
    default.error = 0.0
    bound = ERROR_BOUND[precision]
    timings = []
    for cand in tqdm(imaging_candidates(section, facts, space), desc=f"tune {section}",
                     disable=not (progress and sys.stderr.isatty())):
        timing, result = run(cand)
        if timing.median is not None:
            timing.error = float(np.linalg.norm(result - reference) / np.linalg.norm(reference))
            if not timing.error <= bound:
                timing = Timing(cand, reason=f"error {timing.error:.1e} against the default's > {bound:.1e}")
        timings.append(timing)
    timed = [t for t in timings if t.median is not None]
    if not timed:
        raise RuntimeError(f"every candidate failed on {facts.name}: {timings[0].reason if timings else 'none'}")
    best = min(timed, key=lambda t: t.median)
    return TuneResult(section, facts.name, resolve_tuning(section, best.params, facts), best.median, best.error,
                      timings, default)
