"""`clgrid emit` writes, for every method and direction, the very source the strategy builds."""

import pytest

import clgrid
from clgrid.device.binaries import emit_program
from clgrid.device.runtime import device_facts
from clgrid.strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, spelling

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
