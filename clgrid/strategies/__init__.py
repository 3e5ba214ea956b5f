"""Gridding strategies: each a small class saying which template to render and how to launch.

A strategy receives a `Plan` already on the device (`DevicePlan`) and a zeroed grid
buffer; everything else (validation, planning, transfers, reports) is the
`Gridder`'s, shared by all strategies.
"""

from .atomic import AtomicGridding
from .moving_window import MovingWindowGridding

GRIDDING_METHODS = {"atomic": AtomicGridding, "moving_window": MovingWindowGridding}

__all__ = ["GRIDDING_METHODS"]
