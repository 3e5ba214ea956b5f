"""The libraries clgrid is compared with, each called the way its own documentation times it.

- ducc0.wgridder (CPU): one call grids, transforms and corrects; with ``verbosity=1`` it
  prints its own timers, among them "gridding proper" (the spreading loop alone) and the
  steps before it ("building index": its sort of the visibilities, ...).  Those timers
  are the only way to see its kernel time, so `ducc0_vis2dirty` reads them from the
  C library's stdout.
- FINUFFT (CPU) and cuFINUFFT (NVIDIA GPUs): a type-1 plan is made (``Plan``), given its
  points (``setpts``: the sort) and executed; with ``spreadinterponly=1``
  (``gpu_spreadinterponly=1``) execute only spreads onto the fine grid, which is the
  spreader's time alone.  Kernel widths follow from ``eps`` and ``upsampfac``; the
  width chosen is read from the library's debug output.

Every function returns the result and a dict of named seconds; the image conventions
are ducc0's (``vis2dirty``: ``dirty[ix, iy] = Re sum vis exp(+2 pi i (u x + v y))``,
x with the first axis), which `clgrid.vis2dirty` shares.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import tempfile
import time

import numpy as np

from ..planning.host import SPEED_OF_LIGHT

__all__ = ["version", "captured_stdout", "ducc0_vis2dirty", "finufft_width", "finufft_spread",
           "finufft_type1", "cufinufft_spread", "cufinufft_type1", "DUCC0_SETUP_TIMERS"]

# ducc0's top-level timers that come before the gridding proper: its set-up of the call.
DUCC0_SETUP_TIMERS = ("parameter calculation", "Initial scan", "Baseline construction", "building index")
_DUCC0_TIMER = re.compile(r"^\+- (.+?)\s*:\s*[\d.]+% \(([\d.eE+-]+)s\)")
_DUCC0_TOTAL = re.compile(r"Total wall clock time for gridding:\s*([\d.eE+-]+)s")


def version(module: str) -> str | None:
    """The installed version of a peer library, or None when it is not importable."""
    try:
        return str(importlib.import_module(module).__version__)
    except ImportError:
        return None
    except Exception as exc:   # a library that is present but fails to load (no GPU driver, ...)
        return f"unusable: {type(exc).__name__}: {exc}"[:200]


def captured_stdout(fn):
    """``(fn(), text)``: what ``fn`` wrote to file descriptor 1, where C libraries print."""
    sys.stdout.flush()
    with tempfile.TemporaryFile(mode="w+") as sink:
        saved = os.dup(1)
        os.dup2(sink.fileno(), 1)
        try:
            result = fn()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        sink.seek(0)
        return result, sink.read()


def _ducc0_timers(text: str) -> dict:
    """ducc0's top-level timers (seconds by name), its total, and the support it chose."""
    timers = {}
    for line in text.splitlines():
        match = _DUCC0_TIMER.match(line.strip())
        if match:
            timers[match.group(1)] = float(match.group(2))
    total = _DUCC0_TOTAL.search(text)
    support = re.search(r"supp=(\d+)", text)
    if total is None or support is None or "gridding proper" not in timers:
        raise RuntimeError(f"ducc0's timer output was not understood:\n{text[:2000]}")
    return dict(timers, total=float(total.group(1)), support=int(support.group(1)))


def ducc0_vis2dirty(uvw, freq, vis, npix: int, pixsize: float, epsilon: float, do_wgridding: bool,
                    nthreads: int):
    """ducc0's vis2dirty with its timers: ``(image, seconds, support)``; seconds has
    ``kernel`` ("gridding proper"), ``setup`` (`DUCC0_SETUP_TIMERS`), ``whole`` (the call,
    wall clock) and every top-level timer by its own name."""
    import ducc0.wgridder.experimental as wgridder

    def call():
        return wgridder.vis2dirty(uvw=uvw, freq=freq, vis=vis, npix_x=npix, npix_y=npix, pixsize_x=pixsize,
                                  pixsize_y=pixsize, epsilon=epsilon, do_wgridding=do_wgridding,
                                  nthreads=nthreads, verbosity=1)

    start = time.perf_counter()
    image, text = captured_stdout(call)
    whole = time.perf_counter() - start
    timers = _ducc0_timers(text)
    support = timers.pop("support")
    seconds = {"kernel": timers["gridding proper"],
               "setup": sum(timers.get(name, 0.0) for name in DUCC0_SETUP_TIMERS), "whole": whole,
               **{f"ducc0: {name}": value for name, value in timers.items()}}
    return image, seconds, support


def _finufft_points(uvw_m, freq, pixsize):
    """FINUFFT's coordinates in radians of the fine grid's period: ``2 pi u x`` per pixel."""
    scale = 2 * np.pi * pixsize * float(freq[0]) / SPEED_OF_LIGHT
    return (uvw_m[:, 0] * scale).astype(np.float32), (uvw_m[:, 1] * scale).astype(np.float32)


