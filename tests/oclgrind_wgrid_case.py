"""A tiny `WGridder` call with the "bins" spread, run under Oclgrind
(``oclgrind python3 tests/oclgrind_wgrid_case.py OUT.npz``): the planning,
gather and spread kernels run on the simulator, the FFT on the host; the image is saved
for the test to compare with the "rows" spread's on the test device."""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402

NPIX, PIXSIZE = 16, 0.01


def tiny_case(seed: int, nrow: int = 24):
    """Points on a 16^2 image's padded grid, with w, and their values."""
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-1, 1, size=(nrow, 3)) * np.array([0.45 / PIXSIZE, 0.45 / PIXSIZE, 20.0])
    freq = np.array([clgrid.planning.host.SPEED_OF_LIGHT])      # metres are wavelengths
    vis = (rng.normal(size=(nrow, 1)) + 1j * rng.normal(size=(nrow, 1))).astype(np.complex64)
    return uvw, freq, vis


def image(uvw, freq, vis, device, tuning):
    return clgrid.WGridder(uvw, freq, NPIX, NPIX, PIXSIZE, PIXSIZE, epsilon=1e-4, do_wgridding=True,
                           precision="single", device=device, tuning=tuning).vis2dirty(vis)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    uvw, freq, vis = tiny_case(args.seed)
    tuning = {"spread": "bins", "bin_u": 8, "bin_v": 8, "bins_work_group": 16,
              "bins_subproblem": 20, "fft": "host",
              "atomic": "xchg"}   # every global access atomic: the "cas" loop's first read is a benign race
    np.savez(args.out, result=image(uvw, freq, vis, "oclgrind", tuning))
