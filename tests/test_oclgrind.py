"""Every gridding and degridding strategy under Oclgrind on a tiny case: no out-of-bounds
access, no data race, no uninitialised read where Oclgrind can check it, and a result
equal to the float64 reference, which proves the kernels really ran (tests/oclgrind_cases.py)."""

import numpy as np
import pytest

import clgrid
from clgrid.strategies import DEGRIDDING_METHODS, GRIDDING_METHODS

from conftest import relative_error
from fpga_case import CELL, N, small_stack
from oclgrind_cases import run_case

# "xchg": every access to the grid atomic (the "cas" loop's first plain read is reported
# as a race, a benign one).  Small work-groups keep the simulation short.
GRID_TUNING = {
    "atomic": {"atomic": "xchg"},
    "texture": {"atomic": "xchg", "sampler": "software"},
    "moving_window": {"atomic": "xchg"},
    "texture_moving_window": {"atomic": "xchg", "sampler": "software"},
    "tiled": None,       # tests/test_gridder_tiled.py runs it under Oclgrind in every mapping
    "fpga": None,        # tests/test_fpga.py runs it under Oclgrind
    "rows": {"vector_access": "cast"},   # what PoCL runs (the table's "vload" runs on Intel's CPU runtime)
}
DEGRID_TUNING = {
    "gather": {},
    "moving_window": {"atomic": "xchg"},
    "texture": {"sampler": "software"},
    "fpga": None,        # tests/test_fpga.py
}
# Where a strategy zeroes a buffer with clEnqueueFillBuffer on the device, Oclgrind 21.10
# takes the zeros as uninitialised: those run with the race check only.
FILLS_ON_DEVICE = {("degrid", "moving_window")}
# Strategies that read the plan straight from the planning kernels' compaction (no host
# arrangement; the moving window's chunk kernels run clean on an uploaded plan:
# tests/test_track_chunks.py): Oclgrind 21.10 takes the visibilities gathered through those indices as
# uninitialised in the gridding kernel, though the gather's own stores are not reported and
# the grid matches the reference (and a gather from host-made indices is clean). Race and
# bounds checks only, until that is understood.
PLANNED_ON_DEVICE = {("grid", "atomic"), ("grid", "moving_window")}
# Kernels whose LLVM code holds a `freeze` instruction, on which Oclgrind 21.10's
# uninitialised-value plugin aborts (and still exits 0): oclgrind_cases.run_case sees
# it and reruns them with the race check alone.  Asserted, so a change shows up (the
# moving window's gridding kernel has one too: texture_moving_window runs it).
FREEZES = {("grid", "texture_moving_window"), ("degrid", "gather"), ("degrid", "texture")}


def test_every_strategy_is_listed():
    assert set(GRID_TUNING) == set(GRIDDING_METHODS)
    assert set(DEGRID_TUNING) == set(DEGRIDDING_METHODS)


CASES = [("grid", m) for m, t in GRID_TUNING.items() if t is not None] + \
        [("degrid", m) for m, t in DEGRID_TUNING.items() if t is not None]


@pytest.mark.oclgrind
@pytest.mark.parametrize("direction,method", CASES, ids=[f"{d}-{m}" for d, m in CASES])
def test_strategy_under_oclgrind(rng, tmp_path, direction, method):
    tuning = (GRID_TUNING if direction == "grid" else DEGRID_TUNING)[method]
    races_only = (direction, method) in FREEZES | FILLS_ON_DEVICE | PLANNED_ON_DEVICE
    checks = ("--data-races",) if (direction, method) in FILLS_ON_DEVICE | PLANNED_ON_DEVICE \
        else ("--data-races", "--uninitialized")
    out = tmp_path / "case.npz"
    run, used = run_case("oclgrind_case.py", out, "--seed", int(rng.integers(1 << 31)), "--method", method,
                         "--num-vis", 24, "--tuning", repr(tuning), *(["--degrid"] if direction == "degrid" else []),
                         checks=checks)
    print(f"{direction} {method}: Oclgrind checks {used}")
    assert used == (("--data-races",) if races_only else ("--data-races", "--uninitialized"))
    assert run.returncode == 0, run.output[-3000:]
    assert run.diagnostics == [], "\n\n".join(run.diagnostics[:3])
    case = np.load(out)
    stack = small_stack()
    interpolation = "linear" if method.startswith("texture") else "nearest"
    if direction == "grid":
        ref = clgrid.reference.grid(case["uvw"], case["vis"], N, CELL, stack, interpolation=interpolation)
    else:
        ref = clgrid.reference.degrid(case["grid"], case["uvw"], N, CELL, stack, interpolation=interpolation)
    assert relative_error(case["result"], ref) <= 1e-5, "Oclgrind did not run the kernel to its end"
