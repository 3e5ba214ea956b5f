"""Texture-interpolated gridding on the moving-window work distribution (issue 7).

Romein's moving window (`clgrid.strategies.moving_window`, seed 004 §4-5) with the
weights of `clgrid.strategies.texture` (seed 004 §4.1): each tap's weight is the
kernel cube sampled at the visibility's continuous (u, v, w) position, by the
texture unit or in software (tuning ``sampler``), instead of the nearest sample of
the nearest w-plane.  Same kernel as the moving window (``grid_moving_window.cl``
with ``source_texture.cl``).  Planned with ``interpolation="linear"``, a visibility's
support is its footprint S (the larger support of the two w-planes interpolated),
so chunks, cut where the support changes, never mix footprints.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyopencl as cl

from ..planning.baseline_order import track_shape
from .base import extended, read_only_buffer
from .moving_window import MovingWindowGridding, MovingWindowPlan
from .texture import TextureSampling, device_positions
from .track_chunks import LongestFirst, SupportAndSign, TrackChunker

__all__ = ["TextureMovingWindowPlan", "TextureMovingWindowGridding"]


@dataclass
class TextureMovingWindowPlan(MovingWindowPlan):
    """The moving-window plan plus each visibility's sampler position, in chunk order."""

    position: cl.Buffer


class TextureMovingWindowGridding(TextureSampling, MovingWindowGridding):
    """Moving-window gridding with interpolated weights."""

    name = "texture_moving_window"
    counts = tuple(name for name in MovingWindowGridding.counts if name != "arrange_wg")

    @cached_property
    def chunker(self) -> TrackChunker:
        """Chunks cut on the host, where plans for interpolated weights are made (so no
        ``arrange_wg``: the device only expands the work list)."""
        return TrackChunker(self.queue, self.kernels, SupportAndSign(self.kernels), LongestFirst,
                            self.tuning["chunk_visibilities"], wg=1)

    def arrange(self, plan, npol: int) -> TextureMovingWindowPlan:
        """The moving-window plan and the positions, both in chunk order, cut on the host
        (plans for interpolated weights are made there, with their float64 positions)."""
        track_shape(plan)
        positions = plan.host()
        order, chunks = self.chunker.on_host(positions, plan)
        chunked = self.with_work(self.chunker.upload(positions, order, chunks))
        return extended(chunked, TextureMovingWindowPlan,
                        position=read_only_buffer(self.queue.context, device_positions(positions)[order]))
