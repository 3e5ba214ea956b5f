"""The one-engine refactor's speed check (issue 31): the same measurements with whichever
clgrid is first on the path, so that two trees (before and after) run in turn on the same
machine.  Works with the flat layout of 494e1d1 and the layout by concern after it.

- ``tiled``: W-projection tiled gridding, 4 M MeerKAT-track visibilities, 7^2 kernels,
  4096^2 grid: device time of the kernels (median of --repeats after a warm-up);
- the other W-projection distributions on the same workload, device time of the
  strategy's kernels (each case is a strategy label of `clgrid.strategies.SPELLINGS`,
  ``degrid_`` before a degridder's, ``_analytic`` after it for the analytic kernel source
  of the same support, KernelStack.analytic(1e-5)): ``atomic``, ``moving_window``,
  ``texture``, ``texture_moving_window``, ``degrid_gather``, ``degrid_texture``,
  ``tiled_analytic``, ``atomic_analytic``, ``degrid_gather_analytic`` (issue 31t: the kernel
  sources as template includes);
- ``w4m``: vis2dirty / dirty2vis, 4 M visibilities with w, 4096^2, epsilon 1e-4, single:
  the operator's set-up, one call, and a kept operator's call (wall clock, medians);
- ``flat4m``: the same points in 2-D (do_wgridding=False): the set-up, and a kept call;
- ``w64m``: 4 M rows x 16 channels (1284-1484 MHz), 8192^2, epsilon 1e-4, single, with w:
  a kept operator's vis2dirty and dirty2vis, and one call of vis2dirty.

    PYTHONPATH=.baseline python3 benchmarks/engine_ab.py --device nvidia --json before.json
    PYTHONPATH=. python3 benchmarks/engine_ab.py --device nvidia --cases tiled,atomic,moving_window,degrid_gather,texture,texture_moving_window,degrid_texture,tiled_analytic,atomic_analytic,degrid_gather_analytic
    PYTHONPATH=. python3 benchmarks/engine_ab.py --device nvidia --json after.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

import clgrid

if (Path(clgrid.__file__).parent / "tools").is_dir():      # the layout by concern
    from clgrid.tools import datasets
    from clgrid.tools.bench import make_workload
    from clgrid.operators.operation import kernel_seconds
else:                                                       # the flat layout before it
    from clgrid import datasets
    from clgrid.bench import make_workload
    from clgrid.operation import kernel_seconds

C = 299792458.0


def median_wall(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def tracks(num_rows: int):
    layout = datasets.load_layout("meerkat")
    nbl = datasets.baselines(layout)[0].size
    ha = np.linspace(-np.pi / 3, np.pi / 3, max(1, num_rows // nbl))
    return datasets.simulate_uvw(layout, declination=-0.5, hour_angles=ha).reshape(-1, 3)[:num_rows]


def tiled(device, repeats: int, scale: int) -> dict:
    work = make_workload("tracks", 4_000_000 // scale, 4096 // scale, 3)
    uvw = np.ascontiguousarray(work.uvw.reshape(-1, 3))
    vis = np.ascontiguousarray(work.vis.reshape(-1, 1)).astype(np.complex64)
    gridder = clgrid.Gridder(work.grid_size, work.cell_size, work.kernels, method="tiled", device=device,
                             on_dropped="ignore")
    prepared = gridder.prepare(gridder.plan(uvw), vis)
    cl.wait_for_events(gridder.execute(prepared))
    times = []
    for _ in range(repeats):
        events = gridder.execute(prepared)[1:]
        cl.wait_for_events(events)
        times.append(1e3 * kernel_seconds(events))
    return {"kernel_ms": float(np.median(times)), "min_ms": min(times)}


PROJECTION = ("atomic", "moving_window", "texture", "texture_moving_window", "degrid_gather", "degrid_texture",
              "tiled_analytic", "atomic_analytic", "degrid_gather_analytic")


def projection(device, repeats: int, scale: int, case: str) -> dict:
    """One W-projection strategy (``case``: see the module docstring) on the ``tiled`` case's
    workload, its samples kept by baseline (the moving window needs them so): device time of
    the strategy's kernels, median of ``repeats`` after a warm-up."""
    from clgrid.strategies import spelling

    work = make_workload("tracks", 4_000_000 // scale, 4096 // scale, 3)
    degrid, label = case.startswith("degrid_"), case.removeprefix("degrid_")
    analytic, label = label.endswith("_analytic"), label.removesuffix("_analytic")
    kernels = clgrid.KernelStack.analytic(1e-5) if analytic else work.kernels
    vis = work.vis.astype(np.complex64)
    if degrid:
        op = clgrid.Degridder(work.grid_size, work.cell_size, kernels, **spelling("degrid", label), device=device,
                              on_dropped="ignore")
        op.load_grid(work.random_grid())[2].wait()
        prepared = op.prepare(work.uvw, vis.shape[-1])
        skip = 0
    else:
        op = clgrid.Gridder(work.grid_size, work.cell_size, kernels, **spelling("grid", label), device=device,
                            on_dropped="ignore")
        prepared = op.prepare(work.uvw, vis)
        skip = 1                                            # the grid's zeroing
    cl.wait_for_events(op.execute(prepared))
    times = []
    for _ in range(repeats):
        events = op.execute(prepared)[skip:]
        cl.wait_for_events(events)
        times.append(1e3 * kernel_seconds(events))
    return {"kernel_ms": float(np.median(times)), "min_ms": min(times), "support": int(kernels.max_support)}


def imaging(uvw, freq, npix: int, w: bool, device, repeats: int, one_call: int = 3, adjoint: bool = True) -> dict:
    uv_max = np.abs(uvw[:, :2]).max() * freq.max() / C
    pix = 0.9 / (2 * uv_max)
    rng = np.random.default_rng(1)
    vis = (rng.normal(size=(len(uvw), freq.size)) + 1j * rng.normal(size=(len(uvw), freq.size))).astype(np.complex64)
    dirty = rng.normal(size=(npix, npix)).astype(np.float32)
    kw = dict(uvw=uvw, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4,
              do_wgridding=w, precision="single", device=device, nthreads=16)
    out = {}
    started = time.perf_counter()
    op = clgrid.WGridder(**kw)
    out["first_setup_s"] = time.perf_counter() - started
    setups = []
    for _ in range(3):
        started = time.perf_counter()
        op = clgrid.WGridder(**kw)
        setups.append(time.perf_counter() - started)
    out["setup_s"] = float(np.median(setups))
    out["reused_vis2dirty_s"] = median_wall(lambda: op.vis2dirty(vis), repeats)
    if adjoint:
        out["reused_dirty2vis_s"] = median_wall(lambda: op.dirty2vis(dirty), repeats)
    call = {k: v for k, v in kw.items() if k not in ("npix_x", "npix_y", "precision")}
    out["one_call_vis2dirty_s"] = median_wall(lambda: clgrid.vis2dirty(vis=vis, npix_x=npix, npix_y=npix, **call),
                                              one_call)
    if adjoint:
        out["one_call_dirty2vis_s"] = median_wall(lambda: clgrid.dirty2vis(dirty=dirty, **call), one_call)
    image = op.vis2dirty(vis)
    out["image_rms"] = float(np.sqrt(np.mean(image.astype(np.float64) ** 2)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cases", default="tiled,w4m,flat4m,w64m")
    p.add_argument("--scale", type=int, default=1, help="divide the sizes by this (a quick check)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    k = a.scale
    cases = a.cases.split(",")
    out = {"clgrid_file": clgrid.__file__}
    if "tiled" in cases:
        out["tiled"] = tiled(a.device, 9, k)
    for case in PROJECTION:
        if case in cases:
            out[case] = projection(a.device, 9, k, case)
    if not {"w4m", "flat4m", "w64m"} & set(cases):
        cases = []
    uvw4 = tracks(4_000_000 // k) if cases else None
    if "w4m" in cases:
        out["w4m"] = imaging(uvw4, np.array([1.4e9]), 4096 // k, True, a.device, a.repeats)
    if "flat4m" in cases:
        out["flat4m"] = imaging(uvw4, np.array([1.4e9]), 7168 // k, False, a.device, a.repeats, adjoint=False)
    if "w64m" in cases:
        freq = np.linspace(1.284e9, 1.484e9, 16)
        out["w64m"] = imaging(uvw4, freq, 8192 // k, True, a.device, 3, one_call=1)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
