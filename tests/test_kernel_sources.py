"""Kernel sources as a protocol on the device: the work distributions include the source
their strategy's kernel source names (``source_table.cl``, ``source_texture.cl``,
``source_analytic.cl``, and the imaging operator's ``source_stacked.cl``) and never branch
on which one it is; the sources define the same names."""

from pathlib import Path

import re

import jinja2
import jinja2.nodes
import pytest

import clgrid
from clgrid.device.codegen import render
from clgrid.sources.analytic import StackedKernel
from clgrid.strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, spelling
from clgrid.strategies.points import PointDegridding, PointGridding

TEMPLATES = Path(clgrid.__file__).with_name("cl_kernels")
DISTRIBUTIONS = ("grid_atomic.cl", "degrid_gather.cl", "grid_tiled.cl", "grid_moving_window.cl", "points.cl")
# template variables that would say which source a distribution runs with
SOURCE_KINDS = {"texture", "analytic", "evaluated", "interpolation", "sampler", "table_layout", "stacked", "use_w",
                "es_width", "es_taps"}
# the names every source that serves the tiled distribution defines (source_table.cl's header)
TILE_NAMES = ("SOURCE_ARGS", "SOURCE_PARAMS", "SOURCE_PASS", "source_support", "source_footprint",
              "source_plane_weight", "source_conj", "tile_taps", "tile_taps_of", "tile_column", "TILE_LOCAL",
              "TILE_STAGE", "TILE_STORE", "tile_weight", "tile_weight_t", "tile_mad")
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
    # the source, and the plan it reads (grid_tiled.cl: W-projection's or the w-stacking one)
    assert [t.name for t in includes if isinstance(t, jinja2.nodes.Name) and t.name != "plan"] == ["source"]
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
    stacked = StackedKernel(7, 2.3, 4, True)
    assert stacked.device_source() == "source_stacked.cl"
    with pytest.raises(ValueError, match="no interpolation='linear'"):
        stacked.device_source("linear")
    for name in ("source_table.cl", "source_texture.cl", "source_analytic.cl", "source_stacked.cl"):
        assert (TEMPLATES / name).is_file()


@pytest.mark.parametrize("source,variables", [
    ("source_table.cl", {"table_layout": "u_rows", "oversample": 4}),
    ("source_analytic.cl", clgrid.KernelStack.analytic(1e-5).template_parameters()),
    ("source_stacked.cl", StackedKernel(7, 2.3, 4, True).template_parameters())])
def test_sources_of_the_tiled_distribution_define_the_same_names(source, variables):
    """Every source the tiled distribution reads (W-projection tables, the analytic kernel,
    the w-stacking kernel) defines its per-tile names, so grid_tiled.cl reads all three alike."""
    text = render(source, double=False, **variables)
    missing = [name for name in TILE_NAMES if not re.search(rf"(#define|typedef|inline)\b[^\n]*\b{name}\b", text)]
    assert missing == [], f"{source} lacks {missing}"


@pytest.mark.parametrize("cls,name", [(PointGridding, "spread"), (PointDegridding, "interp")])
def test_the_points_distribution_reads_the_stacked_source_by_the_common_names(queue, cls, name):
    """points.cl (the imaging operator's interpolation on GPUs) includes the plan and source
    its strategy names, and reads the per-point names source_table.cl's header lists."""
    strategy = cls(queue, (64, 48), StackedKernel(7, 2.3, 4, True), "single")
    params = strategy.template_params(1)
    assert params["source"] == "source_stacked.cl" and params["plan"] == "plan_stacked.cl"
    text = (TEMPLATES / "points.cl").read_text()
    for used in ("point_taps_of", "point_row", "point_weight_in_row", "source_footprint", "source_plane_weight"):
        assert used in text
    for private in ("es_taps", "plane_weight(f", "SUPPORT", "real4_t"):
        assert private not in text, private
    assert strategy.kernel(name, 1).num_args == 9


PROJECTION = {"grid_atomic.cl", "degrid_gather.cl", "grid_tiled.cl", "grid_moving_window.cl"}
CASES = ([("grid", m, "table") for m, c in GRIDDING_METHODS.items() if c.template in PROJECTION]
         + [("degrid", m, "table") for m, c in DEGRIDDING_METHODS.items() if c.template in PROJECTION]
         + [("grid", m, "analytic") for m, c in GRIDDING_METHODS.items()
            if c.template in PROJECTION and c.analytic_source]
         + [("degrid", m, "analytic") for m, c in DEGRIDDING_METHODS.items()
            if c.template in PROJECTION and c.analytic_source])


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


# the imaging operator's other templates over the w-stacking plan and source
STACKED_DISTRIBUTIONS = ("points.cl", "grid_bins.cl", "rows_stacked.cl", "fpga_stacked.cl")
# what source_stacked.cl (and es_horner.cl, which it includes) define beside the common names
STACKED_PRIVATE = ("es_taps", "es_piece", "ES_WIDTH", "ES_COEF", "plane_weight(f", "SUPPORT", "real4_t", "frac",
                   "SOURCE_DECL", ".u[", ".v[", "tile_taps_u", "tile_taps_v", "TILE_TAP_STRIDE")


def _without_comments(text):
    text = re.sub(r"\{#.*?#\}", "", text, flags=re.S)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


@pytest.mark.parametrize("template", STACKED_DISTRIBUTIONS)
def test_stacked_templates_read_the_source_only_through_the_common_names(template):
    """Every template over the w-stacking source includes the plan and source its strategy
    names (no named include of them) and reads the source only through the names the sources'
    headers list, never its own helpers (es_taps, plane_weight, SUPPORT, ...)."""
    text = (TEMPLATES / template).read_text()
    ast = jinja2.Environment().parse(text)
    includes = [n.template for n in ast.find_all(jinja2.nodes.Include)]
    assert sorted(t.name for t in includes if isinstance(t, jinja2.nodes.Name)) == ["plan", "source"]
    named = {t.value for t in includes if isinstance(t, jinja2.nodes.Const)}
    assert not named & {"source_stacked.cl", "plan_stacked.cl", "es_horner.cl"}, named
    code = _without_comments(text)
    used = [name for name in STACKED_PRIVATE if name in code]
    assert used == [], f"{template} reads source_stacked.cl's own helpers {used}"
    # every source name it does use is one source_stacked.cl defines
    source = render("source_stacked.cl", double=False, **StackedKernel(7, 2.3, 4, True).template_parameters())
    for name in set(re.findall(r"\b(?:source_\w+|point_\w+|tile_\w+|TILE_\w+|SOURCE_\w+|POINT_\w+)\b", code)):
        if name in {"tile", "tile_u", "tile_v"} or name.startswith(("TILE_U", "TILE_V")):
            continue
        assert re.search(rf"\b{name}\b", source), f"{template} uses {name}, which source_stacked.cl lacks"


def test_a_template_calling_a_source_helper_fails_the_rule():
    """The rule above catches a template that calls the stacked source's own helper."""
    code = _without_comments((TEMPLATES / "grid_bins.cl").read_text()) + "\nes_taps(t, x.x);\n"
    assert [name for name in STACKED_PRIVATE if name in code] == ["es_taps"]
