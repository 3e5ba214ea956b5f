"""Imaging weights over Dask: natural, uniform and Briggs, as `clgrid image` (and WSClean)
compute them, for visibilities held as Dask arrays chunked along rows and channels.

`imaging_weights` builds a lazy graph of three steps:

1. each chunk's cell sums on its worker (`clgrid.imager.weighting.WeightGrid.cell_sums`,
   the host float64 path: the same cells, the same rule for what is left out): the
   occupied cells of the weight grid, each cell's sum of the chunk's visibility weights,
   and their total.  Sparse, so a task holds at most its own chunk's samples, never a
   dense grid per chunk;
2. one task adds them to one grid in chunk order (row block, then channel block), a fixed
   order: the density is the same from run to run for a chunking, and equals the
   whole data's in one `WeightGrid.add` to float64 rounding (exactly where the sums are
   exact in float64, e.g. integer weights), then turns it into imaging weights once
   (`WeightGrid.finish`: uniform / Briggs normalisation, the rank filter);
3. each chunk's weights multiplied by their cells' imaging weights on its worker
   (`WeightGrid.apply`), a dask array chunked as the visibilities.

On the host (``weights_on="host"``, and ``"auto"`` where the worker's device is the host's
own CPU) the density is summed in float64, as `WeightGrid(device=None)` sums it.  On the
device (``"device"``, and ``"auto"`` on a GPU), steps 1 and 3 run on each worker's OpenCL
device (`clgrid.imager.device_weighting.DeviceWeights`, as ``clgrid image --weights-on``):
a chunk's density in the device's 64-bit fixed point, downloaded as float64 and made
sparse (a dense float64 grid of the padded image's half uv plane is held for the moment
of that download), and each chunk's weights applied there with the finished grid's
float32 imaging weights, uploaded once per worker and device.  Step 2 is the same host
sum and `WeightGrid.finish` either way, so the two agree as the library's two paths do:
the cell sums to float64 rounding, the weights to float32's.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

import dask
import dask.array as da

from .chunks import Chunk, chunk_sizes, naming
from ..imager.weighting import WeightGrid, check_weighting

__all__ = ["imaging_weights"]


def _host_grid(spec: dict, threads: int) -> WeightGrid:
    grid = WeightGrid(**spec)               # device=None: the host float64 path
    grid.threads = threads
    return grid


def _used(chunk: Chunk, weights, mask, shape: tuple, dtype) -> np.ndarray:
    """A chunk's visibility weights (a new array of ``dtype``; ones without ``weights``), 0
    where ``mask`` is 0; non-finite weights refused."""
    out = np.ones(shape, dtype) if weights is None else np.array(weights, dtype, copy=True)
    if out.shape != shape:
        raise ValueError(f"weights of this chunk have shape {out.shape}, expected {shape}")
    bad = np.count_nonzero(~np.isfinite(out))
    if bad:
        raise ValueError(f"weights: {bad} non-finite values (give them weight 0 or mask them)")
    if mask is not None:
        out[np.asarray(mask) == 0] = 0
    return out


def _where(device, weights_on: str):
    """The device a task's passes run on, or None for the host threads (as ``clgrid image
    --weights-on``, resolved on the worker: its own device)."""
    if weights_on == "host":
        return None
    from ..imager.device_weighting import weights_device

    return weights_device(device, weights_on)[0]


def _device_weights(grid: WeightGrid, device):
    """A `DeviceWeights` of ``grid``'s geometry on ``device``."""
    from ..imager.device_weighting import DeviceWeights

    return DeviceWeights(device, grid.width, grid.height // 2, grid.width * grid.pixsize_x,
                         grid.height * grid.pixsize_y)


