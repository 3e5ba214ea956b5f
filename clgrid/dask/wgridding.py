"""`vis2dirty` / `dirty2vis` over Dask: ducc0.wgridder's keywords (those of
`clgrid.vis2dirty` / `clgrid.dirty2vis`) with ``uvw``, ``vis``, ``wgt`` and ``mask`` as
Dask arrays chunked along rows and channels, one OpenCL device per worker.
Reached as `clgrid.dask.vis2dirty` and `clgrid.dask.dirty2vis`.

Imaging is linear in the visibilities, and over the w-planes: the dirty image of all of
them is a sum of partial images, added pairwise in a tree fixed by their number
(`clgrid.dask.chunks.tree_sum`), so the result does not depend on which task finished
first.  ``dirty2vis`` is the adjoint: the image goes to every worker once.  Two ways to
cut the work (``split``):

- ``"planes"`` (with w-gridding; `clgrid.dask.slabs` says why and how): one geometry for
  all the data (the |w| range and number of samples reduced over the chunks first), the
  w-planes cut into ``slabs`` slabs of about equal work (default: one per worker), and
  each slab's task images the samples with a tap on its planes, taken from every chunk,
  with a `WGridder` over those planes only.  The FFTs and per-pixel work are the
  planes', once per slab (or group, below): n workers share them.  Samples crowd at
  small |w|, so a low slab may take most of the data: an imaging task takes at most
  ``slab_samples`` (default: as many as the largest chunk holds).  Where a slab's
  samples from all chunks are more, its chunks are cut into contiguous groups within
  that (`clgrid.dask.slabs.chunk_groups`, counted exactly from each chunk's histogram
  of first planes), one task per slab and group, summed in slab then group order; a
  chunk's samples are never cut, so a task takes at most the larger of
  ``slab_samples`` and what one chunk gives its slab (never more than a chunk).  Each
  group repeats its slab's FFTs and per-pixel work: raise ``slab_samples`` where the
  workers' memory allows.  The geometry, the slabs and the groups are computed when
  called, a first pass over uvw and mask (read again by the imaging).
- ``"rows"``: each task images one chunk (rows ``a:b``, channels ``c:d``) with an operator
  of its own, on a grid and w-planes of its own; with w, each chunk pays every plane's FFT
  (BENCHMARKS.md: it does not scale on CPUs), so this is for 2-D imaging (one plane: the
  only cost it repeats is that plane's FFT), and for data one task holds whole.

``"auto"`` takes ``"planes"`` with ``do_wgridding`` unless there is one chunk and one
slab (the same single operator either way), ``"rows"`` otherwise.  GPU workers, whose
FFTs are cheap next to moving samples between workers, may do better with ``"rows"`` and
few large chunks (not measured: several-GPU machines are not lent).  With either, the sum
is accurate to ``epsilon`` (relative L2) and agrees with a single-process call to about
``epsilon`` (tested; with ``"planes"`` the geometry is that call's, so they agree to
rounding).  ``deterministic=True`` gives the same bits from run to run
(`WGridder`'s ``deterministic``: points planned on the host, spread by rows), and
whatever the cluster: the partition of the sum is fixed by the data alone.  The slabs
are where the sum is cut, so without ``slabs`` they are not one per worker but
`_data_slabs`: one per chunk of the data, none thinner than the kernel's W planes; and
``"auto"`` chooses the split from the chunks alone.

Operators: building a `WGridder` plans its points on the host, which costs more than a
call; a worker keeps the ``keep_operators`` it used last (default 4), keyed by the
content of its points (a chunk's uvw, frequencies and mask; a slab task's u, v, w) with its
geometry, planes, every keyword, the device and the worker's ``$CLGRID_DEVICE``
(a token of the arrays, not Dask keys, so a recomputed but equal chunk finds its
operator); `vis2dirty` and `dirty2vis` on the same data share them.  Each kept operator
holds its plan, padded grid and per-pixel tables: ``keep_operators=0`` keeps none.  So
that a later call finds them, chunk (or slab task, numbered by slab then group) i
prefers worker i mod n (`clgrid.dask.chunks.prefer_worker`: a preference, Dask may still
move it); slab tasks always do, which also spreads them over the workers.  With more tasks per worker than
``keep_operators``, every call rebuilds them all (the least recently used goes first):
raise it for major cycles, memory allowing.

Memory, with one thread per worker: a task holds one chunk (the rows split's imaging; the
planes split's first pass and selection, with the chunk's samples for every slab,
about 1 + (W - 1) / (planes per slab) times it), or at most ``slab_samples`` samples
(the planes split's imaging; more only where one chunk gives its slab more, never more
than a chunk), and one operator's grid and the image it returns; an addition holds two
images and their sum.  A finished image waits on
its worker until its pair in the tree is done too, so a worker holds at most a few images
besides its kept operators.  Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which
makes each large temporary fresh pages: the host FFT's temporaries then cost page faults
every call (scipy's FFT took 2.2 times as long, ducc0's 1.2); README says how to start
CPU workers without it.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict

import numpy as np

from ..operators.checks import check_finite_result, check_output, precision_of
from .chunks import Layout, check_device, chunk_sizes, naming, prefer_worker, shared, tree_sum, \
    workers_to_prefer
from .watch import compute, stall_seconds
from .slabs import Slab, assemble, chunk_groups, extent, geometry_of, plane_counts, points_of, select, \
    slab_bounds, split
from ..imaging.wgridding import SPEED_OF_LIGHT, WGridder

try:
    import dask
    import dask.array as da
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["vis2dirty", "dirty2vis", "cached_wgridders", "clear_wgridders", "KEEP_OPERATORS", "SPLITS"]

KEEP_OPERATORS = 4
SPLITS = ("auto", "planes", "rows")
_operators: OrderedDict = OrderedDict()     # key -> (WGridder, its lock)
_counts = {"made": 0, "reused": 0}
_lock = threading.Lock()

# keywords of ducc0.wgridder accepted and without effect, as clgrid.vis2dirty takes them
ACCEPTED_WITHOUT_EFFECT = ("allow_nshift", "double_precision_accumulation")
# a slab's operator takes its samples' u, v, w in wavelengths: one channel at c (a scale of 1)
UNIT_FREQ = np.array([SPEED_OF_LIGHT])


# -- on the workers -------------------------------------------------------------------

def _operator(content, points, options: dict, keep: int, geometry=None, planes=None) -> tuple:
    """The worker's `WGridder` for these points and this geometry (given, with its planes,
    for a slab; else its own), with the lock that serialises its calls: built on first
    use and kept (the ``keep`` used last), else made for this call only.  ``content``:
    the arrays that fix the points (their token keys the operator); ``points()``: (uvw,
    freq, mask) to build it from, asked for only when it is built."""
    key = (dask.base.tokenize(content), tuple(sorted(options.items())), geometry, planes,
           os.environ.get("CLGRID_DEVICE"))
    with _lock:
        found = _operators.get(key)
        if found is not None:
            _operators.move_to_end(key)
            _counts["reused"] += 1
            return found
    uvw, freq, mask = points()
    made = (WGridder(uvw, freq, mask=mask, geometry=geometry, planes=planes,
                     **dict(options, tuning=None if options["tuning"] is None else dict(options["tuning"]))),
            threading.Lock())
    with _lock:
        _counts["made"] += 1
        if keep > 0:
            made = _operators.setdefault(key, made)
            _operators.move_to_end(key)
        while len(_operators) > keep:
            _operators.popitem(last=False)
    return made


def _chunk_operator(uvw, freq, mask, options: dict, keep: int) -> tuple:
    """A chunk's own operator (the rows split)."""
    uvw, freq, mask = np.asarray(uvw), np.asarray(freq), None if mask is None else np.asarray(mask)
    return _operator((uvw, freq, mask), lambda: (uvw, freq, mask), options, keep)


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


