"""What a device's share of a planes split costs: one-device operators over slabs of the
w-planes ``[0, k)`` and ``[k, n)`` (`WGridder(planes=...)` on the whole data's geometry),
each alone, for several boundaries ``k``; reused ``vis2dirty`` / ``dirty2vis`` medians, the
slab's samples, and the host's costs of a split call (the partial results' sums, a zeroed
visibility array).  The figures a split's cost model is fitted to.

    python3 benchmarks/split_sweep.py --devices nvidia --bounds 40 44 47 51
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import clgrid  # noqa: E402
from clgrid.imaging.devices import add_at  # noqa: E402
from devices import SETS, expand, make_set  # noqa: E402
from timing import median_time  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["nvidia"])
    p.add_argument("--set", default="large", choices=tuple(SETS))
    p.add_argument("--bounds", type=int, nargs="+", default=[40, 44, 47, 51])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    data = make_set(*SETS[a.set])
    devices = expand(a.devices)
    uvw, freq, vis, dirty, npix, pix = (data[k] for k in ("uvw", "freq", "vis", "dirty", "npix", "pix"))
    keywords = dict(epsilon=1e-4, do_wgridding=True, precision="single", nthreads=os.cpu_count())
    one = clgrid.WGridder(uvw, freq, npix, npix, pix, pix, device=devices[0], **keywords)
    g = one.geometry
    out = {"set": a.set, "num_vis": int(vis.size), "planes": g.num_planes, "devices": devices,
           "one": {"vis2dirty_s": median_time(lambda: one.vis2dirty(vis), a.repeats),
                   "dirty2vis_s": median_time(lambda: one.dirty2vis(dirty), a.repeats),
                   "spread_device_s": one.engine.stage_seconds("grid"),
                   "interp_device_s": one.engine.stage_seconds("degrid")}}
    print("one device:", out["one"], flush=True)
    del one
    rows = []
    for k in a.bounds:
        for d, (lo, hi) in enumerate(((0, k), (k, g.num_planes))):
            device = devices[d % len(devices)]
            op = clgrid.WGridder(uvw, freq, npix, npix, pix, pix, device=device, geometry=g, planes=(lo, hi),
                                 **keywords)
            row = {"planes": [lo, hi], "device": device, "samples": op.engine.num_kept,
                   "vis2dirty_s": median_time(lambda: op.vis2dirty(vis), a.repeats),
                   "dirty2vis_s": median_time(lambda: op.dirty2vis(dirty), a.repeats),
                   "spread_device_s": op.engine.stage_seconds("grid"),
                   "interp_device_s": op.engine.stage_seconds("degrid")}
            print(row, flush=True)
            rows.append(row)
            del op
    out["slabs"] = rows
    image, image2 = np.ones(npix * npix, np.float32), np.ones(npix * npix, np.float32)
    values, values2 = np.ones(vis.size, np.complex64), np.ones(vis.size, np.complex64)
    workers = os.cpu_count()
    out["host"] = {
        "add_images_s": median_time(lambda: add_at(image, image2, None, workers), a.repeats),
        "add_vis_s": median_time(lambda: add_at(values, values2, None, workers), a.repeats),
        "zeros_vis_s": median_time(lambda: values.fill(0), a.repeats),
        "copy_vis_s": median_time(lambda: values.copy(), a.repeats)}
    print("host:", out["host"], flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