def finufft_width(epsilon: float, upsampfac: float = 2.0) -> int:
    """The kernel width FINUFFT chooses for ``epsilon`` in single precision (its debug output)."""
    import finufft

    _, text = captured_stdout(lambda: finufft.Plan(1, (64, 64), eps=epsilon, isign=1, dtype="complex64",
                                                   nthreads=1, spreadinterponly=1, upsampfac=upsampfac,
                                                   debug=1))
    match = re.search(r"ns=(\d+)", text)
    if match is None:
        raise RuntimeError(f"FINUFFT's debug output was not understood:\n{text[:2000]}")
    return int(match.group(1))


def finufft_spread(uvw_m, freq, vis, fine: int, pixsize: float, epsilon: float, nthreads: int):
    """FINUFFT's spreader alone onto a ``fine``-square grid: ``(grid, seconds)`` with ``setup``
    (``Plan`` and ``setpts``) and ``whole`` (``Plan``, ``setpts`` and ``execute`` with
    ``spreadinterponly=1``, wall clock, the output's allocation included) of one plan, and
    ``kernel``, the "t1 fancy spread" timer (the sorted points spread by subproblems and
    added to the grid) and ``finufft: zero output array`` of a second plan made with
    ``spread_debug=1`` (whose printing would otherwise fall into the first's times)."""
    import finufft

    x, y = _finufft_points(uvw_m, freq, pixsize)
    values = np.ascontiguousarray(vis.reshape(-1), np.complex64)

    def plan(**debug):
        made = finufft.Plan(1, (fine, fine), eps=epsilon, isign=1, dtype="complex64", nthreads=nthreads,
                            spreadinterponly=1, upsampfac=2.0, **debug)
        made.setpts(x, y)
        return made

    start = time.perf_counter()
    quiet = plan()
    ready = time.perf_counter()
    grid = quiet.execute(values)
    done = time.perf_counter()
    _, text = captured_stdout(lambda: plan(spread_debug=1).execute(values))
    timers = {name: re.search(rf"{name}:?\s+([\d.eE+-]+) s", text)
              for name in ("t1 fancy spread", "zero output array")}
    if not all(timers.values()):
        raise RuntimeError(f"FINUFFT's spread_debug output was not understood:\n{text[:2000]}")
    return grid, {"setup": ready - start, "kernel": float(timers["t1 fancy spread"].group(1)),
                  "finufft: zero output array": float(timers["zero output array"].group(1)), "whole": done - start}


def finufft_type1(uvw_m, freq, vis, npix: int, pixsize: float, epsilon: float, nthreads: int):
    """A 2-D dirty image by FINUFFT's type-1 transform (no w term), ducc0's convention:
    ``(image, seconds)`` with ``setup`` (``Plan``, ``setpts``), ``call`` (``execute``:
    spreading, FFT, deconvolution) and ``whole``."""
    import finufft

    x, y = _finufft_points(uvw_m, freq, pixsize)
    start = time.perf_counter()
    plan = finufft.Plan(1, (npix, npix), eps=epsilon, isign=1, dtype="complex64", nthreads=nthreads)
    plan.setpts(x, y)
    ready = time.perf_counter()
    image = plan.execute(np.ascontiguousarray(vis.reshape(-1), np.complex64)).real
    done = time.perf_counter()
    return image, {"setup": ready - start, "call": done - ready, "whole": done - start}


def _cufinufft_call(uvw_m, freq, vis, shape, pixsize, epsilon, **options):
    """A cuFINUFFT type-1 plan run once on device arrays; GPU time by CUDA events."""
    import cufinufft
    import cupy

    x, y = (cupy.asarray(a) for a in _finufft_points(uvw_m, freq, pixsize))
    values = cupy.asarray(np.ascontiguousarray(vis.reshape(-1), np.complex64))
    marks = [cupy.cuda.Event() for _ in range(3)]
    marks[0].record()
    plan = cufinufft.Plan(1, shape, eps=epsilon, isign=1, dtype="complex64", **options)
    plan.setpts(x, y)
    marks[1].record()
    out = plan.execute(values)
    marks[2].record()
    marks[2].synchronize()
    setup, run = (cupy.cuda.get_elapsed_time(a, b) / 1e3 for a, b in zip(marks, marks[1:]))
    return out.get(), setup, run


def cufinufft_spread(uvw_m, freq, vis, fine: int, pixsize: float, epsilon: float):
    """cuFINUFFT's spreader alone (``gpu_spreadinterponly=1``), as `finufft_spread`; inputs
    already on the GPU, times by CUDA events."""
    grid, setup, run = _cufinufft_call(uvw_m, freq, vis, (fine, fine), pixsize, epsilon,
                                       gpu_spreadinterponly=1, upsampfac=2.0)
    return grid, {"setup": setup, "kernel": run, "whole": setup + run}


def cufinufft_type1(uvw_m, freq, vis, npix: int, pixsize: float, epsilon: float):
    """A 2-D dirty image by cuFINUFFT's type-1 transform, as `finufft_type1`."""
    image, setup, run = _cufinufft_call(uvw_m, freq, vis, (npix, npix), pixsize, epsilon)
    return image.real, {"setup": setup, "call": run, "whole": setup + run}
