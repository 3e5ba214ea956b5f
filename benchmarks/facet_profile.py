"""Where a faceted operator's reused call goes: the 16384^2 / 16 M case of
`large_images.py` (facets chosen as there), each facet's wall time in a reused
`vis2dirty` and `dirty2vis`, and for the first facet the device seconds of its stages
summed over its planes (spread, interpolation, FFT: `wgridding_stages.stage_times`) and
the wall time of a reused call's parts (`wgridding_stages.call_parts`).

    python3 benchmarks/facet_profile.py --device nvidia --nthreads 16
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import clgrid
from large_images import CASES, pixel_size, tracks
from wgridding_stages import call_parts, stage_times


def plane_steps(op) -> dict:
    """Wall seconds of each step of a reused vis2dirty's planes on the device, launched as
    the engine launches them, the queue drained after each step (zero the grid, spread,
    FFT, accumulate), summed over the active planes."""
    from clgrid.device.codegen import launch
    from clgrid.device.runtime import fill_zeros

    e, g, q = op.engine, op.geometry, op.queue
    steps = {"zero": 0.0, "spread": 0.0, "fft": 0.0, "accumulate": 0.0}
    if e.device_fft is None:
        return {"host FFT": "not profiled"}

    def timed(name, fn):
        q.finish()
        t = time.perf_counter()
        fn()
        q.finish()
        steps[name] += time.perf_counter() - t

    for plane in e.planes:
        if e._active(plane):
            timed("zero", lambda: fill_zeros(q, e._grid, e._grid_bytes, e.real))
            timed("spread", lambda: e._launch_spread(plane))
            timed("fft", lambda: e.device_fft.backward(e._grid, **e._region_of(plane)))
            timed("accumulate", lambda: launch(e._accumulate, q, (g.npix_y, g.npix_x), e._grid, e._image_acc,
                                               *e._pixel_args, *e._plane_args(plane)))
    return {k: round(v, 4) for k, v in steps.items()}


def accumulate_launches(op, repeats: int = 3) -> dict:
    """Device milliseconds of one plane's accumulate (the middle plane), launched with the
    work-group size left to the runtime (local size NULL, as before) and through
    `clgrid.device.codegen.launch` (groups of LAUNCH_GROUP, the global size rounded up)."""
    from clgrid.device.codegen import launch

    e, g, q = op.engine, op.geometry, op.queue
    if e.device_fft is None:
        return {}
    plane = e.planes[len(e.planes) // 2]
    args = (e._grid, e._image_acc, *e._pixel_args, *e._plane_args(plane))
    shape = (g.npix_y, g.npix_x)
    ways = {"runtime's choice": lambda: e._accumulate(q, shape, None, *args),
            "launch": lambda: launch(e._accumulate, q, shape, *args)}
    out = {}
    for name, enqueue in ways.items():
        times = []
        for _ in range(repeats):
            ev = enqueue()
            ev.wait()
            times.append((ev.profile.end - ev.profile.start) * 1e-6)
        out[name] = round(float(np.median(times)), 3)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(CASES), default="16k")
    p.add_argument("--device", default=None)
    p.add_argument("--nthreads", type=int, default=16)
    p.add_argument("--facets", default="auto")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="two facets, the per-step and pixel-model profile only")
    a = p.parse_args(argv)
    npix, num_vis = CASES[a.case]
    uvw, freq, vis = tracks(num_vis, 1.4e9)
    pix = pixel_size(uvw, freq)
    facets = None if a.facets == "auto" else tuple(int(x) for x in a.facets.split("x"))
    start = time.perf_counter()
    op = clgrid.WGridder(uvw, freq, npix, npix, pix, pix, 1e-4, do_wgridding=True, precision="single",
                         device=a.device, nthreads=a.nthreads, facets=facets)
    op.queue.finish()
    print(f"{a.case}: {num_vis} vis into {npix}^2, set-up {time.perf_counter() - start:.2f} s")
    faceted = op.faceted
    if faceted is None:
        operators = [(None, op)]
    else:
        operators = list(faceted.operators())
    print(f"{len(operators)} operator(s); first: grid {operators[0][1].geometry.nu}^2, "
          f"{operators[0][1].geometry.num_planes} planes, fft {operators[0][1].engine.fft_mode}, "
          f"spread {operators[0][1].engine.spread_mode}")
    dirty = op.vis2dirty(vis)
    op.dirty2vis(dirty)
    if a.quick:
        operators = operators[:2]
    for name, call in (("vis2dirty", lambda o: o.vis2dirty(vis)), ("dirty2vis", None)):
        walls = []
        for _ in range(a.repeats):
            per = []
            t0 = time.perf_counter()
            for facet, o in operators:
                t = time.perf_counter()
                if name == "vis2dirty":
                    o.vis2dirty(vis)
                else:
                    part = dirty if facet is None else np.ascontiguousarray(dirty[facet.rows, facet.cols])
                    o.dirty2vis(part)
                per.append(time.perf_counter() - t)
            walls.append((time.perf_counter() - t0, per))
        total, per = sorted(walls)[len(walls) // 2]
        print(f"{name} reused (facet by facet): {total:.3f} s; per facet " +
              " ".join(f"{x:.3f}" for x in per))
    whole = []
    for _ in range(0 if a.quick else a.repeats):
        t = time.perf_counter()
        op.vis2dirty(vis)
        whole.append(time.perf_counter() - t)
    if whole:
        print(f"vis2dirty reused through the faceted operator: {np.median(whole):.3f} s")
    for i, (facet, o) in enumerate(operators[:2]):
        g = o.geometry
        print(f"facet {i}: centre ({g.center_x:.4f}, {g.center_y:.4f}), tilt ({g.tilt_x:.4f}, {g.tilt_y:.4f}), "
              f"{g.nu}x{g.nv}, {g.num_planes} planes, {o.engine.num_kept} kept; steps {plane_steps(o)}; "
              f"npix {g.npix_x}x{g.npix_y}, one accumulate (ms) {accumulate_launches(o)}")
    first = operators[0][1]
    stages = stage_times(first, a.repeats)
    print("first facet, device seconds over its planes:", {k: round(v, 4) if isinstance(v, float) else v
                                                           for k, v in stages.items()})
    facet0 = operators[0][0]
    part = dirty if facet0 is None else np.ascontiguousarray(dirty[facet0.rows, facet0.cols])
    parts = call_parts(first, vis, part, a.repeats)
    print("first facet, wall of a reused call's parts:", {k: round(v, 4) for k, v in parts.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
