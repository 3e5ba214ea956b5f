"""The FPGA kernels emulated here: on PoCL against the references, under Oclgrind for
memory errors, and through the offline flow (emit, compile, load with binary=)."""

import json
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.device import binaries
from clgrid.tools import cli
from clgrid.errors import BinaryMismatchError, DeviceCapabilityError
from clgrid.tools.oclgrind import run_under_oclgrind

from conftest import relative_error
from fpga_case import CELL, DEGRID_TUNING, GRID_TUNING, N, direct_degrid, random_inputs, small_stack

TOLERANCE = {"single": 1e-5, "double": 1e-12}


@pytest.fixture(scope="module")
def stack():
    return small_stack()


def fpga_gridder(queue, stack, **kwargs):
    return clgrid.Gridder(N, CELL, stack, method="fpga", device=queue, on_dropped="raise",
                          **{"tuning": GRID_TUNING, **kwargs})


def fpga_degridder(queue, stack, **kwargs):
    return clgrid.Degridder(N, CELL, stack, method="fpga", device=queue, on_dropped="raise",
                            **{"tuning": DEGRID_TUNING, **kwargs})


def poison(queue, buffer, real_dtype):
    """Fill a device buffer with NaN, so a cell or visibility the kernel misses shows up."""
    cl.enqueue_fill_buffer(queue, buffer, np.array([np.nan], real_dtype), 0, buffer.size).wait()


def degrid_poisoned(degridder, grid, uvw):
    """Degrid into an output buffer filled with NaN first."""
    prepared = degridder.prepare(uvw, grid.shape[0])
    poison(degridder.queue, prepared.device_plan.vis, degridder.strategy.real_dtype)
    loaded = degridder.load_grid(grid)[2]
    return degridder.fetch(prepared, degridder.execute(prepared, wait_for=[loaded]))


@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("npol", [1, 4])
@pytest.mark.parametrize("tuning", [GRID_TUNING, {"tile": 13, "unroll_u": 3, "banks": 3},
                                    {"tile": 64, "unroll_u": 1, "banks": 1}])
def test_fpga_gridder_matches_reference(queue, rng, stack, precision, npol, tuning):
    uvw, vis, _ = random_inputs(rng, 300, npol, stack)
    weights = rng.uniform(0.1, 3.0, vis.shape)
    gridder = fpga_gridder(queue, stack, precision=precision, tuning=tuning)
    poison(queue, gridder.grid_buffer(npol), gridder.strategy.real_dtype)
    side = gridder.strategy.padded_side
    need = gridder.strategy.on_chip_tiles() * npol * side ** 2 * np.dtype(gridder.strategy.complex_dtype).itemsize
    if need > gridder.strategy.facts.local_memory:   # tile 64, 4 pols, double: 342 KiB (Intel's CPU: 256)
        with pytest.raises(clgrid.DeviceCapabilityError, match="lower the tuning parameter 'tile'"):
            gridder.grid(uvw, vis, weights=weights)
        return
    out, report = gridder.grid(uvw, vis, weights=weights, return_report=True)
    ref = clgrid.reference.grid(uvw, vis, N, CELL, stack, weights=weights)
    assert np.all(np.isfinite(out)) and out.shape == (npol, N, N)
    assert relative_error(out, ref) <= TOLERANCE[precision]
    assert report["gridded"] == 300 and report["method"] == "fpga"


@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("npol", [1, 2])
@pytest.mark.parametrize("tuning", [DEGRID_TUNING, {"tile": 13, "unroll_u": 3, "shift_depth": 1}])
def test_fpga_degridder_matches_direct_loop(queue, rng, stack, precision, npol, tuning):
    uvw, _, grid = random_inputs(rng, 200, npol, stack)
    got = degrid_poisoned(fpga_degridder(queue, stack, precision=precision, tuning=tuning), grid, uvw)
    assert got.shape == (200, npol) and np.all(np.isfinite(got))
    assert relative_error(got, direct_degrid(uvw, grid, stack)) <= TOLERANCE[precision]


