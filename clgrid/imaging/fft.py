"""The FFT seam of the w-gridding operator: unnormalised 2-D transforms of a padded grid,
with the crop to (or the zero-padding from) the image folded in.

`HostFFT` runs ducc0.fft or scipy.fft with threads in place on host arrays, in the grid's own
precision (complex64 stays complex64), and transforms the second axis only where the
image needs it: of the ``nu`` rows of the grid only ``npix_x`` survive the crop, so the
second pass works on those alone (1 / sigma of the work of a full pass); the crop itself
is views, never a copy.  Given a plane's `clgrid.imaging.regions.Region` (where its grid
holds taps) the first pass runs there only, along whichever axis makes less work.
`DeviceFFT` (pyvkfft) transforms the whole grid.
A device FFT slots in as another class with the same two methods; the operator calls
nothing else.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..call_warnings import warn

__all__ = ["HostFFT", "MappedHostFFT", "DeviceFFT", "crop", "embed", "clear_outside", "host_fft_library", "pass_order"]


def _blocks(n: int, npix: int):
    """Grid index ``(i - npix // 2) mod n`` for image index i as two slices: (grid, image)."""
    half = npix // 2
    return ((slice(n - half, n), slice(0, half)), (slice(0, npix - half), slice(half, npix)))


def crop(a: np.ndarray, npix: int, axis: int) -> np.ndarray:
    """The image's ``npix`` entries of a periodic grid axis, centre at grid index 0."""
    n = a.shape[axis]
    out_shape = list(a.shape)
    out_shape[axis] = npix
    out = np.empty(out_shape, a.dtype)
    for src, dst in _blocks(n, npix):
        index_src = [slice(None)] * a.ndim
        index_dst = [slice(None)] * a.ndim
        index_src[axis], index_dst[axis] = src, dst
        out[tuple(index_dst)] = a[tuple(index_src)]
    return out


def embed(a: np.ndarray, n: int, axis: int, dtype=None) -> np.ndarray:
    """``crop``'s adjoint: the image axis placed in a zero grid axis of length ``n``."""
    npix = a.shape[axis]
    out_shape = list(a.shape)
    out_shape[axis] = n
    out = np.zeros(out_shape, dtype or a.dtype)
    for src, dst in _blocks(n, npix):
        index_grid = [slice(None)] * a.ndim
        index_img = [slice(None)] * a.ndim
        index_grid[axis], index_img[axis] = src, dst
        out[tuple(index_grid)] = a[tuple(index_img)]
    return out


def clear_outside(grid: np.ndarray, npix_x: int, npix_y: int, image_rows: slice) -> None:
    """Zero the grid (nu, nv) where an embedded image (npix_x, npix_y) leaves it zero, for a
    share of it: the image rows ``image_rows`` outside the image's columns, and the same
    share of the grid rows outside the image.  Slices covering ``range(npix_x)`` clear it
    all (threads each take one), without writing the image's own cells twice."""
    nu, nv = grid.shape
    gap_rows = (npix_x - npix_x // 2, nu - npix_x // 2)
    gap_cols = slice(npix_y - npix_y // 2, nv - npix_y // 2)
    share = gap_rows[1] - gap_rows[0]
    grid[gap_rows[0] + image_rows.start * share // npix_x:gap_rows[0] + image_rows.stop * share // npix_x] = 0
    for rows, image in _blocks(nu, npix_x):
        lo, hi = max(image.start, image_rows.start), min(image.stop, image_rows.stop)
        if hi > lo:
            grid[rows.start + lo - image.start:rows.start + hi - image.start, gap_cols] = 0


HOST_FFT_LIBRARIES = ("auto", "scipy", "ducc0")


def host_fft_library(choice: str) -> str:
    """The library behind a [wgridding] ``host_fft`` choice: "auto" is ducc0.fft where it
    is installed (faster than scipy.fft on CPUs: docs/benchmarks/imaging.md), else
    scipy.fft; "ducc0" without ducc0 installed is refused."""
    if choice not in HOST_FFT_LIBRARIES:
        raise ValueError(f"tuning [wgridding] host_fft must be one of {HOST_FFT_LIBRARIES}, got {choice!r}")
    if choice == "scipy":
        return choice
    try:
        import ducc0.fft  # noqa: F401
        return "ducc0"
    except ImportError:
        if choice == "ducc0":
            raise ImportError("tuning [wgridding] host_fft = 'ducc0' needs ducc0: pip install ducc0") from None
        return "scipy"


_pool_checked = False


def check_ducc0_pool(workers: int) -> None:
    """Once per process: a warning where ducc0's thread pool holds fewer threads than
    ``workers`` (at most the machine's), so that its FFTs run on fewer threads than asked.
    ducc0 sizes the pool when first used, from ``$DUCC0_NUM_THREADS``, else
    ``$OMP_NUM_THREADS``, which Dask's nanny sets to 1 in every worker (and in a
    `LocalCluster`'s client process)."""
    global _pool_checked
    if _pool_checked:
        return
    _pool_checked = True
    import ducc0.misc

    size, wanted = ducc0.misc.thread_pool_size(), min(int(workers), os.cpu_count() or 1)
    if size < wanted:
        warn(f"clgrid: ducc0's thread pool holds {size} thread(s), so the host FFT runs on {size}, not the "
             f"{wanted} asked (nthreads): ducc0 sized it from $DUCC0_NUM_THREADS "
             f"({os.environ.get('DUCC0_NUM_THREADS')!r}) or $OMP_NUM_THREADS "
             f"({os.environ.get('OMP_NUM_THREADS')!r}; Dask's nanny sets it to 1 in its workers). Set "
             f"DUCC0_NUM_THREADS in the process's environment before it starts (a LocalCluster: "
             f"env={{'DUCC0_NUM_THREADS': '{wanted}'}})", RuntimeWarning, stacklevel=None)


class HostFFT:
    """A threaded FFT (ducc0.fft or scipy.fft) in place on a host grid, with the crop folded
    in: ``backward`` is ``sum_g G[g] exp(+2 pi i g a / N)`` (unscaled) on every column,
    then on the rows the image keeps only, and returns where each block of the image lies
    in the grid (views, no copies); ``forward`` is the adjoint's transform (exponent ``-``)
    of a grid whose only non-zero rows are the image's: those rows, then every column."""

    def __init__(self, workers: int | None = None, library: str = "auto"):
        self.workers = int(workers) if workers and workers > 0 else (os.cpu_count() or 1)
        self.library = host_fft_library(library)

    def _in_place(self, view, axis, forward):
        if self.library == "ducc0":
            import ducc0.fft

            check_ducc0_pool(self.workers)
            ducc0.fft.c2c(view, axes=(axis,), forward=forward, inorm=0, out=view, nthreads=self.workers)
            return
        import scipy.fft

        fft = scipy.fft.fft if forward else scipy.fft.ifft
        out = fft(view, axis=axis, norm="backward" if forward else "forward", overwrite_x=True,
                  workers=self.workers)
        if not np.shares_memory(out, view):
            view[...] = out

    def transform(self, grid: np.ndarray, npix_x: int, forward: bool, npix_y: int | None = None,
                  region=None) -> None:
        """The pruned 2-D transform in place.  Without ``region``: backward every column, then
        the image's rows; forward the image's rows (the others are 0), then every column.

        ``region`` (a `clgrid.imaging.regions.Region`: the grid rows and columns where the
        plane has data, or will be read) prunes the other pass too, in the cheaper of two
        orders (`pass_order`): columns first (the region's columns, then the image's
        rows) or rows first (the region's rows, then the image's ``npix_y`` columns).
        Backward, the grid must be zero outside the region; forward, zero outside the
        image, and only the region's cells are right afterwards."""
        nu, nv = grid.shape
        image_rows = [r for r, _ in _blocks(nu, npix_x) if r.stop > r.start]
        if region is None or npix_y is None:
            columns_first, region_runs = True, [slice(0, nv)] if region is None else region.cols
        else:
            columns_first = pass_order(grid.shape, npix_x, npix_y, region) == "columns"
            region_runs = region.cols if columns_first else region.rows
        if columns_first:           # axis 0 (along u) over columns, axis 1 over the image's rows
            column_runs, row_runs = region_runs, image_rows
        else:                       # axis 1 over the region's rows, axis 0 over the image's columns
            column_runs = [c for c, _ in _blocks(nv, npix_y) if c.stop > c.start]
            row_runs = region_runs
        first, second = (0, column_runs), (1, row_runs)
        if columns_first == forward:
            first, second = second, first
        for axis, runs in (first, second):
            for run in runs:
                self._in_place(grid[:, run] if axis == 0 else grid[run], axis, forward)

    def backward(self, grid: np.ndarray, npix_x: int, npix_y: int, region=None) -> list:
        """Transform ``grid`` (nu, nv) in place; returns ``[(image_index, grid_view), ...]``:
        ``image[image_index]`` is ``grid_view`` (4 blocks: the crop's quadrants).
        ``region``: where the plane has data (`transform`)."""
        self.transform(grid, npix_x, False, npix_y, region)
        return self.image_blocks(grid, npix_x, npix_y)

    def image_blocks(self, grid: np.ndarray, npix_x: int, npix_y: int) -> list:
        """The same ``(image_index, grid_view)`` pairs as `backward`, with no transform."""
        nu, nv = grid.shape
        return [((ir, ic), grid[r, c]) for r, ir in _blocks(nu, npix_x) for c, ic in _blocks(nv, npix_y)
                if r.stop > r.start and c.stop > c.start]

    def forward(self, grid: np.ndarray, npix_x: int, npix_y: int | None = None, region=None) -> None:
        """Transform ``grid`` (nu, nv) in place, the image's rows first (the others are 0);
        ``region``: the cells that will be read (`transform`)."""
        self.transform(grid, npix_x, True, npix_y, region)


def pass_order(shape: tuple, npix_x: int, npix_y: int, region) -> str:
    """"columns" or "rows": which pass of a pruned 2-D transform of a (nu, nv) grid goes over
    the region (`HostFFT.transform`), by the count of 1-D transforms times their length's
    n log n (ducc0's wgridder weighs its passes the same way)."""
    nu, nv = shape
    fu, fv = nu * math.log2(max(nu, 2)), nv * math.log2(max(nv, 2))
    columns_first = _cells(region.cols) * fu + npix_x * fv
    rows_first = _cells(region.rows) * fv + npix_y * fu
    return "columns" if columns_first <= rows_first else "rows"


def _cells(runs) -> int:
    return sum(r.stop - r.start for r in runs)


def import_vkfft():
    """pyvkfft's OpenCL backend (the ``vkfft`` extra), or ImportError saying why not.

    A pyvkfft built here by a compiler whose runtime library (Intel's libsvml) lives in
    the interpreter's library folder and not on the loader's path is loaded by
    preloading that library from there first."""
    try:
        import pyvkfft.opencl as vk
        return vk
    except ImportError:
        raise ImportError("the device FFT needs pyvkfft built for OpenCL: "
                          "VKFFT_BACKEND=opencl pip install 'clgrid[vkfft]' (with the OpenCL headers: "
                          "apt-get install opencl-headers ocl-icd-opencl-dev)") from None
    except OSError as first:
        import ctypes
        import sysconfig
        from pathlib import Path

        libdir = Path(sysconfig.get_config_var("LIBDIR") or "")
        exc = first
        for _ in range(8):          # each preload may name the next missing library
            missing = str(exc).split(":")[0].strip()
            candidate = libdir / missing
            if not candidate.is_file():
                raise ImportError(f"pyvkfft is installed but cannot load: {first}") from None
            try:
                ctypes.CDLL(str(candidate), mode=ctypes.RTLD_GLOBAL)
                import pyvkfft.opencl as vk
                return vk
            except OSError as again:
                exc = again
        raise ImportError(f"pyvkfft is installed but cannot load: {first}") from None


_vkfft_apps: dict = {}


class DeviceFFT:
    """In-place unnormalised 2-D C2C transforms of a device grid through pyvkfft (VkFFT's
    OpenCL backend), on the operator's queue: ``backward`` exponent ``+``, ``forward``
    ``-``, as `HostFFT`, but on a pyopencl Buffer holding (nu, nv) complex values."""

    def __init__(self, queue, nu: int, nv: int, dtype):
        import pyopencl.array as cla

        self.queue, self.shape, self.dtype = queue, (int(nu), int(nv)), np.dtype(dtype)
        key = (queue.int_ptr, self.shape, self.dtype)
        if key not in _vkfft_apps:
            # VkFFT generates and builds its kernels per plan: kept for the next operator
            # of the same grid (one-call vis2dirty makes one per call)
            _vkfft_apps[key] = import_vkfft().VkFFTApp(self.shape, self.dtype, queue=queue, ndim=2, norm=0,
                                                       inplace=True)
        self._app = _vkfft_apps[key]
        self._array = cla

    def _wrap(self, buffer):
        return self._array.Array(self.queue, self.shape, self.dtype, data=buffer)

    def backward(self, buffer):
        a = self._wrap(buffer)
        self._app.ifft(a, a)

    def forward(self, buffer):
        a = self._wrap(buffer)
        self._app.fft(a, a)


class MappedHostFFT:
    """The host's threaded FFT (`HostFFT`) run in place on a device buffer mapped into host
    memory: on a CPU device (PoCL) mapping copies nothing, so the operator's device-side
    crop, w phase and grid correction (clgrid/cl_kernels/wgrid_planes.cl) apply with no host
    copy of a plane at all."""

    def __init__(self, queue, nu: int, nv: int, dtype, npix_x: int, host: HostFFT, npix_y: int | None = None):
        self.queue, self.shape, self.dtype = queue, (int(nu), int(nv)), np.dtype(dtype)
        self.npix_x, self.host = int(npix_x), host
        self.npix_y = None if npix_y is None else int(npix_y)

    def _transform(self, buffer, forward: bool, region=None):
        import pyopencl as cl

        flags = cl.map_flags.READ | cl.map_flags.WRITE
        grid, _ = cl.enqueue_map_buffer(self.queue, buffer, flags, 0, self.shape, self.dtype, is_blocking=True)
        try:
            self.host.transform(grid, self.npix_x, forward, self.npix_y, region)
        finally:
            grid.base.release(self.queue)

    def backward(self, buffer, region=None):
        self._transform(buffer, False, region)

    def forward(self, buffer, region=None):
        self._transform(buffer, True, region)
