"""Gridding and degridding strategies: each a small class saying which template to render
and how to launch.

A strategy orders a `clgrid.Plan` for its kernels once (`arrange`, cached in the plan:
a `DevicePlan`) and launches them with one call's values in that order (``grid`` or
``degrid``, returning events); everything else (validation, planning, values,
transfers, reports) belongs to `Gridder` and `Degridder`, shared by all strategies.

Users name a work distribution (``method``) and how kernel weights are read
(``interpolation``: the nearest oversampled sample, or "linear" through the texture
path); each pair is one strategy class, labelled by its tuning-table section.  The
tooling (bench, tune, emit) names strategies by those labels.
"""

from .atomic import AtomicGridding
from .bins import BinsGridding
from .degrid_moving_window import MovingWindowDegridding
from .fpga import FpgaDegridding, FpgaGridding
from .fpga_stacked import FpgaStackedDegridding, FpgaStackedGridding
from .gather import GatherDegridding
from .moving_window import MovingWindowGridding
from .points import PointDegridding, PointGridding
from .rows import RowsGridding
from .rows_stacked import StackedRowsDegridding, StackedRowsGridding
from .texture import TextureDegridding, TextureGridding
from .texture_moving_window import TextureMovingWindowGridding
from .tiled import TiledGridding

# every strategy, by label
GRIDDING_METHODS = {"atomic": AtomicGridding, "tiled": TiledGridding, "moving_window": MovingWindowGridding,
                    "texture": TextureGridding, "texture_moving_window": TextureMovingWindowGridding,
                    "fpga": FpgaGridding, "rows": RowsGridding}
DEGRIDDING_METHODS = {"gather": GatherDegridding, "moving_window": MovingWindowDegridding,
                      "fpga": FpgaDegridding, "texture": TextureDegridding}
# the public spelling (method, interpolation) of each label
SPELLINGS = {
    "grid": {"atomic": ("atomic", "nearest"), "tiled": ("tiled", "nearest"),
             "moving_window": ("moving_window", "nearest"), "fpga": ("fpga", "nearest"),
             "rows": ("rows", "nearest"), "texture": ("atomic", "linear"), "texture_moving_window": ("moving_window", "linear")},
    "degrid": {"gather": ("gather", "nearest"), "moving_window": ("moving_window", "nearest"),
               "fpga": ("fpga", "nearest"), "texture": ("gather", "linear")},
}
INTERPOLATIONS = ("nearest", "linear")
# the imaging operator's w-stacking distributions (clgrid.imaging), by its tuning [wgridding]
# spread: (the spreading strategy, the interpolating one)
IMAGING = {"bins": (BinsGridding, PointDegridding), "points": (PointGridding, PointDegridding),
           "rows": (StackedRowsGridding, StackedRowsDegridding),
           "fpga": (FpgaStackedGridding, FpgaStackedDegridding)}

__all__ = ["GRIDDING_METHODS", "DEGRIDDING_METHODS", "IMAGING", "SPELLINGS", "INTERPOLATIONS", "spelling",
           "strategy_label"]


def spelling(kind: str, label: str) -> dict:
    """The operator keywords ``method`` and ``interpolation`` of the strategy ``label``."""
    method, interpolation = SPELLINGS[kind][label]
    return {"method": method, "interpolation": interpolation}


def strategy_label(kind: str, method: str, interpolation: str) -> str:
    """The strategy of ``method`` with ``interpolation`` ("grid" or "degrid"), or a clear error
    (the former method names of the texture path say their new spelling)."""
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {interpolation!r}")
    for label, pair in SPELLINGS[kind].items():
        if pair == (method, interpolation):
            return label
    methods = sorted({m for m, _ in SPELLINGS[kind].values()})
    if method in SPELLINGS[kind] and method not in methods:        # a former name: texture, ...
        new_method, new_interpolation = SPELLINGS[kind][method]
        raise ValueError(f"method={method!r} is now method={new_method!r}, interpolation={new_interpolation!r}")
    if method in methods:
        linear = sorted(m for m, i in SPELLINGS[kind].values() if i == "linear")
        raise ValueError(f"method={method!r} has no interpolation={interpolation!r}; linear interpolation "
                         f"works with {linear}")
    raise ValueError(f"unknown method {method!r}; choose one of {methods + ['auto']}")