def test_fpga_degridder_is_the_adjoint_of_the_gridder(queue, rng, stack):
    uvw, vis, grid = random_inputs(rng, 300, 2, stack)
    flags = rng.random(vis.shape) < 0.2
    degridded = fpga_degridder(queue, stack, precision="double").degrid(grid, uvw, flags=flags)
    assert not np.any(degridded[flags])
    gridded = fpga_gridder(queue, stack, precision="double").grid(uvw, vis, flags=flags)
    assert np.vdot(degridded, vis) == pytest.approx(np.vdot(grid, gridded), rel=1e-12)


@pytest.mark.oclgrind
def test_oclgrind_finds_no_memory_errors_races_or_uninitialised_reads(rng, stack, tmp_path):
    seed = int(rng.integers(1 << 31))
    case_script = Path(__file__).with_name("fpga_case.py")
    run = run_under_oclgrind([sys.executable, case_script, tmp_path / "case.npz", "--seed", seed],
                             timeout=300)
    assert run.returncode == 0, run.output[-3000:]
    assert run.diagnostics == []
    case = np.load(tmp_path / "case.npz")
    ref = clgrid.reference.grid(case["uvw"], case["vis"], N, CELL, stack)
    assert relative_error(case["gridded"], ref) <= 1e-5
    assert relative_error(case["degridded"], direct_degrid(case["uvw"], case["grid"], stack)) <= 1e-5


def emit(queue, tmp_path, name, *extra):
    """`clgrid emit` for the device under test with the test tuning; returns the .cl path."""
    out = tmp_path / f"{name}.cl"
    device = f"{queue.device.platform.name} {queue.device.name}"
    assert cli.main(["emit", "--device", device, "--grid-size", str(N), "--oversample", "4",
                     "--max-support", "5", "-o", str(out), *extra]) == 0
    return out


@pytest.mark.parametrize("degrid", [False, True])
def test_emitted_source_compiles_on_pocl_and_describes_itself(queue, tmp_path, degrid):
    tuning = DEGRID_TUNING if degrid else GRID_TUNING
    out = emit(queue, tmp_path, "kernel", *(["--degrid"] if degrid else []), "--npol", "2",
               *[f"--tuning={k}={v}" for k, v in tuning.items()])
    cl.Program(queue.context, out.read_text()).build()
    described = json.loads(out.with_suffix(".json").read_text())
    assert described["strategy"] == ("degrid_fpga" if degrid else "fpga")
    assert described["precision"] == "single" and described["clgrid_version"] == clgrid.__version__
    assert {"npol": 2, "oversample": 4, "grid_size": N, "max_support": 5, **tuning}.items() \
        <= described["parameters"].items()
    assert described["aoc_command"].endswith("kernel.cl -o kernel.aocx")


def test_offline_flow_emit_compile_load(queue, rng, stack, tmp_path):
    """emit -> an offline compiler (PoCL standing in for aoc) -> Gridder(binary=...)."""
    out = emit(queue, tmp_path, "grid", *[f"--tuning={k}={v}" for k, v in GRID_TUNING.items()])
    program = cl.Program(queue.context, out.read_text()).build()
    (tmp_path / "grid.aocx").write_bytes(program.get_info(cl.program_info.BINARIES)[0])
    uvw, vis, _ = random_inputs(rng, 300, 1, stack)
    loaded = fpga_gridder(queue, stack, binary=tmp_path / "grid.aocx").grid(uvw, vis)
    assert relative_error(loaded, clgrid.reference.grid(uvw, vis, N, CELL, stack)) <= 1e-5


def test_saved_binaries_give_the_same_results(queue, rng, stack, tmp_path):
    uvw, vis, grid = random_inputs(rng, 300, 2, stack)
    gridder = fpga_gridder(queue, stack)
    built = gridder.grid(uvw, vis)
    path = gridder.strategy.save_binary(2, tmp_path / "grid.bin")
    assert json.loads(path.with_suffix(".json").read_text())["parameters"]["npol"] == 2
    np.testing.assert_array_equal(fpga_gridder(queue, stack, binary=path).grid(uvw, vis), built)
    degridder = fpga_degridder(queue, stack)
    built = degridder.degrid(grid, uvw)
    path = degridder.strategy.save_binary(2, tmp_path / "degrid.bin")
    np.testing.assert_array_equal(fpga_degridder(queue, stack, binary=path).degrid(grid, uvw), built)