def _real(precision: str):
    return np.float64 if precision == "double" else np.float32


def _zeros(options: dict) -> np.ndarray:
    return np.zeros((options["npix_x"], options["npix_y"]), _real(options["precision"]))


def _complex(precision: str):
    return np.complex128 if precision == "double" else np.complex64


def _imaged(operator, lock, vis, wgt) -> tuple:
    """The operator's image of ``vis`` and the warnings it gave (none where the image is
    zero: a part without data is no news; the caller warns for the set)."""
    with lock, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        image = operator.vis2dirty(vis, wgt)
    return image, frozenset(str(w.message) for w in caught) if np.any(image) else frozenset()


def _image_chunk(uvw, freq, vis, wgt, mask, chunk, options, keep):
    """One task of the rows split: the dirty image of one chunk, and its warnings."""
    with naming(chunk):
        if _all_masked(mask):                # nothing to image: no operator, no warning
            return _zeros(options), frozenset()
        operator, lock = _chunk_operator(uvw, freq, mask, options, keep)
        return _imaged(operator, lock, vis, wgt)


def _vis_chunk(dirty, uvw, freq, wgt, mask, chunk, options, keep):
    """One task of the rows split: the visibilities of one chunk predicted from the image."""
    with naming(chunk):
        if _all_masked(mask):
            return np.zeros((len(uvw), len(freq)), _complex(options["precision"]))
        operator, lock = _chunk_operator(uvw, freq, mask, options, keep)
        with lock:
            return operator.dirty2vis(dirty, wgt)


