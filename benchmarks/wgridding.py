"""vis2dirty / dirty2vis against ducc0.wgridder on MeerKAT-like tracks, same run, same data.

Times (wall clock, host arrays in and out; median of --repeats, the variants interleaved
so that a shared machine's drifting load falls on all alike): clgrid's one call (plan +
operator built each time), clgrid's operator reused (a major cycle's cost), and ducc0
with --nthreads; ratio_* = clgrid / ducc0.
Errors: clgrid and ducc0 at --epsilon against ducc0 at 1e-12 in double (--oracle).

    python benchmarks/wgridding.py --num-vis 4000000 --npix 4096 --epsilon 1e-4 --single --oracle
    python benchmarks/wgridding.py --num-vis 200000 --npix 1024 --epsilon 1e-4 --single --nthreads 2
"""

import argparse
import json
import os
import time

import numpy as np

import clgrid
from clgrid.tools import datasets
from report import report


def tracks(num_vis: int, freq: float, declination: float = -0.5):
    layout = datasets.load_layout("meerkat")
    nbl = datasets.baselines(layout)[0].size
    ntime = max(1, num_vis // nbl)
    ha = np.linspace(-np.pi / 3, np.pi / 3, ntime)        # 8 hours around transit
    uvw = datasets.simulate_uvw(layout, declination=declination, hour_angles=ha).reshape(-1, 3)
    return uvw[:num_vis], np.array([freq])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-vis", type=int, default=4_000_000)
    p.add_argument("--npix", type=int, default=4096)
    p.add_argument("--epsilon", type=float, default=1e-4)
    p.add_argument("--single", action="store_true", help="complex64 (default complex128)")
    p.add_argument("--no-w", action="store_true", help="do_wgridding=False")
    p.add_argument("--device", default=None)
    p.add_argument("--nthreads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--oracle", action="store_true", help="errors against ducc0 at epsilon=1e-12")
    p.add_argument("--variants", default=None,
                   help='clgrid tunings to interleave, as JSON {"name": {[wgridding] overrides}, ...}; '
                        'their keys are prefixed "clgrid_<name>_"')
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    import ducc0.wgridder as wg

    uvw, freq = tracks(a.num_vis, 1.4e9)
    uv_max = np.abs(uvw[:, :2]).max() * freq[0] / 299792458.0
    pix = 0.9 / (2 * uv_max)                                 # the longest baseline just sampled
    rng = np.random.default_rng(1)
    cd, rd = (np.complex64, np.float32) if a.single else (np.complex128, np.float64)
    vis = (rng.normal(size=(len(uvw), 1)) + 1j * rng.normal(size=(len(uvw), 1))).astype(cd)
    dirty = rng.normal(size=(a.npix, a.npix)).astype(rd)
    common = dict(uvw=uvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon,
                  do_wgridding=not a.no_w, nthreads=a.nthreads)
    res = {"num_vis": len(uvw), "npix": a.npix, "epsilon": a.epsilon, "single": a.single, "w": not a.no_w,
           "nthreads": a.nthreads, "w_range": float(np.ptp(uvw[:, 2]) * freq[0] / 299792458.0)}

    variants = json.loads(a.variants) if a.variants else {"": None}
    runs = {
        "ducc0_vis2dirty_s": lambda: wg.vis2dirty(vis=vis, npix_x=a.npix, npix_y=a.npix, **common),
        "ducc0_dirty2vis_s": lambda: wg.dirty2vis(dirty=dirty, **common),
    }
    for name, tuning in variants.items():
        key = f"clgrid_{name}_" if name else "clgrid_"
        t = time.perf_counter()
        op = clgrid.WGridder(uvw, freq, a.npix, a.npix, pix, pix, a.epsilon, not a.no_w,
                             precision="single" if a.single else "double", device=a.device, nthreads=a.nthreads,
                             tuning=tuning)
        res[key + "operator_setup_s"] = time.perf_counter() - t
        runs.update({
            key + "vis2dirty_call_s": lambda tuning=tuning: clgrid.vis2dirty(
                vis=vis, npix_x=a.npix, npix_y=a.npix, device=a.device, tuning=tuning, **common),
            key + "dirty2vis_call_s": lambda tuning=tuning: clgrid.dirty2vis(
                dirty=dirty, device=a.device, tuning=tuning, **common),
            key + "vis2dirty_reused_s": op.vis2dirty,
            key + "dirty2vis_reused_s": op.dirty2vis,
        })
    arguments = {"vis2dirty": vis, "dirty2vis": dirty}
    # Interleaved: each repeat runs every variant once, so that a shared machine's load,
    # which drifts over seconds, falls on all of them alike; medians over the repeats.
    def call(key):
        fn = runs[key]
        return fn(arguments[key.split("_")[-3]]) if key.endswith("reused_s") else fn()

    outputs = {k: call(k) for k in runs}                     # warm-up (program builds)
    samples = {k: [] for k in runs}
    for _ in range(a.repeats):
        for k in runs:
            t = time.perf_counter()
            call(k)
            samples[k].append(time.perf_counter() - t)
    res.update({k: float(np.median(v)) for k, v in samples.items()})
    ref_img, ref_vis = outputs["ducc0_vis2dirty_s"], outputs["ducc0_dirty2vis_s"]
    first = f"clgrid_{next(iter(variants))}_" if next(iter(variants)) else "clgrid_"
    img, got_vis = outputs[first + "vis2dirty_call_s"], outputs[first + "dirty2vis_call_s"]
    for name in variants:
        key = f"clgrid_{name}_" if name else "clgrid_"
        for side in ("vis2dirty", "dirty2vis"):
            for how in ("call", "reused"):
                res[f"ratio_{key[7:]}{side}_{how}"] = res[f"{key}{side}_{how}_s"] / res[f"ducc0_{side}_s"]
    g = op.geometry
    res["kernel"] = {"support": g.kernel.support, "sigma": g.kernel.sigma, "grid": [g.nu, g.nv],
                     "planes": g.num_planes}
    res["device"] = op.queue.device.name.strip()
    if a.oracle:
        exact = dict(common, epsilon=1e-12)
        true_img = wg.vis2dirty(vis=vis.astype(np.complex128), npix_x=a.npix, npix_y=a.npix, **exact)
        true_vis = wg.dirty2vis(dirty=dirty.astype(np.float64), **exact)

        def err(x, y):
            return float(np.linalg.norm(x - y) / np.linalg.norm(y))

        res.update(clgrid_image_error=err(img, true_img), ducc0_image_error=err(ref_img, true_img),
                   clgrid_vis_error=err(got_vis, true_vis), ducc0_vis_error=err(ref_vis, true_vis))
    report(res, a.json)


if __name__ == "__main__":
    main()
