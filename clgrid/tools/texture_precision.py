"""How much error a device's texture unit adds: the image sampler against the software
sampler and against the float64 interpolated reference, on the same visibilities.

GPUs interpolate with reduced-precision weights (NVIDIA documents 9-bit fixed point
with 8 fractional bits, about 1/256 of a texel), so the image path can differ from the
software path by far more than float32 accumulation; CPU runtimes such as PoCL
interpolate in float.  `interpolation_precision` measures it on the device in hand.
"""

from __future__ import annotations

import numpy as np

from .. import reference
from ..call_warnings import gathering
from ..operators.degridder import Degridder
from ..operators.gridder import Gridder
from ..sources.tables import KernelStack

__all__ = ["interpolation_precision"]


def _relative(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def interpolation_precision(device=None, num_vis: int = 2000, grid_size: int = 128,
                            oversample: int = 4, num_planes: int = 8, seed: int = 0) -> dict:
    """Relative Frobenius errors of texture gridding and degridding on ``device``.

    Returns ``{"device", "image_sampler", "grid": {...}, "degrid": {...}}`` where each of
    grid and degrid holds ``image_vs_reference``, ``software_vs_reference`` and
    ``image_vs_software``; ``image_sampler`` is False (and the image entries absent)
    when the device cannot sample images.  Random visibilities, w-terms included.
    """
    cell = 2.0 / (grid_size * 60)       # uv up to ~48 cells from the centre fills 80% of the grid
    w_max = 300.0
    kernels = KernelStack.w_projection(grid_size=grid_size, cell_size=cell, w_max=w_max,
                                       num_planes=num_planes, oversample=oversample, max_support=12)
    rng = np.random.default_rng(seed)
    du = 1.0 / (grid_size * cell)
    uv_max = 0.8 * (grid_size // 2 - kernels.max_support) * du
    uvw = np.column_stack([rng.uniform(-uv_max, uv_max, (num_vis, 2)), rng.uniform(-w_max, w_max, num_vis)])
    vis = rng.normal(size=(num_vis, 1)) + 1j * rng.normal(size=(num_vis, 1))
    grid_ref = reference.grid(uvw, vis, grid_size, cell, kernels, interpolation="linear")
    vis_ref = reference.degrid(grid_ref, uvw, grid_size, cell, kernels, interpolation="linear")

    results = {"grid": {}, "degrid": {}}
    with gathering([]):             # a sampler said unavailable is read from the tuning below
        gridders = {s: Gridder(grid_size, cell, kernels, method="atomic", interpolation="linear", device=device, tuning={"sampler": s})
                    for s in ("image", "software")}
    image = gridders["image"].strategy.tuning["sampler"] == "image"
    samplers = ("image", "software") if image else ("software",)
    out = {}
    for s in samplers:
        grid = gridders[s].grid(uvw, vis)
        degridder = Degridder(grid_size, cell, kernels, method="gather", interpolation="linear", device=device, tuning={"sampler": s})
        out[s] = grid, degridder.degrid(grid_ref, uvw)
        results["grid"][f"{s}_vs_reference"] = _relative(grid, grid_ref)
        results["degrid"][f"{s}_vs_reference"] = _relative(out[s][1], vis_ref)
    if image:
        results["grid"]["image_vs_software"] = _relative(out["image"][0], out["software"][0])
        results["degrid"]["image_vs_software"] = _relative(out["image"][1], out["software"][1])
    return dict(results, device=gridders["software"].device.name.strip(), image_sampler=image)


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    print(json.dumps(interpolation_precision(parser.parse_args().device), indent=2))
