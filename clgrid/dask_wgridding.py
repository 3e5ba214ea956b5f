"""`vis2dirty` / `dirty2vis` over Dask: ducc0.wgridder's keywords (those of
`clgrid.vis2dirty` / `clgrid.dirty2vis`) with ``uvw``, ``vis``, ``wgt`` and ``mask`` as
Dask arrays chunked along rows and channels, one OpenCL device per worker.
Reached as `clgrid.dask.vis2dirty` and `clgrid.dask.dirty2vis`.

Imaging is linear in the visibilities, so the dirty image of all of them is the sum of
the dirty images of the chunks.  Each task images one chunk (rows ``a:b``, channels
``c:d``) with a `WGridder` the worker keeps, and the images are added pairwise by chunk
number (`clgrid.dask_chunks.tree_sum`), a tree fixed by the chunking: the result does
not depend on which task finished first.  ``dirty2vis`` is the adjoint: the image goes
to every worker once, and each task predicts its chunk's visibilities.

Why per-chunk images and not per-chunk grids.  A grid sum needs every chunk gridded onto
the same padded grid and the same w-planes, which `WGridder` chooses from its own points
(the w range sets the planes, the number of points weighs the kernel choice); its public
operator takes visibilities and gives images, and its internals are not an interface.
An image is also the smaller thing to move and add: ``npix_x * npix_y`` reals, against a
padded grid of about ``(1.2-2 npix)^2`` complex values per w-plane, of which w-gridding
has many, so a grid-level reduction would move all planes or hold them all.  The price:
each chunk pays its own FFTs (one per w-plane its points touch), so chunks should be large
(millions of visibilities, or one per worker); `benchmarks/dask_scaling.py` measures it.
Each chunk's image is accurate to ``epsilon`` (relative L2), and so is their sum; it is
not bit-identical to a single-process call, whose operator chose its kernel and planes
for all points at once (the two agree to about ``epsilon``; tested).

Operators: building a `WGridder` plans its points on the host, which costs more than a
call; a worker keeps the ``keep_operators`` it used last (default 4), keyed by the
content of the chunk's uvw, frequencies and mask (a token of the arrays, not Dask keys,
so a recomputed but equal chunk finds its operator) with every geometry keyword, the
device and the worker's ``$CLGRID_DEVICE``; `vis2dirty` and `dirty2vis` on the same chunk
share one.  Each kept operator holds its plan, padded grid and per-pixel tables:
``keep_operators=0`` keeps none.  So that a later call finds a chunk's operator, chunk i
prefers worker i mod n (`clgrid.dask_chunks.prefer_worker`: a preference, Dask may still
move it); its data follow it there once, and Dask keeps the copy for later calls.  With
more chunks per worker than ``keep_operators``, every call rebuilds them all (the least
recently used goes first): raise it for major cycles, memory allowing.

Memory, with one thread per worker: a task holds its chunk, its operator and the image
it returns; an addition holds two images and their sum.  A finished image waits on its
worker until its pair in the tree is done too (Dask runs an addition as soon as both
are there), so a worker holds at most a few images besides its kept operators.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict

import numpy as np

from .dask_chunks import Layout, check_device, chunk_sizes, naming, prefer_worker, shared, tree_sum, \
    workers_to_prefer
from .wgridding import WGridder

try:
    import dask
    import dask.array as da
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["vis2dirty", "dirty2vis", "cached_wgridders", "clear_wgridders", "KEEP_OPERATORS"]

KEEP_OPERATORS = 4
_operators: OrderedDict = OrderedDict()     # key -> (WGridder, its lock)
_counts = {"made": 0, "reused": 0}
_lock = threading.Lock()

# keywords of ducc0.wgridder accepted and without effect, as clgrid.vis2dirty takes them
ACCEPTED_WITHOUT_EFFECT = ("allow_nshift", "double_precision_accumulation")


# -- on the workers -------------------------------------------------------------------

def _operator(uvw, freq, mask, options: dict, keep: int) -> tuple:
    """The worker's `WGridder` for these points and this geometry, with the lock that
    serialises its calls: built on first use and kept (the ``keep`` used last), else made
    for this call only."""
    key = (dask.base.tokenize(np.asarray(uvw), np.asarray(freq), None if mask is None else np.asarray(mask)),
           tuple(sorted(options.items())), os.environ.get("CLGRID_DEVICE"))
    with _lock:
        found = _operators.get(key)
        if found is not None:
            _operators.move_to_end(key)
            _counts["reused"] += 1
            return found
    made = (WGridder(uvw, freq, mask=mask, **dict(options, tuning=None if options["tuning"] is None
                                                    else dict(options["tuning"]))), threading.Lock())
    with _lock:
        _counts["made"] += 1
        if keep > 0:
            made = _operators.setdefault(key, made)
            _operators.move_to_end(key)
        while len(_operators) > keep:
            _operators.popitem(last=False)
    return made


def cached_wgridders() -> dict:
    """This process's kept operators: how many it keeps, and how many it has made and
    reused since the last `clear_wgridders` (``client.run(clgrid.dask.cached_wgridders)``)."""
    with _lock:
        return dict(_counts, kept=len(_operators))


def clear_wgridders() -> int:
    """Drop this process's kept operators (`clgrid.dask.clear_cache` does too); returns
    how many were dropped."""
    with _lock:
        count = len(_operators)
        _operators.clear()
        _counts.update(made=0, reused=0)
    return count


def _all_masked(mask) -> bool:
    return mask is not None and not np.any(mask)


def _image_chunk(uvw, freq, vis, wgt, mask, chunk, options, keep):
    """One task: the dirty image of one chunk, and the warnings it gave (empty where the
    chunk added nothing: a chunk without data is no news; the caller warns for the set)."""
    g = options
    real = np.float64 if g["precision"] == "double" else np.float32
    with naming(chunk):
        if _all_masked(mask):                # nothing to image: no operator, no warning
            return np.zeros((g["npix_x"], g["npix_y"]), real), frozenset()
        operator, lock = _operator(uvw, freq, mask, g, keep)
        with lock, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            image = operator.vis2dirty(vis, wgt)
        said = frozenset(str(w.message) for w in caught) if np.any(image) else frozenset()
        return image, said


def _vis_chunk(dirty, uvw, freq, wgt, mask, chunk, options, keep):
    """One task: the visibilities of one chunk predicted from the image."""
    with naming(chunk):
        if _all_masked(mask):
            dtype = np.complex128 if options["precision"] == "double" else np.complex64
            return np.zeros((len(uvw), len(freq)), dtype)
        operator, lock = _operator(uvw, freq, mask, options, keep)
        with lock:
            return operator.dirty2vis(dirty, wgt)


def _add_images(a: tuple, b: tuple) -> tuple:
    return a[0] + b[0], a[1] | b[1]


# -- on the client ---------------------------------------------------------------------

def _refuse_unknown(ignored: dict) -> None:
    unknown = set(ignored) - set(ACCEPTED_WITHOUT_EFFECT)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")


def _shape(a) -> tuple:
    return a.shape if isinstance(a, da.Array) else np.shape(a)


def _local(a):
    """A small input (frequencies, the image) on the client."""
    return np.asarray(a.compute() if isinstance(a, da.Array) else a)


def _layout(uvw, freq, per_row: tuple, per_channel: tuple, row_chunks, channel_chunks) -> Layout:
    """Rows and channels of the call, checked, and their chunks: ``row_chunks`` /
    ``channel_chunks`` where given (an int or sizes), else those of the first dask array
    among ``per_row`` (axis 0) / ``per_channel`` (axis 1), or of ``freq``; else one block."""
    uvw_shape = _shape(uvw)
    if len(uvw_shape) != 2 or uvw_shape[1] != 3:
        raise ValueError(f"uvw must have shape (nrow, 3), got {uvw_shape}")
    nrow, nchan = uvw_shape[0], freq.size
    for name, a in per_channel:
        if a is not None and _shape(a) != (nrow, nchan):
            raise ValueError(f"{name} must have shape (nrow, nchan) = {(nrow, nchan)} (uvw's rows, freq's "
                             f"channels), got {_shape(a)}")
    if row_chunks is None:
        row_chunks = next((a.chunks[0] for _, a in per_row if isinstance(a, da.Array)), -1)
    if channel_chunks is None:
        channel_chunks = next((a.chunks[1] for _, a in per_channel if isinstance(a, da.Array)), -1)
    return Layout(chunk_sizes("row_chunks", row_chunks, nrow), chunk_sizes("channel_chunks", channel_chunks, nchan),
                  nrow, nchan)


def _frequencies(freq):
    """``freq`` (Hz, a scalar or 1-D, numpy or dask) as a 1-D float64 array, and its channel
    chunks where it is a dask array."""
    chunks = freq.chunks[0] if isinstance(freq, da.Array) and freq.ndim == 1 else None
    freq = _local(freq).astype(np.float64).reshape(-1)
    if freq.size == 0:
        raise ValueError("freq must hold at least one frequency")
    return freq, chunks


def _options(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w, divide_by_n,
             center_x, center_y, sigma_min, sigma_max, precision, device, nthreads, verbosity, tuning) -> dict:
    """`WGridder`'s keywords, as plain values (they key the workers' operators)."""
    return dict(npix_x=int(npix_x), npix_y=int(npix_y), pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y),
                epsilon=float(epsilon), do_wgridding=bool(do_wgridding), flip_u=bool(flip_u), flip_v=bool(flip_v),
                flip_w=bool(flip_w), divide_by_n=bool(divide_by_n), center_x=float(center_x),
                center_y=float(center_y), sigma_min=float(sigma_min), sigma_max=float(sigma_max),
                precision=precision, device=check_device(device), nthreads=int(nthreads),
                verbosity=int(verbosity), tuning=None if tuning is None else tuple(sorted(tuning.items())))


def _precision(dtype, name: str, kinds: dict) -> str:
    for precision, allowed in kinds.items():
        if np.dtype(dtype) == np.dtype(allowed):
            return precision
    raise TypeError(f"{name} must be {' or '.join(str(np.dtype(d)) for d in kinds.values())}, got {np.dtype(dtype)}")


def _check_wgt(wgt) -> None:
    dtype = None if wgt is None else getattr(wgt, "dtype", None) or np.asarray(wgt).dtype
    if dtype is not None and not np.issubdtype(dtype, np.floating):
        raise TypeError(f"wgt must be a float array, got {dtype}")


def _keep(keep_operators) -> int:
    if int(keep_operators) != keep_operators or keep_operators < 0:
        raise ValueError(f"keep_operators must be a non-negative integer, got {keep_operators!r}")
    return int(keep_operators)


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x, npix_y, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              dirty=None, device=None, tuning=None, row_chunks=None, channel_chunks=None,
              keep_operators=KEEP_OPERATORS, **ignored):
    """`clgrid.vis2dirty` over Dask: the dirty image (npix_x, npix_y) of ``vis``.

    Keywords and meaning as `clgrid.vis2dirty` (ducc0.wgridder's).  ``uvw`` (nrow, 3),
    ``vis``, ``wgt`` and ``mask`` (nrow, nchan) may be dask or numpy arrays, ``freq`` too
    (nchan,).  The tasks are the chunks of rows and channels: ``row_chunks`` /
    ``channel_chunks`` (an int or sizes) where given, else the chunks of the first dask
    array among uvw, vis, wgt, mask along rows, and among vis, wgt, mask (or ``freq``)
    along channels; without any, one task.  ``vis``'s dtype sets the precision.
    ``device`` is a name each worker resolves (None: its ``$CLGRID_DEVICE``, else its first
    GPU, else PoCL); ``nthreads`` the host threads of each task.  ``keep_operators``: how
    many operators each worker keeps for later calls (module docstring).  The images of
    the chunks are summed pairwise by chunk number (row blocks, channel blocks inside
    them), whatever order the tasks finish in.  A failing task's exception is raised here
    with a note naming its chunk (``clgrid.dask: chunk 3, rows 680:1020, channels 2:4``).
    ``dirty``, if given, receives the image.
    """
    _refuse_unknown(ignored)
    precision = _precision(vis.dtype if hasattr(vis, "dtype") else np.asarray(vis).dtype, "vis",
                           {"single": np.complex64, "double": np.complex128})
    _check_wgt(wgt)
    freq, freq_chunks = _frequencies(freq)
    layout = _layout(uvw, freq, (("uvw", uvw), ("vis", vis), ("wgt", wgt), ("mask", mask)),
                     (("vis", vis), ("wgt", wgt), ("mask", mask)), row_chunks,
                     channel_chunks if channel_chunks is not None else freq_chunks)
    options = _options(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w,
                       divide_by_n, center_x, center_y, sigma_min, sigma_max, precision, device, nthreads,
                       verbosity, tuning)
    keep = _keep(keep_operators)
    parts, workers = [], workers_to_prefer(keep > 0)
    for chunk, u, v, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(vis),
                                 layout.pieces(wgt), layout.pieces(mask)):
        with prefer_worker(chunk, workers):
            parts.append(dask.delayed(_image_chunk, pure=False)(u, freq[slice(*chunk.channels)], v, w, m, chunk,
                                                                options, keep))
    image, said = dask.compute(tree_sum(parts, dask.delayed(_add_images, pure=False)))[0]
    for message in sorted(said):
        warnings.warn(message, stacklevel=2)
    if not np.any(image):
        warnings.warn("clgrid.dask: the image is zero: no chunk has an unmasked, non-zero visibility with "
                      "non-zero weight", stacklevel=2)
    if dirty is not None:
        dirty[...] = image
        return dirty
    return image


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              vis=None, device=None, npix_x=0, npix_y=0, tuning=None, row_chunks=None, channel_chunks=None,
              keep_operators=KEEP_OPERATORS, **ignored):
    """`clgrid.dirty2vis` over Dask: the visibilities (nrow, nchan) of the image ``dirty``,
    as a lazy dask array chunked along rows and channels as the tasks are.

    Keywords and meaning as `clgrid.dirty2vis` (ducc0.wgridder's); ``dirty``'s dtype
    (float32 or float64, numpy or a dask array) sets the precision.  Chunks as for
    `vis2dirty`: ``row_chunks`` / ``channel_chunks``, else those of the first dask array
    among uvw, wgt, mask along rows, and among wgt, mask (or ``freq``) along channels.
    The image is sent to every worker once (scattered on a distributed cluster, one node
    of the graph otherwise), not once per task.  A chunk without any unmasked visibility
    comes back as zeros without an operator or a warning.  ``vis``, if given (numpy),
    receives the computed visibilities and is returned instead of the dask array.
    """
    _refuse_unknown(ignored)
    dirty = _local(dirty)
    precision = _precision(dirty.dtype, "dirty", {"single": np.float32, "double": np.float64})
    if dirty.ndim != 2:
        raise ValueError(f"dirty must be 2-D (npix_x, npix_y), got shape {dirty.shape}")
    for name, n, have in (("npix_x", npix_x, dirty.shape[0]), ("npix_y", npix_y, dirty.shape[1])):
        if n and n != have:
            raise ValueError(f"{name}={n} does not match dirty's shape {dirty.shape}")
    if not np.all(np.isfinite(dirty)):
        raise ValueError("dirty has NaN or infinite entries")
    _check_wgt(wgt)
    freq, freq_chunks = _frequencies(freq)
    layout = _layout(uvw, freq, (("uvw", uvw), ("wgt", wgt), ("mask", mask)), (("wgt", wgt), ("mask", mask)),
                     row_chunks, channel_chunks if channel_chunks is not None else freq_chunks)
    options = _options(dirty.shape[0], dirty.shape[1], pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u,
                       flip_v, flip_w, divide_by_n, center_x, center_y, sigma_min, sigma_max, precision, device,
                       nthreads, verbosity, tuning)
    keep = _keep(keep_operators)
    image = shared(f"clgrid-dirty-{dask.base.tokenize(dirty)}", dirty)
    dtype = np.complex128 if precision == "double" else np.complex64
    pieces, workers = [], workers_to_prefer(keep > 0)
    for chunk, u, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(wgt),
                              layout.pieces(mask)):
        with prefer_worker(chunk, workers):
            task = dask.delayed(_vis_chunk, pure=False)(image, u, freq[slice(*chunk.channels)], w, m, chunk,
                                                        options, keep)
        shape = (chunk.rows[1] - chunk.rows[0], chunk.channels[1] - chunk.channels[0])
        pieces.append(da.from_delayed(task, shape=shape, dtype=dtype))
    result = layout.assemble(pieces, channel_axis=1)
    if vis is not None:
        vis[...] = result.compute()
        return vis
    return result
