"""Side by side with CPU libraries: ducc0's wgridder and FINUFFT, on the same visibilities.

What differs, stated with every result:

- clgrid grids with its W-projection kernel stack (here one plane, w = 0) through
  OpenCL; its *kernel* time is the device time of the gridding kernel, its *total*
  adds planning, transfers and the FFT to an image.
- FINUFFT (type 1, ``spreadinterponly``) spreads onto an upsampled grid with its
  exponential-of-semicircle kernel: timed kernel-only; its image (a full type-1
  transform) gives its error.
- ducc0 ``ms2dirty`` does gridding, FFT and grid correction in one call and
  exposes no kernel-only time: timed whole.

Accuracy is measured the same way for all three: the dirty image of a small case
against an exact direct Fourier transform on the central pixels, ``||I - I_dft||_F /
||I_dft||_F``, in 2-D (w = 0), the only setting all three compute.
"""

from __future__ import annotations

import time

import numpy as np

from .bench import device_times
from .gridder import Gridder
from .imaging import dirty_image
from .kernels import KernelStack
from .plan import SPEED_OF_LIGHT

__all__ = ["available_libraries", "dft_image", "compare_cpu_libraries"]


def available_libraries() -> list[str]:
    found = []
    for name in ("finufft", "ducc0"):
        try:
            __import__(name)
            found.append(name)
        except ImportError:
            pass
    return found


def dft_image(uvw, vis, grid_size, cell_size, half_width):
    """Exact ``sum V exp(+2 pi i (u l + v m)) / M`` on the central (2h, 2h) pixels, [m, l]."""
    pix = np.arange(-half_width, half_width) * cell_size
    phase_u = np.exp(2j * np.pi * np.outer(uvw[:, 0], pix))        # (M, P) over l
    phase_v = np.exp(2j * np.pi * np.outer(uvw[:, 1], pix))        # (M, P) over m
    return (phase_v * vis[:, None]).T @ phase_u / uvw.shape[0]


def _centre(image, half_width):
    c = image.shape[-1] // 2
    return image[c - half_width:c + half_width, c - half_width:c + half_width]


def _clgrid_image(uvw, vis, n, cell, kernels, device):
    g = Gridder(n, cell, kernels, device=device, on_dropped="raise")
    grid, report = g.grid(uvw, vis[:, None], return_report=True)
    return dirty_image(grid, kernels, report["norm"])[0], report


def _finufft_image(uvw, vis, n, cell, eps, spread_only=False):
    import finufft

    x = 2 * np.pi * uvw[:, 0] * cell
    y = 2 * np.pi * uvw[:, 1] * cell
    # finufft's first axis is x: its output is [l, m]; ours is [m, l].
    out = finufft.nufft2d1(x, y, vis.astype(np.complex128), (n, n), eps=eps, isign=1,
                           spreadinterponly=int(spread_only), nthreads=2)
    return out.T / uvw.shape[0]


def _ducc_image(uvw, vis, n, cell, eps):
    import ducc0

    freq = np.array([SPEED_OF_LIGHT])  # 1 m wavelength: uvw in metres equals wavelengths
    image = ducc0.wgridder.ms2dirty(uvw=np.ascontiguousarray(uvw), freq=freq,
                                    ms=np.ascontiguousarray(vis[:, None].astype(np.complex128)),
                                    npix_x=n, npix_y=n, pixsize_x=cell, pixsize_y=cell, epsilon=eps,
                                    do_wstacking=False, nthreads=2)
    return image.T / uvw.shape[0]   # ducc0's first axis is l


def _best_of(fn, repeats):
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times[1:]))


def _uniform(rng, m, n, cell):
    du = 1 / (n * cell)
    uvw = np.zeros((m, 3))
    uvw[:, :2] = rng.uniform(-0.4 * n * du, 0.4 * n * du, (m, 2))
    vis = rng.standard_normal(m) + 1j * rng.standard_normal(m)
    return uvw, vis


def compare_cpu_libraries(num_vis: int = 200_000, grid_size: int = 1024, device=None,
                          accuracy: float = 1e-3, repeats: int = 3, seed: int = 3) -> list[dict]:
    """Time clgrid and the installed CPU libraries on the same uniform 2-D visibilities.

    Returns one row per library: what was timed, median seconds, visibilities per
    second, clgrid's kernel time divided by its time (above 1: the library is
    faster), and the image error against a direct Fourier transform on a
    2,000-visibility 256^2 case.  clgrid's error there is dominated by the nearest
    oversampled kernel sample of the seeds' semantics (about 2% at oversample 8),
    which is what texture interpolation addresses.
    """
    rng = np.random.default_rng(seed)
    cell = 1.0 / grid_size
    kernels = KernelStack.w_projection(grid_size=grid_size, cell_size=cell, w_max=0.0, num_planes=1,
                                       oversample=8, threshold=accuracy, max_support=8)
    small_n, small_cell, half = 256, 1.0 / 256, 32
    small_uvw, small_vis = _uniform(rng, 2000, small_n, small_cell)
    small_kernels = KernelStack.w_projection(grid_size=small_n, cell_size=small_cell, w_max=0.0,
                                             num_planes=1, oversample=8, threshold=accuracy, max_support=8)
    exact = dft_image(small_uvw, small_vis, small_n, small_cell, half)

    def error(image):
        return float(np.linalg.norm(_centre(image, half) - exact.real) / np.linalg.norm(exact.real))

    uvw, vis = _uniform(rng, num_vis, grid_size, cell)
    rows = []
    g = Gridder(grid_size, cell, kernels, device=device, on_dropped="raise")
    prepared = g.prepare(uvw, vis[:, None])

    clgrid_kernel = float(np.median(device_times(g, prepared, repeats)))
    total = _best_of(lambda: np.fft.ifft2(g.grid(uvw, vis[:, None])), repeats)
    rows.append(dict(library="clgrid", timed="gridding kernel (OpenCL events)", seconds=clgrid_kernel,
                     kernel_width=2 * int(kernels.supports[0]) + 1,
                     error=error(_clgrid_image(small_uvw, small_vis, small_n, small_cell, small_kernels,
                                               device)[0])))
    rows.append(dict(library="clgrid", timed="plan + transfers + gridding + FFT", seconds=total,
                     kernel_width=rows[0]["kernel_width"], error=rows[0]["error"]))
    libs = available_libraries()
    if "finufft" in libs:
        t = _best_of(lambda: _finufft_image(uvw, vis, grid_size, cell, accuracy, spread_only=True), repeats)
        rows.append(dict(library="finufft", timed="spreading only (spreadinterponly)", seconds=t,
                         kernel_width=None,
                         error=error(_finufft_image(small_uvw, small_vis, small_n, small_cell, accuracy).real)))
    if "ducc0" in libs:
        t = _best_of(lambda: _ducc_image(uvw, vis, grid_size, cell, accuracy), repeats)
        rows.append(dict(library="ducc0", timed="ms2dirty: gridding + FFT + correction", seconds=t,
                         kernel_width=None,
                         error=error(_ducc_image(small_uvw, small_vis, small_n, small_cell, accuracy))))
    for row in rows:
        row.update(num_vis=num_vis, grid_size=grid_size, vis_per_s=num_vis / row["seconds"],
                   clgrid_kernel_time_ratio=clgrid_kernel / row["seconds"])
    return rows
