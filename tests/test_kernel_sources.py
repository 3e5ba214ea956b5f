"""Kernel sources as a protocol on the device: the W-projection work distributions include
the source their strategy's `KernelSource` names (``source_table.cl``, ``source_texture.cl``,
``source_analytic.cl``) and never branch on which one it is."""

from pathlib import Path

import jinja2
import jinja2.nodes
import pytest

import clgrid
from clgrid.strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, spelling

TEMPLATES = Path(clgrid.__file__).with_name("cl_kernels")
DISTRIBUTIONS = ("grid_atomic.cl", "degrid_gather.cl", "grid_tiled.cl", "grid_moving_window.cl")
# template variables that would say which source a distribution runs with
SOURCE_KINDS = {"texture", "analytic", "evaluated", "interpolation", "sampler", "table_layout"}
N, CELL = 64, 4e-3


def table_stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=50, num_planes=3, oversample=4,
                                           max_support=5)


@pytest.mark.parametrize("template", DISTRIBUTIONS)
def test_distribution_templates_do_not_branch_on_the_source(template):
    """No template variable naming a source's kind appears in the distribution, and the
    source comes in through one include chosen by ``source``."""
    ast = jinja2.Environment().parse((TEMPLATES / template).read_text())
    kinds = sorted({n.name for n in ast.find_all(jinja2.nodes.Name)} & SOURCE_KINDS)
    assert kinds == [], f"{template} asks which kernel source it runs with: {kinds}"
    includes = [n.template for n in ast.find_all(jinja2.nodes.Include)]
    assert [t.name for t in includes if isinstance(t, jinja2.nodes.Name)] == ["source"]
    assert [n.name for n in ast.find_all(jinja2.nodes.Name)].count("source") == 1, \
        f"{template} uses the source's name beyond including it"
    named = {t.value for t in includes if isinstance(t, jinja2.nodes.Const)}
    assert not named & {"texture_sample.cl", "es_horner.cl", "kernel_taps.cl"}, named


def test_sources_name_their_includes():
    stack = table_stack()
    assert stack.device_source("nearest") == "source_table.cl"
    assert stack.device_source("linear") == "source_texture.cl"
    analytic = clgrid.KernelStack.analytic(1e-5)
    assert analytic.device_source() == "source_analytic.cl"
    with pytest.raises(ValueError, match="interpolation='linear'"):
        analytic.device_source("linear")
    with pytest.raises(ValueError, match="interpolation must be one of"):
        stack.device_source("cubic")
    for name in ("source_table.cl", "source_texture.cl", "source_analytic.cl"):
        assert (TEMPLATES / name).is_file()


CASES = ([("grid", m, "table") for m, c in GRIDDING_METHODS.items() if c.template in DISTRIBUTIONS]
         + [("degrid", m, "table") for m, c in DEGRIDDING_METHODS.items() if c.template in DISTRIBUTIONS]
         + [("grid", m, "analytic") for m, c in GRIDDING_METHODS.items()
            if c.template in DISTRIBUTIONS and c.analytic_source]
         + [("degrid", m, "analytic") for m, c in DEGRIDDING_METHODS.items()
            if c.template in DISTRIBUTIONS and c.analytic_source])


@pytest.mark.parametrize("kind,method,source", CASES, ids=[f"{k}-{m}-{s}" for k, m, s in CASES])
def test_every_method_builds_with_every_source_it_reads(queue, kind, method, source):
    """Each (distribution, source) pair renders with the source its KernelSource names and
    builds on the device, its kernel taking the arguments the source passes."""
    stack = table_stack() if source == "table" else clgrid.KernelStack.analytic(1e-5)
    operator = (clgrid.Gridder if kind == "grid" else clgrid.Degridder)(N, CELL, stack, **spelling(kind, method),
                                                                        device=queue)
    strategy = operator.strategy
    params = strategy.template_params(1)
    assert params["source"] == stack.device_source(strategy.interpolation)
    kernel = strategy.kernel({"grid_atomic.cl": "grid_atomic", "degrid_gather.cl": "degrid_gather",
                              "grid_tiled.cl": "grid_tiles", "grid_moving_window.cl": "grid_moving_window"
                              }[strategy.template], 1)
    assert kernel.num_args > 0