def _chunk_extent(chunk, uvw, freq, mask):
    with naming(chunk):
        return extent(uvw, freq, mask)


def _chunk_counts(chunk, uvw, freq, mask, geometry):
    with naming(chunk):
        return plane_counts(uvw, freq, mask, geometry)


def _chunk_select(chunk, uvw, freq, vis, wgt, mask, geometry, bounds, indices):
    with naming(chunk):
        return select(uvw, freq, vis, wgt, mask, geometry, bounds, indices)


def _chunk_assemble(chunk, taken, shares, wgt, mask, dtype):
    with naming(chunk):
        return assemble(_chunk_shape(chunk), taken, shares, wgt, mask, dtype)


def _slab_operator(parts, geometry, slab: Slab, options, keep):
    """The operator of a slab task's samples (its parts from its chunks, in order) over
    its planes, keyed by the parts as they came (their u, v, w are formed only to build
    it); None where it has none."""
    if slab.planes[0] == slab.planes[1] or not sum(len(p) for p in parts):
        return None
    content = [(p.uvw, p.row, p.chan, p.scale) for p in parts]
    return _operator(content, lambda: (points_of(parts), UNIT_FREQ, None), options, keep, geometry, slab.planes)


def _image_slab(geometry, slab: Slab, options, keep, *parts):
    """One task of the planes split: the image of the taps on one slab's planes, from its
    samples of its group of chunks, and its warnings."""
    with naming(slab):
        found = _slab_operator(parts, geometry, slab, options, keep)
        if found is None:
            return _zeros(options), frozenset()
        values = np.concatenate([p.values for p in parts])
        return _imaged(*found, values[:, None], None)


def _vis_slab(dirty, geometry, slab: Slab, options, keep, *parts):
    """One task of the planes split: its samples' shares of the visibilities (the taps on
    its planes, unweighted), one array per chunk of its group."""
    with naming(slab):
        found = _slab_operator(parts, geometry, slab, options, keep)
        if found is None:
            return split(np.zeros(sum(len(p) for p in parts), _complex(options["precision"])), parts)
        operator, lock = found
        with lock:
            return split(operator.dirty2vis(dirty)[:, 0], parts)


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
    if freq.size == 0 or not np.all(np.isfinite(freq)) or np.any(freq <= 0):
        raise ValueError("freq must be a non-empty array of positive frequencies in Hz")
    return freq, chunks


def _options(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w, divide_by_n,
             center_x, center_y, sigma_min, sigma_max, precision, device, nthreads, verbosity, tuning,
             deterministic) -> dict:
    """`WGridder`'s keywords, as plain values (they key the workers' operators)."""
    return dict(npix_x=int(npix_x), npix_y=int(npix_y), pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y),
                epsilon=float(epsilon), do_wgridding=bool(do_wgridding), flip_u=bool(flip_u), flip_v=bool(flip_v),
                flip_w=bool(flip_w), divide_by_n=bool(divide_by_n), center_x=float(center_x),
                center_y=float(center_y), sigma_min=float(sigma_min), sigma_max=float(sigma_max),
                precision=precision, device=check_device(device), nthreads=int(nthreads),
                verbosity=int(verbosity), tuning=None if tuning is None else tuple(sorted(tuning.items())),
                deterministic=bool(deterministic))


def _check_wgt(wgt) -> None:
    dtype = None if wgt is None else getattr(wgt, "dtype", None) or np.asarray(wgt).dtype
    if dtype is not None and not np.issubdtype(dtype, np.floating):
        raise TypeError(f"wgt must be a float array, got {dtype}")


def _keep(keep_operators) -> int:
    if int(keep_operators) != keep_operators or keep_operators < 0:
        raise ValueError(f"keep_operators must be a non-negative integer, got {keep_operators!r}")
    return int(keep_operators)