def _chunk_cell_sums(spec, threads, chunk, uvw, freq, weights, mask, shape, dtype, where=("host", None)):
    """One task: ``(cells, sums, total)`` of one chunk (`WeightGrid.cell_sums`, or the
    device's fixed-point density made sparse)."""
    with naming(chunk):
        used = _used(chunk, weights, mask, shape, dtype)
        grid = _host_grid(spec, threads)
        device = _where(where[1], where[0])
        if device is None:
            return grid.cell_sums(np.asarray(uvw), freq, used)
        on_device = _device_weights(grid, device)
        try:
            on_device.add(np.ascontiguousarray(uvw, np.float64), np.asarray(freq, np.float64), used)
            total = on_device.download_density(grid.grid)
        finally:
            on_device.release()
        flat = grid.grid.reshape(-1)
        cells = np.flatnonzero(flat)
        return cells, flat[cells], total


# each worker process's device copies of finished grids' imaging weights: one upload per
# (grid, device), the grid's lifetime (a finished grid is one object per worker process)
_on_devices: "weakref.WeakKeyDictionary[WeightGrid, dict]" = weakref.WeakKeyDictionary()
_on_devices_lock = threading.Lock()


def _applying(grid: WeightGrid, device):
    """``(DeviceWeights with grid's imaging weights on device, its lock)``, made once."""
    from ..device.runtime import get_queue

    key = get_queue(device).device.int_ptr
    with _on_devices_lock:
        per_device = _on_devices.setdefault(grid, {})
        if key not in per_device:
            on_device = _device_weights(grid, device)
            on_device.set_imaging(grid.grid)
            per_device[key] = (on_device, threading.Lock())
        return per_device[key]


def _finished(spec, threads, *parts) -> WeightGrid:
    """One task: the chunks' cell sums added in the order given, turned into imaging weights."""
    grid = _host_grid(spec, threads)
    for cells, sums, total in parts:
        grid.add_cell_sums(cells, sums, total)
    grid.finish()
    return grid


def _chunk_applied(grid: WeightGrid, chunk, uvw, freq, weights, mask, shape, dtype,
                   where=("host", None)) -> np.ndarray:
    """One task: a chunk's visibility weights times their cells' imaging weights."""
    with naming(chunk):
        out = _used(chunk, weights, mask, shape, dtype)
        device = _where(where[1], where[0])
        if device is None:
            grid.apply(np.asarray(uvw), freq, out)
            return out
        on_device, lock = _applying(grid, device)
        with lock:
            on_device.apply(np.ascontiguousarray(uvw, np.float64), np.asarray(freq, np.float64), out, None)
        return out


def _as_dask(name: str, a, chunks: tuple, shape: tuple):
    """``a`` (numpy or dask, of ``shape``) as a dask array with ``chunks``; a dask array
    chunked otherwise is refused by name."""
    if a is None:
        return None
    if np.shape(a) != shape:
        raise ValueError(f"{name} must have shape {shape} (rows, channels), got {np.shape(a)}")
    if not isinstance(a, da.Array):
        return da.from_array(np.asarray(a), chunks=chunks)
    if a.chunks != chunks:
        raise ValueError(f"{name} is chunked {a.chunks}, the other inputs {chunks}: chunk weights and mask "
                         f"alike, along rows as uvw (e.g. {name}.rechunk({chunks}))")
    return a


