"""A tiny `WGridder` vis2dirty and dirty2vis with the "bins" spread or the FPGA pipelines
("fpga"), run under Oclgrind (``oclgrind python3 tests/oclgrind_wgrid_case.py OUT.npz
[--spread fpga]``): the planning, gather, spread and interpolation kernels run on the
simulator, the FFT on the host; the image and visibilities are saved for the test to
compare with the "rows" spread's on the test device."""

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


def operator(uvw, freq, device, tuning):
    return clgrid.WGridder(uvw, freq, NPIX, NPIX, PIXSIZE, PIXSIZE, epsilon=1e-4, do_wgridding=True,
                           precision="single", device=device, tuning=tuning)


def image(uvw, freq, vis, device, tuning):
    return operator(uvw, freq, device, tuning).vis2dirty(vis)


def model(seed: int):
    """An image to predict visibilities from."""
    return np.random.default_rng(seed + 1).normal(size=(NPIX, NPIX)).astype(np.float32)


TUNINGS = {"bins": {"spread": "bins", "bin_u": 8, "bin_v": 8, "bins_work_group": 16, "bins_subproblem": 20,
                    "fft": "host", "atomic": "xchg"},  # every global access atomic: "cas"'s first read is a benign race
           "fpga": {"spread": "fpga", "tile": 8, "banks": 2, "unroll_u": 2, "shift_depth": 3, "fft": "host"}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spread", default="bins", choices=sorted(TUNINGS))
    args = parser.parse_args()
    uvw, freq, vis = tiny_case(args.seed)
    op = operator(uvw, freq, "oclgrind", TUNINGS[args.spread])
    np.savez(args.out, result=op.vis2dirty(vis), predicted=op.dirty2vis(model(args.seed)))