def _slab_samples(slab_samples, layout: Layout) -> int:
    """The most samples a planes task takes: ``slab_samples``, or as many as the largest
    chunk holds."""
    if slab_samples is None:
        return max(layout.rows) * max(layout.channels)
    if isinstance(slab_samples, bool) or int(slab_samples) != slab_samples or slab_samples < 1:
        raise ValueError(f"slab_samples must be a positive integer or None (as many as the largest chunk "
                         f"holds), got {slab_samples!r}")
    return int(slab_samples)


def _split(split, slabs, do_wgridding, layout: Layout, keep: int, deterministic: bool = False) -> tuple:
    """(the split, the number of slabs, the workers tasks prefer or None): module docstring.
    The number of slabs is None where it is to come from the data (`_data_slabs`): with
    ``deterministic`` and no ``slabs``, nothing here may depend on the cluster."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
    if slabs is not None and (isinstance(slabs, bool) or int(slabs) != slabs or slabs < 1):
        raise ValueError(f"slabs must be a positive integer or None (one per worker), got {slabs!r}")
    if split == "planes" and not do_wgridding:
        raise ValueError("split='planes' needs do_wgridding=True: without w there is one plane to share")
    workers = workers_to_prefer(True)
    if slabs is not None:
        count = int(slabs)
    else:
        count = None if deterministic else len(workers or [None])
    if split == "auto":
        tasks = layout.shape[0] * layout.shape[1]
        split = "planes" if do_wgridding and ((count or 1) > 1 or tasks > 1) else "rows"
    return split, count, workers if split == "planes" or keep > 0 else None


def _task(function):
    return dask.delayed(function, pure=False)


def _data_slabs(geometry, chunks: int) -> int:
    """The number of slabs ``deterministic=True`` takes without ``slabs``: one per chunk of
    the data (which the caller sizes for the cluster), but none thinner than the kernel's
    W planes (each sample is taken by every slab its W planes touch).  From the data alone:
    the slabs are where the sum is cut, so they fix its bits."""
    return max(1, min(chunks, geometry.num_planes // geometry.kernel.support))


def _slab_plan(layout: Layout, uvw, freq, mask, options: dict, count, cap: int, stall_timeout=None) -> tuple:
    """The planes split's first pass, computed now (the imaging tasks depend on it): each
    chunk's pieces (chunk, uvw, freq, mask), the geometry of them all, the slabs' planes
    (``count`` of them; None: `_data_slabs`), and the imaging tasks: a `Slab` per group of
    chunks of each slab, in slab then group order, none taking more than ``cap`` samples
    unless one chunk gives it more."""
    chunks, points, masks = layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(mask)
    freqs = [freq[slice(*chunk.channels)] for chunk in chunks]
    pieces = list(zip(chunks, points, freqs, masks))
    reduced = _task(geometry_of)([_task(_chunk_extent)(*piece) for piece in pieces], options)
    geometry, *counts = compute(reduced, *[_task(_chunk_counts)(*piece, reduced) for piece in pieces],
                                stall_timeout=stall_timeout)
    bounds = slab_bounds(counts, geometry, _data_slabs(geometry, len(pieces)) if count is None else count)
    tasks = [Slab(s, planes, group)
             for s, (planes, groups) in enumerate(zip(bounds, chunk_groups(counts, geometry, bounds, cap)))
             for group in groups]
    return pieces, geometry, bounds, tasks


def _rows_images(layout, uvw, freq, vis, wgt, mask, options, keep, workers) -> list:
    parts = []
    for chunk, u, v, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(vis),
                                 layout.pieces(wgt), layout.pieces(mask)):
        with prefer_worker(chunk.index, workers):
            parts.append(_task(_image_chunk)(u, freq[slice(*chunk.channels)], v, w, m, chunk, options, keep))
    return parts


def _slab_inputs(selected: list, slab: Slab) -> list:
    """A slab task's parts: its slab's output of each `select` of its chunks (made
    outside the task's `prefer_worker` annotation: they stay with their chunk)."""
    return [taken[slab.index] for taken in selected[slice(*slab.chunks)]]


def _slab_images(layout, uvw, freq, vis, wgt, mask, options, keep, count, cap, workers, stall_timeout) -> list:
    pieces, geometry, bounds, tasks = _slab_plan(layout, uvw, freq, mask, options, count, cap, stall_timeout)
    count = len(bounds)
    selected = [dask.delayed(_chunk_select, pure=False, nout=count)(chunk, u, f, v, w, m, geometry, bounds, False)
                for (chunk, u, f, m), v, w in zip(pieces, layout.pieces(vis), layout.pieces(wgt))]
    parts = []
    for t, slab in enumerate(tasks):
        inputs = _slab_inputs(selected, slab)
        with prefer_worker(t, workers):
            parts.append(_task(_image_slab)(geometry, slab, options, keep, *inputs))
    return parts


def _sent(dirty: np.ndarray):
    """The image as one dependency of every task (`shared`), sent as the graph that uses
    it is built: the scheduler may drop replicas that no task waits for yet."""
    return shared(f"clgrid-dirty-{dask.base.tokenize(dirty)}", dirty)


def _rows_vis(layout, dirty, uvw, freq, wgt, mask, options, keep, workers, dtype) -> list:
    image, pieces = _sent(dirty), []
    for chunk, u, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(wgt),
                              layout.pieces(mask)):
        with prefer_worker(chunk.index, workers):
            task = _task(_vis_chunk)(image, u, freq[slice(*chunk.channels)], w, m, chunk, options, keep)
        pieces.append(da.from_delayed(task, shape=_chunk_shape(chunk), dtype=dtype))
    return pieces


