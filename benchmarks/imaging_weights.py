"""Imaging weights (`clgrid.imager.weighting.WeightGrid`) on the host threads against the
OpenCL device: the time of one image's weights (density, finish, apply), medians.

    python benchmarks/imaging_weights.py --device pocl
    python benchmarks/imaging_weights.py --device nvidia --samples 64e6 --json out/imaging_weights_h100.json

The samples are MeerKAT tracks (`clgrid.tools.datasets`, 64 dishes, 2016 baselines, a
6-hour track) over ``--channels`` channels at 1.30-1.40 GHz, as many integrations as make
``--samples``, with random float32 visibility weights (10% zero); the image is
``--npix``² at 1.2" (WSClean's padded weight grid of 1.2x that).  Each repeat times both
paths on fresh copies of the weights, the order alternating, and checks that they give
the same weights (to float32's rounding).  This is what ``clgrid image --weights-on auto``
chooses from (docs/benchmarks/imaging.md, "Imaging weights on the device").
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from report import report  # noqa: E402


def tracks(samples: int, channels: int, seed: int = 7):
    """uvw (rows, 3), freqs, float32 weights of about ``samples`` samples."""
    from clgrid.tools import datasets

    layout = datasets.load_layout("meerkat")
    ntime = max(1, int(round(samples / channels / 2016)))
    hours = np.linspace(-3, 3, ntime) * np.pi / 12
    uvw = datasets.simulate_uvw(layout, declination=-0.5, hour_angles=hours).reshape(-1, 3)
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.5, 2.0, (uvw.shape[0], channels)).astype(np.float32)
    weights[rng.random(weights.shape) < 0.1] = 0
    return uvw, np.linspace(1.30e9, 1.40e9, channels), weights


def one(mode, npix, scale, uvw, freqs, weights, device):
    """Seconds of add + finish + apply, and the weights it gave."""
    from clgrid.imager.weighting import WeightGrid

    values = weights.copy()
    used = np.zeros(values.shape, bool)
    started = time.perf_counter()
    grid = WeightGrid(mode, npix, npix, scale, scale, device=device)
    grid.add(uvw, freqs, values)
    grid.finish()
    grid.apply(uvw, freqs, values, used=used)
    return time.perf_counter() - started, values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True, help="the OpenCL device of the device path")
    parser.add_argument("--samples", type=float, default=8e6, help="samples (rows x channels), default 8e6")
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--npix", type=int, default=4096)
    parser.add_argument("--mode", choices=["natural", "uniform", "briggs"], default="uniform")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.channels < 1 or args.npix < 16 or args.repeats < 1:
        parser.error("--samples, --channels, --repeats must be >= 1 and --npix >= 16")
    from clgrid.device.runtime import select_device

    device = select_device(args.device)
    uvw, freqs, weights = tracks(int(args.samples), args.channels)
    scale = math.radians(1.2 / 3600)
    one(args.mode, 64, scale, uvw[:100], freqs, weights[:100], device)     # programs built outside the timing
    times = {"host": [], "device": []}
    for r in range(args.repeats):
        order = ("host", "device") if r % 2 == 0 else ("device", "host")
        got = {}
        for where in order:
            seconds, got[where] = one(args.mode, args.npix, scale, uvw, freqs, weights,
                                      None if where == "host" else device)
            times[where].append(seconds)
        np.testing.assert_allclose(got["device"], got["host"], rtol=3e-7, atol=0)
    result = {"device": device.name.strip(), "samples": int(weights.size), "rows": int(uvw.shape[0]),
              "channels": args.channels, "npix": args.npix, "mode": args.mode, "host_threads": os.cpu_count(),
              "load_average": [round(v, 2) for v in os.getloadavg()]}
    for where, values in times.items():
        result[f"{where}_median_s"] = statistics.median(values)
        result[f"{where}_runs_s"] = [round(v, 4) for v in values]
    result["device_speedup"] = result["host_median_s"] / result["device_median_s"]
    print(f"{weights.size / 1e6:.1f} M samples, {args.npix}² ({args.mode}): host threads "
          f"{result['host_median_s']:.3f} s, {result['device']} {result['device_median_s']:.3f} s "
          f"(x{result['device_speedup']:.2f})", file=sys.stderr)
    report(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
