"""Gridding strategies: each a small class saying which template to render and how to launch.

A strategy receives a `Plan` already on the device (`DevicePlan`) and a zeroed grid
buffer; everything else (validation, planning, transfers, reports) is the
`Gridder`'s, shared by all strategies.
"""

from .atomic import AtomicGridding
from .tiled import TiledGridding

GRIDDING_METHODS = {"atomic": AtomicGridding, "tiled": TiledGridding}

__all__ = ["GRIDDING_METHODS"]
