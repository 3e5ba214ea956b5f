"""What a device's share of a planes split costs: one-device operators over slabs of the
w-planes ``[0, k)`` and ``[k, n)`` (`WGridder(planes=...)` on the whole data's geometry),
each alone, for several boundaries ``k``; reused ``vis2dirty`` / ``dirty2vis`` medians, the
slab's samples, and the host's costs of a split call (the partial results' sums, a zeroed
visibility array).  The figures a split's cost model is fitted to.

    python3 benchmarks/split_sweep.py --devices nvidia --bounds 40 44 47 51

``--weights`` measures the device list itself instead (`WGridder(device=[...])`, split by
planes) at each ``split_sample_weight`` given (`tuning=`), interleaved with one device:
the slabs each weight chooses and the speedups they reach.

    python3 benchmarks/split_sweep.py --devices nvidia --weights 1.0 1.5/1.0 table
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
    p.add_argument("--weights", nargs="+", default=None,
                   help="the device list at these split_sample_weights instead of slabs alone: W (both "
                        "directions), V/D (vis2dirty's, dirty2vis's) or 'table'")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    data = make_set(*SETS[a.set])
    devices = expand(a.devices)
    if a.weights:
        out = weights_part(data, devices, a)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=1)
        return 0
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


def weights_part(data: dict, devices: list, a) -> dict:
    """The device list at each of ``a.weights`` against one device, reused calls interleaved
    (medians of ``a.repeats`` after a warm-up call each)."""
    from timing import interleaved

    uvw, freq, vis, dirty, npix, pix = (data[k] for k in ("uvw", "freq", "vis", "dirty", "npix", "pix"))
    keywords = dict(epsilon=1e-4, do_wgridding=True, precision="single", nthreads=os.cpu_count())
    operators = {"one": clgrid.WGridder(uvw, freq, npix, npix, pix, pix, device=devices[0], **keywords)}
    for w in a.weights:
        v, d = (None, None) if w == "table" else (float(x) for x in (w.split("/") * 2)[:2])
        tuning = {} if v is None else {"split_sample_weight": v, "split_sample_weight_dirty2vis": d}
        operators[w] = clgrid.WGridder(uvw, freq, npix, npix, pix, pix, device=devices, split="planes",
                                       tuning=tuning, **keywords)
    runs = {}
    for key, op in operators.items():
        runs[f"{key}|vis2dirty"] = lambda op=op: op.vis2dirty(vis)
        runs[f"{key}|dirty2vis"] = lambda op=op: op.dirty2vis(dirty)
    medians, times, _ = interleaved(runs, a.repeats)
    out = {"set": a.set, "num_vis": int(vis.size), "devices": devices, "runs": {}}
    for key, op in operators.items():
        row = {"vis2dirty_s": medians[f"{key}|vis2dirty"], "dirty2vis_s": medians[f"{key}|dirty2vis"],
               "slabs": [[e.planes.start, e.planes.stop, e.num_kept] for e in op.engines],
               "slabs_by_direction": {d: [[e.direction_planes[d].start, e.direction_planes[d].stop]
                                          for e in op.engines] for d in ("vis2dirty", "dirty2vis")}}
        row["speedup_vis2dirty"] = medians["one|vis2dirty"] / row["vis2dirty_s"]
        row["speedup_dirty2vis"] = medians["one|dirty2vis"] / row["dirty2vis_s"]
        out["runs"][key] = row
        print(key, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