def imaging_weights(uvw, freq, weights=None, mask=None, *, mode: str = "uniform", npix_x: int, npix_y: int,
                    pixsize_x: float, pixsize_y: float, robust: float = 0.0, padding: float = 1.2,
                    super_weight: float = 1.0, rank_filter: float = 3.0, rank_filter_size: int = 16,
                    row_chunks=None, channel_chunks=None, nthreads: int = 1, weights_on: str = "auto",
                    device=None):
    """Imaging weights (natural, uniform or Briggs, as `clgrid image` and WSClean compute
    them) of visibilities chunked along rows and channels; lazy until computed.

    Parameters
    ----------
    uvw : dask or numpy array (nrow, 3)
        Baseline coordinates in metres, as for `clgrid.dask.vis2dirty`.
    freq : array (nchan,)
        Channel frequencies in Hz.
    weights : dask or numpy array (nrow, nchan), float, optional
        The visibility weights (e.g. the MS's WEIGHT_SPECTRUM); default 1 (float32).
        Non-finite values are refused (in the task of their chunk).
    mask : dask or numpy array (nrow, nchan), optional
        As `clgrid.dask.vis2dirty`'s: samples where it is 0 are left out of the density
        and get weight 0.
    mode : {"uniform", "natural", "briggs"}
        ``clgrid image --weight`` (default uniform, as WSClean's).
    npix_x, npix_y : int
        The image's size (before padding): the weight grid is the padded image's.
    pixsize_x, pixsize_y : float
        Pixel size in radians.
    robust : float
        Briggs' robustness (``mode="briggs"``; ``--weight briggs R``).
    padding, super_weight : float
        The weight grid's padding (1.2) and WSClean's ``-super-weight`` (1).
    rank_filter, rank_filter_size : float, int
        The rank filter's level (3; below 1: off) and window (16 cells), as
        ``--weighting-rank-filter`` / ``--weighting-rank-filter-size``.
    row_chunks, channel_chunks : int or tuple, optional
        The chunks where neither ``weights`` nor ``mask`` is a dask array (default: uvw's
        row chunks, all channels in one).
    nthreads : int
        Host threads per task (default 1: one task per worker thread already).
    weights_on : {"auto", "device", "host"}
        Where each chunk's passes over its samples run, as ``clgrid image --weights-on``:
        ``"device"`` the worker's OpenCL device (``device``), ``"host"`` its host threads in
        float64, ``"auto"`` the device where it is a GPU and the host where it is the host's
        own CPU, or where ``weights`` are not float32 (the device path takes float32).
        Chosen on each worker for its device.
    device : optional
        The device for ``weights_on`` (a name as ``device=`` elsewhere; default the
        worker's default device, ``$CLGRID_DEVICE``).

    Returns
    -------
    dask.array.Array (nrow, nchan)
        Each sample's visibility weight times its uv cell's imaging weight, of ``weights``'
        dtype (float32 without them), chunked as ``weights`` (or ``mask``); 0 where masked
        and for samples beyond the weight grid (baselines too long for the pixel size, as
        WSClean).  Use it as ``wgt=`` of `clgrid.dask.vis2dirty`.

    Raises
    ------
    ValueError
        An unknown ``mode`` or ``weights_on``, a bad size or keyword (named);
        ``weights_on="device"`` with weights that are not float32; ``weights`` and ``mask``
        chunked differently from each other or, along rows, from ``uvw``; wrong shapes.
    TypeError
        ``uvw`` not an array of shape (nrow, 3); ``weights`` not floating point.

    Notes
    -----
    Each chunk's cell sums are made on its worker (`WeightGrid.cell_sums`, the library's
    host float64 path), added in chunk order in one task, turned into imaging weights
    there once (`WeightGrid.finish`), and applied per chunk (`WeightGrid.apply`): the
    result equals the library's `WeightGrid` on the whole data to float64 rounding of
    the cell sums (exactly where they are exact, as with integer weights), and is the
    same from run to run for a given chunking.  The finished grid (the padded image's
    half uv plane, float64) is sent to each worker once.  One weight grid serves all
    channels (WSClean's MF weighting); for a grid per output channel, call it per
    channel group.  Normalise the image by the sum of the returned weights
    (``wgt.sum()``), as `clgrid image` does.
    """
    spec = check_weighting(mode, npix_x, npix_y, pixsize_x, pixsize_y, robust, padding, super_weight, rank_filter,
                 rank_filter_size)
    freq = np.asarray(freq, np.float64).reshape(-1)
    if freq.size == 0 or not np.all(np.isfinite(freq) & (freq > 0)):
        raise ValueError("freq must be positive, finite frequencies in Hz (at least one)")
    if not hasattr(uvw, "shape") or uvw.ndim != 2 or uvw.shape[1] != 3:
        raise TypeError(f"uvw must be an array of shape (nrow, 3), got {getattr(uvw, 'shape', type(uvw).__name__)}")
    if weights is not None:
        wdtype = weights.dtype
        if not np.issubdtype(wdtype, np.floating):
            raise TypeError(f"weights must be a float array, got {wdtype}")
    dtype = np.dtype(np.float32) if weights is None else np.dtype(weights.dtype)
    if weights_on not in ("auto", "device", "host"):
        raise ValueError(f"weights_on must be auto, device or host, got {weights_on!r}")
    if weights_on == "device" and dtype != np.float32:
        raise ValueError(f"weights_on='device' takes float32 weights (the device path's), got {dtype}")
    where = ("host" if dtype != np.float32 else weights_on, device)
    nrow, nchan = uvw.shape[0], freq.size
    shape = (nrow, nchan)
    reference = next((a for a in (weights, mask) if isinstance(a, da.Array)), None)
    if reference is not None:
        if reference.shape != shape:
            raise ValueError(f"{'weights' if reference is weights else 'mask'} must have shape {shape} (rows, "
                             f"channels), got {reference.shape}")
        chunks = reference.chunks
    else:
        rows = uvw.chunks[0] if isinstance(uvw, da.Array) and row_chunks is None else \
            chunk_sizes("row_chunks", nrow if row_chunks is None else row_chunks, nrow)
        chunks = (tuple(rows), chunk_sizes("channel_chunks", -1 if channel_chunks is None else channel_chunks, nchan))
    if isinstance(uvw, da.Array):
        if uvw.chunks[0] != chunks[0]:
            raise ValueError(f"uvw is chunked along rows {uvw.chunks[0]}, the weights {chunks[0]}: chunk them "
                             f"alike (a uvw chunk's rows are those of a weights chunk)")
        uvw = uvw.rechunk({1: 3})
    else:
        uvw = da.from_array(np.asarray(uvw, np.float64), chunks=(chunks[0], 3))
    weights = _as_dask("weights", weights, chunks, shape)
    mask = _as_dask("mask", mask, chunks, shape)

    threads = max(1, int(nthreads))
    uvw_blocks = uvw.to_delayed(optimize_graph=False).reshape(-1)
    weight_blocks = None if weights is None else weights.to_delayed(optimize_graph=False)
    mask_blocks = None if mask is None else mask.to_delayed(optimize_graph=False)
    row_edges, chan_edges = np.cumsum((0,) + chunks[0]), np.cumsum((0,) + chunks[1])
    cells, blocks = [], []
    for i in range(len(chunks[0])):
        for j in range(len(chunks[1])):
            chunk = Chunk(i * len(chunks[1]) + j, (int(row_edges[i]), int(row_edges[i + 1])),
                          (int(chan_edges[j]), int(chan_edges[j + 1])))
            blocks.append((chunk, uvw_blocks[i], freq[chan_edges[j]:chan_edges[j + 1]],
                           None if weight_blocks is None else weight_blocks[i, j],
                           None if mask_blocks is None else mask_blocks[i, j], (chunks[0][i], chunks[1][j])))
    for chunk, u, f, w, m, block_shape in blocks:
        cells.append(dask.delayed(_chunk_cell_sums, pure=True)(spec, threads, chunk, u, f, w, m, block_shape, dtype,
                                                               where))
    grid = dask.delayed(_finished, pure=True)(spec, threads, *cells)
    out = [da.from_delayed(dask.delayed(_chunk_applied, pure=True)(grid, chunk, u, f, w, m, block_shape, dtype,
                                                                   where),
                           shape=block_shape, dtype=dtype) for chunk, u, f, w, m, block_shape in blocks]
    return da.block([out[i * len(chunks[1]):(i + 1) * len(chunks[1])] for i in range(len(chunks[0]))])