def test_mismatched_binaries_are_refused_with_the_difference(queue, rng, stack, tmp_path):
    uvw, vis, _ = random_inputs(rng, 50, 1, stack)
    path = fpga_gridder(queue, stack).strategy.save_binary(1, tmp_path / "grid.bin")
    with pytest.raises(BinaryMismatchError, match=r"tile=8 \(this call: 16\)"):
        fpga_gridder(queue, stack, tuning={**GRID_TUNING, "tile": 16}, binary=path).grid(uvw, vis)
    with pytest.raises(BinaryMismatchError, match=r"npol=1 \(this call: 2\)"):
        fpga_gridder(queue, stack, binary=path).grid(uvw, np.repeat(vis, 2, axis=1))
    with pytest.raises(BinaryMismatchError, match=r"double=False \(this call: True\)"):
        fpga_gridder(queue, stack, precision="double", binary=path).grid(uvw, vis)
    with pytest.raises(BinaryMismatchError, match="strategy 'fpga' \\(this call: 'atomic'\\)"):
        clgrid.Gridder(N, CELL, stack, method="atomic", device=queue, binary=path).grid(uvw, vis)
    other_stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=0, num_planes=1,
                                                  oversample=4, max_support=3)
    with pytest.raises(BinaryMismatchError, match=r"max_support=5 \(this call: 3\)"):
        fpga_gridder(queue, other_stack, binary=path).grid(uvw, vis)
    path.with_suffix(".json").unlink()
    with pytest.raises(BinaryMismatchError, match="grid.json is missing"):
        fpga_gridder(queue, stack, binary=path).grid(uvw, vis)


def test_fpga_double_precision_needs_fp64_but_no_atomics(queue, stack):
    facts = clgrid.device.runtime.device_facts(queue.device)
    no_atomics = type(facts)(**{**facts.__dict__, "int64_atomics": False})
    clgrid.strategies.base.check_precision("double", no_atomics, atomics=False)
    with pytest.raises(DeviceCapabilityError, match="cl_khr_int64_base_atomics"):
        clgrid.strategies.base.check_precision("double", no_atomics)
    assert clgrid.strategies.fpga.FpgaGridding.atomics is False


def test_tile_too_large_for_local_memory_is_refused(queue, rng, stack):
    uvw, vis, _ = random_inputs(rng, 10, 1, stack)
    gridder = fpga_gridder(queue, stack, tuning={"tile": 4096, "banks": 4})
    with pytest.raises(DeviceCapabilityError, match="lower the tuning parameter 'tile'"):
        gridder.grid(uvw, vis)
    with pytest.raises(ValueError, match="'banks' of 'fpga' must be >= 1"):
        fpga_gridder(queue, stack, tuning={"banks": 0})


EMULATOR_PLATFORM = "Intel(R) FPGA Emulation Platform for OpenCL(TM)"


@pytest.mark.parametrize("target, platform, options, tile", [
    ("a10gx : Arria 10 Reference Platform", binaries.INTEL_FPGA_PLATFORM, "-board=a10gx -fp-relaxed -fpc", 64),
    ("s10gx : Stratix 10 Reference Platform", binaries.INTEL_FPGA_PLATFORM, "-board=s10gx", 128),
    ("Intel(R) FPGA Emulation Device", EMULATOR_PLATFORM, "-march=emulator", 16),
])
def test_emit_for_fpga_boards_takes_their_table_entries(tmp_path, target, platform, options, tile):
    out = tmp_path / "grid.cl"
    assert cli.main(["emit", "--target", target, "--platform", platform, "--grid-size", "4096",
                     "--max-support", "16", "-o", str(out)]) == 0
    described = json.loads(out.with_suffix(".json").read_text())
    assert described["aoc_command"].startswith(f"aoc {options}")
    assert described["parameters"]["tile"] == tile
    assert "max_global_work_dim(0)" in out.read_text() and "atomic_add" not in out.read_text()
