"""Images from visibilities and back: `vis2dirty` / `dirty2vis` (ducc0.wgridder's call),
the `WGridder` operator kept for major cycles, and `dirty_image` for a W-projection grid."""

from .image import dirty_image, grid_correction, grid_to_image
from .wgridding import WGridder, dirty2vis, vis2dirty

__all__ = ["WGridder", "vis2dirty", "dirty2vis", "dirty_image", "grid_correction", "grid_to_image"]
