"""`clgrid emit` writes, for every method and direction, the very source the strategy builds."""

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.device.binaries import emit_program
from clgrid.device.runtime import device_facts
from clgrid.strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, IMAGING, spelling

N, CELL = 64, 4e-3


def table_stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=50, num_planes=3, oversample=4,
                                           max_support=5)


def analytic_stack():
    return clgrid.KernelStack.analytic(1e-5)


@pytest.mark.parametrize("kind,method,make_stack",
                         [("grid", m, table_stack) for m in GRIDDING_METHODS]
                         + [("degrid", m, table_stack) for m in DEGRIDDING_METHODS]
                         + [("grid", m, analytic_stack) for m, c in GRIDDING_METHODS.items() if c.analytic_source]
                         + [("degrid", m, analytic_stack) for m, c in DEGRIDDING_METHODS.items() if c.analytic_source])
def test_emitted_source_is_what_the_strategy_builds(queue, tmp_path, kind, method, make_stack):
    stack = make_stack()
    strategy_class = (GRIDDING_METHODS if kind == "grid" else DEGRIDDING_METHODS)[method]
    operator = (clgrid.Gridder if kind == "grid" else clgrid.Degridder)(N, CELL, stack, **spelling(kind, method),
                                                                        device=queue)
    source, _ = emit_program(strategy_class, device_facts(queue.device), "single", 2, N, stack,
                             tmp_path / "p.cl", operator.strategy.tuning)
    assert source.read_text() == operator.strategy._source(2)[0]
    assert ("ES_COEF" in source.read_text()) == (make_stack is analytic_stack)


def test_emit_command_for_an_analytic_kernel(tmp_path, device_name):
    from clgrid.tools.cli import main

    out = tmp_path / "tiled.cl"
    assert main(["emit", "--method", "tiled", "--grid-size", "64", "--epsilon", "1e-4", "--device", device_name,
                 "-o", str(out)]) == 0
    assert "ES_COEF" in out.read_text()
    assert main(["emit", "--method", "moving_window", "--grid-size", "64", "--epsilon", "1e-4",
                 "--device", device_name, "-o", str(out)]) == 2     # reads tables: refused by name


@pytest.mark.parametrize("spread", sorted(IMAGING))
@pytest.mark.parametrize("degrid", [False, True])
def test_emitted_imaging_source_is_what_the_operator_builds(queue, tmp_path, rng, spread, degrid):
    """The imaging operator's spread and interpolation are strategies like the others:
    `clgrid emit --imaging` writes the very source `vis2dirty` builds, and it builds."""
    from clgrid.tools.cli import main

    nrow, freq = 300, np.array([1.4e9])
    uvw = rng.normal(scale=200.0, size=(nrow, 3))
    op = clgrid.WGridder(uvw, freq, 64, 64, 2e-4, 2e-4, 1e-4, do_wgridding=True, device=queue,
                         precision="single", tuning={"spread": spread})
    strategy = op.engine.interpolator if degrid else op.engine.spreader
    source, _ = emit_program(type(strategy), device_facts(queue.device), "single", 1, strategy.grid_size,
                             strategy.kernels, tmp_path / "p.cl", strategy.tuning)
    assert source.read_text() == strategy._source(1)[0]
    out = tmp_path / "cmd.cl"
    args = ["emit", "--imaging", "--method", spread, "--grid-size", "64", "--epsilon", "1e-4", "--w-planes", "9",
            "--device", f"{queue.device.platform.name} {queue.device.name}", "-o", str(out)]
    assert main(args + (["--degrid"] if degrid else [])) == 0
    assert "ES_COEF" in out.read_text()
    cl.Program(queue.context, out.read_text()).build()


@pytest.mark.parametrize("degrid", [False, True])
def test_emitted_rows_source_in_double_keeps_float_taps_as_the_operator_does(queue, tmp_path, rng, degrid):
    """In double precision the imaging operator's rows spread keeps its kernel values in
    float where epsilon allows (`Strategy.keeps_float_taps`); `emit_program` with that
    choice writes the very source the operator builds, and `clgrid emit --imaging` makes
    the same choice (its description says ``tap_single``)."""
    import json

    from clgrid.sources.accuracy import choose_kernel
    from clgrid.tools.cli import main

    nrow, freq = 300, np.array([1.4e9])
    uvw = rng.normal(scale=200.0, size=(nrow, 3))
    op = clgrid.WGridder(uvw, freq, 64, 64, 2e-4, 2e-4, 1e-4, do_wgridding=True, device=queue,
                         precision="double", tuning={"spread": "rows"})
    strategy = op.engine.interpolator if degrid else op.engine.spreader
    assert strategy.tap_single                                   # (1e-4 in double: float values allowed)
    assert type(strategy).keeps_float_taps(op.geometry.kernel, "double", 3, 1e-4)
    source, _ = emit_program(type(strategy), device_facts(queue.device), "double", 1, strategy.grid_size,
                             strategy.kernels, tmp_path / "p.cl", strategy.tuning, float_taps=True)
    assert source.read_text() == strategy._source(1)[0]
    choice = choose_kernel(1e-12, "double", 3)
    assert not type(strategy).keeps_float_taps(choice, "double", 3, 1e-12)    # too fine for float values
    out = tmp_path / "cmd.cl"
    args = ["emit", "--imaging", "--method", "rows", "--precision", "double", "--grid-size", "64",
            "--epsilon", "1e-4", "--w-planes", "9", "--device", f"{queue.device.platform.name} {queue.device.name}",
            "-o", str(out)]
    assert main(args + (["--degrid"] if degrid else [])) == 0
    described = json.loads(out.with_suffix(".json").read_text())
    assert described["parameters"]["tap_single"] is True and described["parameters"]["value_single"] is True
    cl.Program(queue.context, out.read_text()).build()
