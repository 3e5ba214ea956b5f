"""Points beyond the device (issue 29): the streamed engine (slabs of w-planes, each slab's
points planned when the plane loop reaches it) against the operator that keeps every
point on the device, and against the other order, parts of rows outside with every
plane's FFT inside (each part planned and imaged in turn, its image added), on a device
made to look ``--share`` times as large as the kept operator's buffers.  Interleaved in one
process, medians of ``--repeats``; vis2dirty and dirty2vis are each one whole call
(streaming plans every call).

Variants:

    kept        every point on the device (the device's real memory)
    streamed    the engine's stream (`ImagingEngine.streamed`): FFTs once a plane, the next
                group planned on a second queue and thread while the current one is spread
    in_turn     the same stream with each group planned in turn on the calling thread
                (`stream.STREAM_OVERLAP` off): what the overlap gains
    row_parts   the fewest parts of rows whose points would fit the same memory (kept
                bytes / memory: fewer than would, as a part's set-up is left out), each a
                `WGridder` on the whole geometry made and called in turn: every part
                transforms every plane

    python benchmarks/streaming.py --npix 1024 --num-vis 1000000 --freq 7e8 --share 0.25 --nthreads 2

``--skip row_parts,ducc0`` leaves variants out (a GPU run within minutes).
"""

import argparse
import dataclasses
import os
import sys
import time

import numpy as np

import clgrid
from clgrid.imaging import engine as engine_module
from clgrid.imaging import stream as stream_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from large_images import pixel_size, tracks  # noqa: E402
from report import report  # noqa: E402
from timing import interleaved  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--npix", type=int, default=1024)
    p.add_argument("--num-vis", type=int, default=1_000_000)
    p.add_argument("--freq", type=float, default=7e8)
    p.add_argument("--epsilon", type=float, default=1e-5)
    p.add_argument("--double", dest="single", action="store_false")
    p.add_argument("--share", type=float, default=0.25, help="the device's memory, a share of the kept engine's")
    p.add_argument("--device", default="pocl")
    p.add_argument("--nthreads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    p.add_argument("--skip", default="", help="variants left out, comma-separated (row_parts, ducc0, in_turn)")
    a = p.parse_args(argv)
    import ducc0.wgridder as wg

    uvw, freq, vis = tracks(a.num_vis, a.freq, single=a.single)
    pix = pixel_size(uvw, freq)
    rd = np.float32 if a.single else np.float64
    dirty = np.random.default_rng(2).standard_normal((a.npix, a.npix), dtype=rd)
    common = dict(epsilon=a.epsilon, do_wgridding=True, device=a.device, nthreads=a.nthreads, facets=(1, 1),
                  precision="single" if a.single else "double")
    clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, **common)      # programs built
    setup = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        kept = clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, **common)
        setup.append(time.perf_counter() - t)
    g = kept.geometry
    memory = int(kept.engine.device_bytes() * a.share / stream_module.DEVICE_SHARE)
    real = engine_module.device_facts
    engine_module.device_facts = lambda d: dataclasses.replace(real(d), global_memory=memory)
    try:
        streamed = clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, **common)
    finally:
        engine_module.device_facts = real
    s = streamed.engine.streamed
    parts = -(-kept.engine.device_bytes() // int(memory * stream_module.DEVICE_SHARE))   # the fewest that fit
    bounds = np.linspace(0, uvw.shape[0], parts + 1).astype(int)

    def row_parts(direction):
        out = None
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            op = clgrid.WGridder(uvw[lo:hi], freq, a.npix, a.npix, pix, pix, geometry=g, **common)
            if direction == "vis2dirty":
                image = op.vis2dirty(vis[lo:hi])
                out = image if out is None else out + image
            else:
                out = op.dirty2vis(dirty) if out is None else np.concatenate([out, op.dirty2vis(dirty)])
        return out

    res = dict(npix=a.npix, num_vis=a.num_vis, freq=a.freq, epsilon=a.epsilon, single=a.single,
               nthreads=a.nthreads, device=kept.engine.facts.name, share=a.share, grid=[g.nu, g.nv],
               planes=g.num_planes, support=g.kernel.support, kept_bytes=kept.engine.device_bytes(),
               streamed=vars(s), row_parts=parts, kept_setup_s=float(np.median(setup)),
               date=time.strftime("%Y-%m-%d %H:%M:%S"))
    kw = dict(uvw=uvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon, do_wgridding=True,
              nthreads=a.nthreads)
    runs = {"kept_vis2dirty": lambda: kept.vis2dirty(vis), "kept_dirty2vis": lambda: kept.dirty2vis(dirty),
            "streamed_vis2dirty": lambda: streamed.vis2dirty(vis),
            "streamed_dirty2vis": lambda: streamed.dirty2vis(dirty),
            "row_parts_vis2dirty": lambda: row_parts("vis2dirty"),
            "row_parts_dirty2vis": lambda: row_parts("dirty2vis"),
            "ducc0_vis2dirty": lambda: wg.vis2dirty(vis=vis, npix_x=a.npix, npix_y=a.npix, **kw),
            "ducc0_dirty2vis": lambda: wg.dirty2vis(dirty=dirty, **kw)}

    def in_turn(fn):
        def run():
            stream_module.STREAM_OVERLAP = False
            try:
                return fn()
            finally:
                stream_module.STREAM_OVERLAP = True
        return run

    runs["in_turn_vis2dirty"] = in_turn(runs["streamed_vis2dirty"])
    runs["in_turn_dirty2vis"] = in_turn(runs["streamed_dirty2vis"])
    skip = {v for v in a.skip.split(",") if v}
    runs = {k: fn for k, fn in runs.items() if k.rsplit("_", 1)[0] not in skip}
    medians, samples, outputs = interleaved(runs, a.repeats)      # (the warm-up's outputs kept)
    for k, v in samples.items():
        res[f"{k}_s"] = medians[k]
        print(f"{k:24s} {medians[k]:8.3f} s  (all {np.round(v, 3).tolist()})", flush=True)

    def err(x, y):
        return float(np.linalg.norm(np.asarray(x, np.complex128) - y) / np.linalg.norm(y))

    for k in runs:
        reference = "ducc0_" + k.rsplit("_", 1)[1]
        if not k.startswith("ducc0") and reference in outputs:
            res[f"{k}_vs_ducc0"] = err(outputs[k], outputs[reference])
        if k.startswith(("streamed", "in_turn")):
            res[f"{k}_vs_kept"] = err(outputs[k], outputs["kept_" + k.rsplit("_", 1)[1]])
    report(res, a.json)


if __name__ == "__main__":
    main()
