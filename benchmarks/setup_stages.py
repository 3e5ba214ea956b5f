"""Where an imaging operator's set-up goes, stage by stage: each stage's wall time with the
queue drained before and after it, so that the device work a stage enqueues is counted in
that stage (the whole set-up is also timed undisturbed).  4 M MeerKAT-track visibilities,
epsilon 1e-4, single, in 2-D (7168^2) and with w (4096^2), as `setup_profile.py`.

    python3 benchmarks/setup_stages.py --device nvidia

Stages nest (a part's planning holds the uvw upload and the classification); the table
prints each stage's median over the repeats, with its nesting depth as indentation.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

import clgrid
from clgrid.device.runtime import get_queue
from engine_ab import C, tracks

# (module, attribute, label): callables wrapped by a drained timer
STAGES = [
    ("clgrid.imaging.wgridding", "check_devices", "check devices"),
    ("clgrid.imaging.wgridding", "abs_w_range", "w range"),
    ("clgrid.imaging.wgridding", "choose_geometry", "geometry"),
    ("clgrid.imaging.wgridding", "ImagingEngine", "engine"),
    ("clgrid.imaging.engine", "PixelModel", "pixel model"),
    ("clgrid.imaging.engine.ImagingEngine", "_make_part", "part"),
    ("clgrid.imaging.engine", "plan_stacked", "plan"),
    ("clgrid.planning.plan", "upload", "uvw upload"),
    ("clgrid.planning.plan", "stacked_program", "planning program"),
    ("clgrid.planning.plan", "ExclusiveScan", "scan (make)"),
    ("clgrid.planning.stacking", "CountingSort", "counting sort (make)"),
    ("clgrid.strategies.bins.BinsGridding", "arrange", "arrange (bins)"),
    ("clgrid.strategies.stacked", "arrange", "arrange (sort, take)"),
    ("clgrid.planning.stacking", "every_nth", "table download"),
    ("clgrid.strategies.bins", "every_nth", "jobs download"),
    ("clgrid.imaging.engine.ImagingEngine", "_setup_data", "values kernels"),
    ("clgrid.imaging.engine.ImagingEngine", "_setup_planes", "plane kernels"),
    ("clgrid.imaging.engine", "DeviceFFT", "device FFT"),
    ("clgrid.imaging.engine", "plane_regions", "plane regions"),
]


def wrap_stages(queue, times: dict, depth: list):
    """Replace each stage's callable by one that drains ``queue`` and records its time."""
    import importlib

    for where, name, label in STAGES:
        try:
            if where.endswith(("ImagingEngine", "BinsGridding")):
                module, cls_name = where.rsplit(".", 1)
                owner = getattr(importlib.import_module(module), cls_name)
            else:
                owner = importlib.import_module(where)
        except (ImportError, AttributeError):
            continue
        original = getattr(owner, name, None)
        if original is None:
            continue

        def timed(*args, __original=original, __label=label, **kwargs):
            queue.finish()
            depth.append(__label)
            start = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                queue.finish()
                times[(len(depth), __label)].append(time.perf_counter() - start)
                depth.pop()

        setattr(owner, name, timed)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    uvw = tracks(a.rows)
    freq = np.array([1.4e9])
    pix = 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq.max() / C)
    queue = get_queue(a.device)
    for w, npix in ((False, 7168), (True, 4096)):
        kw = dict(uvw=uvw, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4,
                  do_wgridding=w, precision="single", device=queue, nthreads=16)
        for _ in range(2):
            clgrid.WGridder(**kw).queue.finish()
        whole = []
        for _ in range(a.repeats):
            start = time.perf_counter()
            clgrid.WGridder(**kw).queue.finish()
            whole.append(time.perf_counter() - start)
        print(f"do_wgridding={w} npix={npix} rows={a.rows}: set-up {1e3 * np.median(whole):.1f} ms "
              f"(median of {a.repeats}; min {1e3 * min(whole):.1f})")
        times, depth = defaultdict(list), []
        if not getattr(main, "_wrapped", False):
            wrap_stages(queue, times, depth)
            main._wrapped = True
            main._times = times
        main._times.clear()
        drained = []
        for _ in range(a.repeats):
            start = time.perf_counter()
            clgrid.WGridder(**kw).queue.finish()
            drained.append(time.perf_counter() - start)
        print(f"  drained between stages: {1e3 * np.median(drained):.1f} ms")
        for (level, label), ts in main._times.items():
            per_call = np.asarray(ts).reshape(a.repeats, -1).sum(axis=1) if len(ts) % a.repeats == 0 else ts
            print(f"  {'  ' * level}{label:<24s} {1e3 * np.median(per_call):8.2f} ms  ({len(ts)} calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