def _slab_vis(layout, dirty, uvw, freq, wgt, mask, options, keep, count, cap, workers, dtype, stall_timeout) -> list:
    pieces, geometry, bounds, tasks = _slab_plan(layout, uvw, freq, mask, options, count, cap, stall_timeout)
    count = len(bounds)
    image = _sent(dirty)
    selected = [dask.delayed(_chunk_select, pure=False, nout=2 * count)(chunk, u, f, None, None, m, geometry, bounds,
                                                                        True) for chunk, u, f, m in pieces]
    shares = {}                                         # (slab, chunk) -> that chunk's share from the slab
    for t, slab in enumerate(tasks):
        a, b = slab.chunks
        inputs = _slab_inputs(selected, slab)
        with prefer_worker(t, workers):
            out = dask.delayed(_vis_slab, pure=False, nout=b - a)(image, geometry, slab, options, keep, *inputs)
        shares.update(((slab.index, i), out[i - a]) for i in range(a, b))
    out = []
    for i, ((chunk, _, _, m), w) in enumerate(zip(pieces, layout.pieces(wgt))):
        task = _task(_chunk_assemble)(chunk, [selected[i][count + s] for s in range(count)],
                                      [shares[s, i] for s in range(count)], w, m, dtype)
        out.append(da.from_delayed(task, shape=_chunk_shape(chunk), dtype=dtype))
    return out


