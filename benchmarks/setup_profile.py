"""Where an imaging operator's set-up goes (cProfile, after two warm-up set-ups): 4 M
MeerKAT-track visibilities, epsilon 1e-4, single, in 2-D (7168^2) and with w (4096^2).

    python3 benchmarks/setup_profile.py --device nvidia
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

import clgrid
from engine_ab import C, tracks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args(argv)
    uvw = tracks(a.rows)
    freq = np.array([1.4e9])
    pix = 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq.max() / C)
    for w, npix in ((False, 7168), (True, 4096)):
        kw = dict(uvw=uvw, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4,
                  do_wgridding=w, precision="single", device=a.device, nthreads=16)
        for _ in range(2):
            clgrid.WGridder(**kw).queue.finish()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            clgrid.WGridder(**kw).queue.finish()
            times.append(time.perf_counter() - start)
        print(f"do_wgridding={w} npix={npix}: set-up {1e3 * np.median(times):.1f} ms (median of 3)")
        profile = cProfile.Profile()
        profile.enable()
        clgrid.WGridder(**kw).queue.finish()
        profile.disable()
        stats = pstats.Stats(profile)
        stats.sort_stats("tottime").print_stats(a.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
