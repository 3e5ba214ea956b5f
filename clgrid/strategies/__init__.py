"""Gridding and degridding strategies: each a small class saying which template to render
and how to launch.

A strategy orders a `clgrid.Plan` for its kernels once (`arrange`, cached in the plan:
a `DevicePlan`) and launches them with one call's values in that order (``grid`` or
``degrid``, returning events); everything else (validation, planning, values,
transfers, reports) belongs to `Gridder` and `Degridder`, shared by all strategies.
"""

from .atomic import AtomicGridding
from .degrid_moving_window import MovingWindowDegridding
from .fpga import FpgaDegridding, FpgaGridding
from .gather import GatherDegridding
from .moving_window import MovingWindowGridding
from .texture import TextureDegridding, TextureGridding
from .texture_moving_window import TextureMovingWindowGridding
from .tiled import TiledGridding

GRIDDING_METHODS = {"atomic": AtomicGridding, "tiled": TiledGridding, "moving_window": MovingWindowGridding,
                    "texture": TextureGridding, "texture_moving_window": TextureMovingWindowGridding,
                    "fpga": FpgaGridding}
DEGRIDDING_METHODS = {"gather": GatherDegridding, "moving_window": MovingWindowDegridding,
                      "fpga": FpgaDegridding, "texture": TextureDegridding}

__all__ = ["GRIDDING_METHODS", "DEGRIDDING_METHODS"]
