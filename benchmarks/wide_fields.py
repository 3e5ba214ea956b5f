"""Wide fields at the cost of the FFTs that matter (issue 29): one grid against facets, with and
without the pruned host FFT, beside ducc0, interleaved in one process so that a shared
machine's drifting load falls on all alike (medians of ``--repeats``).

Variants (each a `clgrid.WGridder` built once, vis2dirty and dirty2vis timed):

    whole          one padded grid, the host FFT over the whole grid
    whole_pruned   one grid, each plane's FFT pass only over its occupied rows or columns
                   (clgrid/imaging/regions.py)
    FxF            F x F facets (recentred: each facet's w term tilted to its centre), pruned
    ducc0          ducc0.wgridder with --nthreads

The field is set by the frequency (MeerKAT tracks, the longest baseline just sampled, as
benchmarks/wgridding.py): a lower ``--freq`` widens the field of the same image, and its
plane count grows as npix^2 / frequency, so small images here reach the planes-per-pixel
of the GPU's large ones.

    python benchmarks/wide_fields.py --npix 2048 --num-vis 200000 --freq 3.5e8 --facets 2,3 --nthreads 2
"""

import argparse
import os
import sys
import time

import numpy as np

import clgrid
from clgrid.imaging import wgridding

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from large_images import pixel_size, tracks  # noqa: E402
from report import report  # noqa: E402
from timing import interleaved  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--npix", type=int, default=2048)
    p.add_argument("--num-vis", type=int, default=200_000)
    p.add_argument("--freq", type=float, default=3.5e8)
    p.add_argument("--epsilon", type=float, default=1e-4)
    p.add_argument("--double", dest="single", action="store_false")
    p.add_argument("--facets", default="2,3", help="comma-separated F for F x F facets")
    p.add_argument("--device", default="pocl")
    p.add_argument("--nthreads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import ducc0.wgridder as wg

    uvw, freq, vis = tracks(a.num_vis, a.freq, single=a.single)
    pix = pixel_size(uvw, freq)
    rd = np.float32 if a.single else np.float64
    dirty = np.random.default_rng(2).standard_normal((a.npix, a.npix), dtype=rd)
    common = dict(epsilon=a.epsilon, do_wgridding=True, device=a.device, nthreads=a.nthreads,
                  precision="single" if a.single else "double", tuning={"fft": "host"})
    res = dict(npix=a.npix, num_vis=a.num_vis, freq=a.freq, field_deg=float(np.degrees(a.npix * pix)),
               epsilon=a.epsilon, single=a.single, nthreads=a.nthreads, recentre=wgridding.RECENTRE,
               date=time.strftime("%Y-%m-%d %H:%M:%S"))
    ops = {"whole": clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, facets=(1, 1), **common)}
    pruning = getattr(ops["whole"].engine, "regions", None) is not None
    res["pruning"] = pruning
    if pruning:
        ops["whole"].engine.regions = None
        ops["whole_pruned"] = clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, facets=(1, 1), **common)
    for f in map(int, a.facets.split(",")):
        ops[f"{f}x{f}"] = clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, facets=(f, f), **common)
    for name, op in ops.items():
        g = op.geometry
        res[f"{name}_geometry"] = dict(grid=[g.nu, g.nv], planes=g.num_planes, support=g.kernel.support)
        if op.faceted is not None:
            facet_ops = [o for _, o in op.faceted.operators()]
            res[f"{name}_geometry"].update(facet_planes=[o.geometry.num_planes for o in facet_ops],
                                           facet_grids=[[o.geometry.nu, o.geometry.nv] for o in facet_ops])
    kw = dict(uvw=uvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon, do_wgridding=True,
              nthreads=a.nthreads)
    runs = {"ducc0_vis2dirty": lambda: wg.vis2dirty(vis=vis, npix_x=a.npix, npix_y=a.npix, **kw),
            "ducc0_dirty2vis": lambda: wg.dirty2vis(dirty=dirty, **kw)}
    for name, op in ops.items():
        runs[f"{name}_vis2dirty"] = lambda op=op: op.vis2dirty(vis)
        runs[f"{name}_dirty2vis"] = lambda op=op: op.dirty2vis(dirty)
    medians, samples, outputs = interleaved(runs, a.repeats)      # (the warm-up's outputs kept)
    for k, v in samples.items():
        res[f"{k}_s"] = medians[k]
        print(f"{k:28s} {medians[k]:8.3f} s  (all {np.round(v, 3).tolist()})", flush=True)

    def err(x, y):
        return float(np.linalg.norm(np.asarray(x, np.complex128) - y) / np.linalg.norm(y))

    for k in runs:
        side = k.rsplit("_", 1)[1]
        if not k.startswith("ducc0"):
            res[f"{k}_vs_ducc0"] = err(outputs[k], outputs[f"ducc0_{side}"])
    report(res, a.json)


if __name__ == "__main__":
    main()