def _chunk_shape(chunk) -> tuple:
    return chunk.rows[1] - chunk.rows[0], chunk.channels[1] - chunk.channels[0]


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x, npix_y, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              dirty=None, device=None, tuning=None, row_chunks=None, channel_chunks=None,
              keep_operators=KEEP_OPERATORS, split="auto", slabs=None, slab_samples=None, deterministic=False,
              stall_timeout=None, **ignored):
    """`clgrid.vis2dirty` over Dask: the dirty image (npix_x, npix_y) of ``vis``.

    Keywords and meaning as `clgrid.vis2dirty` (ducc0.wgridder's).  ``uvw`` (nrow, 3),
    ``vis``, ``wgt`` and ``mask`` (nrow, nchan) may be dask or numpy arrays, ``freq`` too
    (nchan,).  The data's chunks are ``row_chunks`` / ``channel_chunks`` (an int or sizes)
    where given, else the chunks of the first dask array among uvw, vis, wgt, mask along
    rows, and among vis, wgt, mask (or ``freq``) along channels; without any, one chunk.
    ``split`` ("auto", "planes", "rows") and ``slabs`` (None: one per worker) choose how
    the work is cut (module docstring): by slabs of w-planes, each taking its samples
    from every chunk, or by chunks; ``slab_samples`` (None: as many as the largest chunk
    holds) is the most samples one imaging task of a slab takes, its chunks cut into
    groups, one task each, where it has more.  ``vis``'s dtype sets the precision.  ``device`` is a
    name each worker resolves (None: its ``$CLGRID_DEVICE``, else its first GPU, else
    PoCL); ``nthreads`` the host threads of each task.  ``keep_operators``: how many
    operators each worker keeps for later calls; ``deterministic``: the same bits from
    run to run and whatever the cluster (module docstring).  The partial images are summed
    pairwise by slab or chunk number, whatever order the tasks finish in.  A failing
    task's exception is raised here with a note naming its chunk (``clgrid.dask: chunk 3,
    rows 680:1020, channels 2:4``) or slab; a call that can make no progress for
    ``stall_timeout`` seconds (None: 120; workers paused for memory or gone) raises
    `clgrid.errors.ClusterStalledError` (`clgrid.dask.watch`).  ``dirty``, if given,
    receives the image.
    """
    _refuse_unknown(ignored)
    precision = precision_of(vis.dtype if hasattr(vis, "dtype") else np.asarray(vis).dtype, "vis",
                           {"single": np.complex64, "double": np.complex128})
    _check_wgt(wgt)
    freq, freq_chunks = _frequencies(freq)
    layout = _layout(uvw, freq, (("uvw", uvw), ("vis", vis), ("wgt", wgt), ("mask", mask)),
                     (("vis", vis), ("wgt", wgt), ("mask", mask)), row_chunks,
                     channel_chunks if channel_chunks is not None else freq_chunks)
    options = _options(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w,
                       divide_by_n, center_x, center_y, sigma_min, sigma_max, precision, device, nthreads,
                       verbosity, tuning, deterministic)
    if dirty is not None:
        check_output(dirty, "dirty", (options["npix_x"], options["npix_y"]), _real(precision))
    keep = _keep(keep_operators)
    split, count, workers = _split(split, slabs, do_wgridding, layout, keep, deterministic)
    stall_seconds(stall_timeout)
    cap = _slab_samples(slab_samples, layout)
    if split == "rows":
        parts = _rows_images(layout, uvw, freq, vis, wgt, mask, options, keep, workers)
    else:
        parts = _slab_images(layout, uvw, freq, vis, wgt, mask, options, keep, count, cap, workers, stall_timeout)
    image, said = compute(tree_sum(parts, _task(_add_images)), stall_timeout=stall_timeout)[0]
    check_finite_result(np.count_nonzero(~np.isfinite(image)), f"the {image.dtype} image (the sum of the parts)",
                        precision, double="complex128 visibilities")     # each part was finite
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
              keep_operators=KEEP_OPERATORS, split="auto", slabs=None, slab_samples=None, deterministic=False,
              stall_timeout=None, **ignored):
    """`clgrid.dirty2vis` over Dask: the visibilities (nrow, nchan) of the image ``dirty``,
    as a lazy dask array chunked along rows and channels as the data are.

    Keywords and meaning as `clgrid.dirty2vis` (ducc0.wgridder's); ``dirty``'s dtype
    (float32 or float64, numpy or a dask array) sets the precision.  Chunks as for
    `vis2dirty`: ``row_chunks`` / ``channel_chunks``, else those of the first dask array
    among uvw, wgt, mask along rows, and among wgt, mask (or ``freq``) along channels;
    ``split``, ``slabs``, ``slab_samples``, ``keep_operators``, ``deterministic`` and
    ``stall_timeout`` as there (with the planes split, uvw and mask are read once when
    called, for the slabs and groups; the result is lazy: compute it with
    `clgrid.dask.compute` to have it watched too).  The image is
    sent to every worker once (scattered on a distributed cluster, one node of the graph
    otherwise), not once per task.  With the planes split, each slab's task (one per
    group of chunks) predicts its samples' share and each chunk adds its slabs' shares in
    slab order; a chunk without any
    unmasked visibility comes back as zeros.  ``vis``, if given (numpy), receives the
    computed visibilities and is returned instead of the dask array.
    """
    _refuse_unknown(ignored)
    dirty = _local(dirty)
    precision = precision_of(dirty.dtype, "dirty", {"single": np.float32, "double": np.float64})
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
                       nthreads, verbosity, tuning, deterministic)
    dtype = _complex(precision)
    if vis is not None:
        check_output(vis, "vis", (layout.nrow, layout.nchan), dtype)
    keep = _keep(keep_operators)
    split, count, workers = _split(split, slabs, do_wgridding, layout, keep, deterministic)
    stall_seconds(stall_timeout)
    cap = _slab_samples(slab_samples, layout)
    if split == "rows":
        pieces = _rows_vis(layout, dirty, uvw, freq, wgt, mask, options, keep, workers, dtype)
    else:
        pieces = _slab_vis(layout, dirty, uvw, freq, wgt, mask, options, keep, count, cap, workers, dtype,
                           stall_timeout)
    result = layout.assemble(pieces, channel_axis=1)
    if vis is not None:
        vis[...] = compute(result, stall_timeout=stall_timeout)[0]
        return vis
    return result
