"""`vis2dirty` / `dirty2vis` over Dask: ducc0.wgridder's keywords (those of
`clgrid.vis2dirty` / `clgrid.dirty2vis`) with ``uvw``, ``vis``, ``wgt`` and ``mask`` as
Dask arrays chunked along rows and channels, one OpenCL device per worker (or several:
``device`` a list, or a worker's ``$CLGRID_DEVICE`` naming several, comma-separated).
Reached as `clgrid.dask.vis2dirty` and `clgrid.dask.dirty2vis`.

Imaging is linear in the visibilities, and over the w-planes: the dirty image of all of
them is a sum of partial images.  ``dirty2vis`` is the adjoint: the image goes to every
worker once.  Two ways to cut the work (``split``):

- ``"planes"`` (with w-gridding; `clgrid.dask.planes_split`): one geometry for all the
  data, the w-planes cut into ``slabs`` slabs of about equal work (default: one per
  worker), and each slab's task (or tasks, at most ``slab_samples`` samples each) images
  the samples with a tap on its planes, taken from every chunk: n workers share the
  planes' FFTs and per-pixel work.
- ``"rows"`` (`clgrid.dask.rows_split`): each task images one chunk with an operator of
  its own, every w-plane of it; for 2-D imaging, and for data one task holds whole.

``"auto"`` takes ``"planes"`` with ``do_wgridding`` unless there is one chunk and one
slab (the same single operator either way), ``"rows"`` otherwise.  With either, the sum
is accurate to ``epsilon`` (relative L2) and agrees with a single-process call to about
``epsilon`` (with ``"planes"`` the geometry is that call's, so they agree to rounding).
``deterministic=True`` gives the same bits from run to run (`WGridder`'s
``deterministic``), and whatever the number of workers: what each slab task images and
the order of every sum are fixed by the chunks, the slabs, ``slab_samples`` and the
slabs' sample weights alone, and without ``slabs`` the slabs (where the sum is cut) are
not one per worker but one per chunk of the data, none thinner than the kernel's W
planes (`clgrid.dask.planes_split`); ``"auto"`` then chooses the split from the chunks
alone.  The weights are the tuning table's for the workers' device (a worker's, asked
once per set of points) or ``tuning=``'s: pass them in ``tuning`` for the same bits on
clusters of different devices.

A call that can make no progress (workers paused for memory, restarted or gone) ends
with `clgrid.errors.ClusterStalledError` after ``stall_timeout`` seconds
(`clgrid.dask.watch`).

What is kept, and where (issue 28: a call that moved the points and tokenised them
every time was many times slower on two GPU workers than one process on one GPU:
docs/benchmarks/dask.md):

- On the client, per set of points (a token of the uvw and mask blocks' Dask keys,
  ``freq``, the keywords and the chunks: `_points_token`): the planes split's first pass
  and, unless ``keep_operators=0``, each chunk's selection for the slabs and each slab
  task's points persisted on the workers (`clgrid.dask.planes_split`), so that a later
  call with the same points moves only values.  `clear_cache` drops them.
- On the workers: the ``keep_operators`` `WGridder` s used last, keyed by their points
  (the slab's kept points, or a chunk's blocks with the call's token); `vis2dirty` and
  `dirty2vis` on the same data share them.  A slab that holds most of a chunk whose
  samples are all kept takes it whole (`clgrid.dask.slabs.takes_whole`): its selection
  is kept as None, its values are the chunk's vis block itself (no picks; no copy
  without weights and shared memory), and its operator drops the samples without a tap
  on its planes.
- In shared memory, where every worker is on the client's host and operators are kept
  (`clgrid.dask.exchange`): per set of points, the files through which each chunk's
  values reach its slab's task (written at the chunk's place in the task's file, so the
  task maps one array), through which the partial images' facets reach the worker that
  sums them, through which `dirty2vis`'s image reaches every task (written once by the
  client, not scattered to each worker, behind a stamp: a prediction computed after a
  later `dirty2vis` on the same points replaced it refuses, `exchange.taken`) and through
  which each slab's prediction reaches its chunks (behind the same stamp); and the
  client's boxes for the image (`clgrid.dask.delivery`: the image `vis2dirty` returns
  is a box's mapping, given back to a pool when the caller drops it).  Fresh pages cost more than the copies, so the files and
  the mappings are kept, and removed with the points' record (the last
  ``exchange.KEPT_PREFIXES``) or by `clear_cache`.  Elsewhere (workers on other hosts)
  the same values go through Dask.

So there is one API for major cycles: the functions, called again with the same uvw,
mask and frequencies (the same Dask keys, or the same numpy content) and keywords, find
what the first call left; the vis (or the image) may change from call to call.  Points
that change (new uvw or mask content, other chunks or keywords) are a new set of points:
planned, selected and kept anew, the oldest set dropped.

Memory, with one thread per worker: a task holds one chunk (the rows split's imaging;
the planes split's selection), or at most ``slab_samples`` samples (the planes split's
imaging), and one operator's grid and the image it returns.  Dask starts workers with
MALLOC_TRIM_THRESHOLD_=65536, which makes each large temporary fresh pages: the host
FFT's temporaries then cost page faults every call (docs/benchmarks/dask.md);
docs/user-guide/dask.md says how to start CPU workers without it.
"""

from __future__ import annotations

import warnings

import numpy as np

from . import chunks as chunking, exchange, tasks as worker_tasks
from .watch import compute, stall_seconds
from .chunks import ChunkLayout, check_device, chunk_sizes, workers_to_prefer
from .delivery import COPY_THREADS, discard, forget_boxes
from .images import facet_count, result_box, summed
from .planes_split import chunk_pieces, first_pass, forget_layouts, slab_images, slab_vis
from .recycled import forget_recycled
from .rows_split import rows_images, rows_vis
from .tasks import forget_operators
from ..call_warnings import caller_level
from ..device.host_threads import count_not_finite
from ..operators.checks import check_apart, check_finite_result, check_output, precision_of

try:
    import dask
    import dask.array as da
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["vis2dirty", "dirty2vis", "clear_wgridders", "KEEP_OPERATORS", "SPLITS"]

KEEP_OPERATORS = 4
SPLITS = ("auto", "planes", "rows")

# keywords of ducc0.wgridder accepted and without effect, as clgrid.vis2dirty takes them
ACCEPTED_WITHOUT_EFFECT = ("allow_nshift", "double_precision_accumulation")
NOT_FINITE_IMAGE = "dirty has NaN or infinite entries"


def clear_wgridders() -> int:
    """Drop this process's kept operators (`clgrid.dask.tasks`) and free recycled arrays
    (`clgrid.dask.recycled`), and on the client the records (and so the persisted
    selections and points) of earlier calls' data (`clgrid.dask.clear_cache` does too);
    returns how many operators were dropped."""
    forget_layouts()
    exchange.forget()
    exchange.release()
    forget_boxes()
    forget_recycled()
    return forget_operators()


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


def _layout(uvw, freq, per_row: tuple, per_channel: tuple, row_chunks, channel_chunks) -> ChunkLayout:
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
    return ChunkLayout(chunk_sizes("row_chunks", row_chunks, nrow), chunk_sizes("channel_chunks", channel_chunks, nchan),
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


def _slab_samples(slab_samples, layout: ChunkLayout, deterministic: bool = False) -> int | None:
    """The most samples a planes task takes: ``slab_samples``; None (the default) where
    the first pass is to choose it from the workers' device
    (`clgrid.dask.planes_split.first_pass`), and with ``deterministic`` (fixed by the data
    alone) as many as the largest chunk holds."""
    if slab_samples is None:
        return max(layout.rows) * max(layout.channels) if deterministic else None
    if isinstance(slab_samples, bool) or int(slab_samples) != slab_samples or slab_samples < 1:
        raise ValueError(f"slab_samples must be a positive integer or None (as many as the largest chunk "
                         f"holds, or on GPU workers as the worker's GPU holds where more), got {slab_samples!r}")
    return int(slab_samples)


def _split(split, slabs, do_wgridding, layout: ChunkLayout, workers, deterministic: bool = False) -> tuple:
    """(the split, the number of slabs): module docstring.  The number of slabs is None
    where it is to come from the data (`clgrid.dask.planes_split.first_pass`): with
    ``deterministic`` and no ``slabs``, nothing that fixes the bits may depend on the
    cluster."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
    if slabs is not None and (isinstance(slabs, bool) or int(slabs) != slabs or slabs < 1):
        raise ValueError(f"slabs must be a positive integer or None (one per worker), got {slabs!r}")
    if split == "planes" and not do_wgridding:
        raise ValueError("split='planes' needs do_wgridding=True: without w there is one plane to share")
    if slabs is not None:
        count = int(slabs)
    else:
        count = None if deterministic else len(workers or [None])
    if split == "auto":
        tasks = layout.shape[0] * layout.shape[1]
        split = "planes" if do_wgridding and ((count or 1) > 1 or tasks > 1) else "rows"
    return split, count


def _key_of(piece):
    """A piece's name in the token of the points: its Dask key (content-derived for
    `dask.array.from_array`, stable for a persisted array), or a token of its value."""
    return getattr(piece, "key", None) or dask.base.tokenize(piece)


def _points_token(layout: ChunkLayout, uvw_pieces, mask_pieces, freq, options: dict, *more) -> str:
    """What fixes an operator's points: the uvw and mask blocks, the frequencies, every
    keyword and the chunks (the keys of the blocks, not their content: nothing large is
    hashed per call)."""
    return dask.base.tokenize("clgrid.dask.wgridding", [_key_of(p) for p in uvw_pieces],
                              [None if m is None else _key_of(m) for m in mask_pieces], freq,
                              sorted(options.items()), layout.rows, layout.channels, *more)


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
    from every chunk, or by chunks; ``slab_samples`` is the most samples one imaging task
    of a slab takes, its chunks cut into groups, one task each, where it has more (None:
    as many as the largest chunk holds, or, on GPU workers and without ``deterministic``,
    as many as half the worker's GPU memory holds, shared among its slab tasks, if more:
    `clgrid.dask.tasks.slab_capacity`).  ``vis``'s dtype sets the precision.  ``device`` is a
    name each worker resolves (None: its ``$CLGRID_DEVICE``, else its first GPU, else
    PoCL); ``nthreads`` the host threads of each task.  ``keep_operators``: how many
    operators each worker keeps for later calls; ``deterministic``: the same bits from
    run to run and whatever the cluster (module docstring).  The partial images are summed
    pairwise by slab or chunk number, whatever order the tasks finish in.  A failing
    task's exception is raised here with a note naming its chunk (``clgrid.dask: chunk 3,
    rows 680:1020, channels 2:4``) or slab; a call that can make no progress for
    ``stall_timeout`` seconds (None: 120; workers paused for memory or gone) raises
    `clgrid.errors.ClusterStalledError` (`clgrid.dask.watch`).  ``dirty``, if given,
    receives the image (a numpy array; refused where it shares memory with a numpy input,
    as by `clgrid.vis2dirty`).
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
        check_output(dirty, "dirty", (options["npix_x"], options["npix_y"]),
                     np.float64 if precision == "double" else np.float32)
        check_apart(dirty, "dirty", {"vis": vis, "wgt": wgt, "uvw": uvw, "freq": freq, "mask": mask})
    stall_seconds(stall_timeout)
    keep = _keep(keep_operators)
    workers = workers_to_prefer(True)
    split, count = _split(split, slabs, do_wgridding, layout, workers, deterministic)
    cap = _slab_samples(slab_samples, layout, deterministic)
    facets = facet_count(workers, options)
    if split == "rows":
        token = _points_token(layout, layout.pieces(uvw, channels=False), layout.pieces(mask), freq, options)
    else:
        pieces = chunk_pieces(layout, uvw, freq, mask)
        token = _points_token(layout, [p[1] for p in pieces], [p[3] for p in pieces], freq, options, count, cap)
    # several workers, all on this host, operators kept: values and facets pass through
    # files in shared memory kept for these points (`clgrid.dask.exchange`)
    kept = (exchange.prefix(chunking.client(), workers, f"{token}-{facets}")
            if workers and len(workers) > 1 and keep > 0 else None)
    real = np.float64 if options["precision"] == "double" else np.float32
    shape = (options["npix_x"], options["npix_y"])
    # a call that fails leaves the next new files: its tasks may still be writing these
    with exchange.using(kept, renew=True) as shared:
        box = result_box(workers, shape, real)      # (given back, or the result, by `summed`)
        try:
            if split == "rows":
                outputs = rows_images(token, layout, uvw, freq, vis, wgt, mask, options, keep, workers, facets,
                                      shared, box)
            else:
                slab_layout = first_pass(token, pieces, options, count, cap, keep, stall_timeout,
                                         len(workers or [None]))
                outputs = slab_images(slab_layout, pieces, layout.pieces(vis), layout.pieces(wgt), options, keep,
                                      workers, facets, shared, box, chunking.holders(layout, vis))
        except BaseException:
            discard(box)
            raise
        image, said, counts = summed(outputs, facets, workers, shape, real, stall_timeout, shared,
                                     max(1, options["nthreads"]), dirty, box)
    if image is None:
        image = worker_tasks.zeros_image(options)
    bad, nonzero = counts if counts is not None else (np.count_nonzero(~np.isfinite(image)), np.any(image))
    check_finite_result(bad, f"the {image.dtype} image (the sum of the parts)",
                        precision, double="complex128 visibilities")     # each part was finite
    _say_workers(said)
    if not nonzero:
        warnings.warn("clgrid.dask: the image is zero: no chunk has an unmasked, non-zero visibility with "
                      "non-zero weight", stacklevel=caller_level())
    if dirty is not None:
        if image is not dirty:
            dirty[...] = image
        return dirty
    return image


def _say_workers(said) -> None:
    """Say in the caller the warnings the workers' operators gave in a call ((message,
    category) pairs, `clgrid.dask.tasks._imaged`), each once, in a fixed order, in the
    category each was said in, naming the caller's line."""
    for message, category in sorted(said, key=lambda pair: (pair[0], pair[1].__module__, pair[1].__qualname__)):
        warnings.warn(message, category, stacklevel=caller_level())


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              vis=None, device=None, npix_x=0, npix_y=0, tuning=None, row_chunks=None, channel_chunks=None,
              keep_operators=KEEP_OPERATORS, split="auto", slabs=None, slab_samples=None, deterministic=False,
              stall_timeout=None, **ignored):
    """`clgrid.dirty2vis` over Dask: the visibilities (nrow, nchan) of the image ``dirty``,
    as a dask array chunked along rows and channels as the data are.  On a distributed
    cluster the predictions (each slab's, or each chunk's with the rows split) start on
    the workers when called, each on its worker (`clgrid.dask.chunks.started`), and the
    array's tasks, which assemble each chunk from them, are lazy; with Dask's local
    schedulers all of it is lazy.

    Keywords and meaning as `clgrid.dirty2vis` (ducc0.wgridder's); ``dirty``'s dtype
    (float32 or float64, numpy or a dask array) sets the precision.  Chunks as for
    `vis2dirty`: ``row_chunks`` / ``channel_chunks``, else those of the first dask array
    among uvw, wgt, mask along rows, and among wgt, mask (or ``freq``) along channels;
    ``split``, ``slabs``, ``slab_samples``, ``keep_operators``, ``deterministic`` and
    ``stall_timeout`` as there (with the planes split, uvw and mask are read once when
    called, for the slabs and groups; compute the result with `clgrid.dask.compute`
    to have it watched too).  The image is
    sent to every worker once (scattered on a distributed cluster, one node of the graph
    otherwise), not once per task.  With the planes split, each slab's task (one per
    group of chunks) predicts its samples' share and each chunk adds its slabs' shares in
    slab order (through shared memory where the workers share the client's host: a
    prediction made again on the same points before this one is computed, or this one
    computed twice at once, is read whole from one computation or refused, saying why,
    never mixed); a chunk without any
    unmasked visibility comes back as zeros.  ``vis``, if given (numpy), receives the
    computed visibilities and is returned instead of the dask array (refused where it
    shares memory with a numpy input, as by `clgrid.dirty2vis`).
    """
    _refuse_unknown(ignored)
    dirty = _local(dirty)
    precision = precision_of(dirty.dtype, "dirty", {"single": np.float32, "double": np.float64})
    if dirty.ndim != 2:
        raise ValueError(f"dirty must be 2-D (npix_x, npix_y), got shape {dirty.shape}")
    for name, n, have in (("npix_x", npix_x, dirty.shape[0]), ("npix_y", npix_y, dirty.shape[1])):
        if n and n != have:
            raise ValueError(f"{name}={n} does not match dirty's shape {dirty.shape}")
    _check_wgt(wgt)
    freq, freq_chunks = _frequencies(freq)
    layout = _layout(uvw, freq, (("uvw", uvw), ("wgt", wgt), ("mask", mask)), (("wgt", wgt), ("mask", mask)),
                     row_chunks, channel_chunks if channel_chunks is not None else freq_chunks)
    options = _options(dirty.shape[0], dirty.shape[1], pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u,
                       flip_v, flip_w, divide_by_n, center_x, center_y, sigma_min, sigma_max, precision, device,
                       nthreads, verbosity, tuning, deterministic)
    dtype = worker_tasks.complex_dtype(precision)
    if vis is not None:
        check_output(vis, "vis", (layout.nrow, layout.nchan), dtype)
        check_apart(vis, "vis", {"dirty": dirty, "wgt": wgt, "uvw": uvw, "freq": freq, "mask": mask})
    stall_seconds(stall_timeout)
    keep = _keep(keep_operators)
    workers = workers_to_prefer(True)
    split, count = _split(split, slabs, do_wgridding, layout, workers, deterministic)
    cap = _slab_samples(slab_samples, layout, deterministic)
    if split == "rows":
        token = _points_token(layout, layout.pieces(uvw, channels=False), layout.pieces(mask), freq, options)
    else:
        chunks = chunk_pieces(layout, uvw, freq, mask)
        token = _points_token(layout, [p[1] for p in chunks], [p[3] for p in chunks], freq, options, count, cap)
    # workers on this host, operators kept: the image goes through a kept file in shared
    # memory, written once (`clgrid.dask.exchange.publishing`), not scattered to each worker
    kept = exchange.prefix(chunking.client(), workers, f"{token}-dirty2vis") if workers and keep > 0 else None
    # (its files are read behind stamps: a task of a failed call still writing one is refused, not read)
    with exchange.using(kept) as shared:
        # (the first pass, computed in a first call, before the image's file is locked)
        slab_layout = None if split == "rows" else first_pass(token, chunks, options, count, cap, keep,
                                                              stall_timeout, len(workers or [None]))
        # the image copied there as the block ends, while its tasks go to the workers
        # (they wait for it), and checked as it is copied (one pass over it, not two; a
        # NaN one refused before it is stamped, the call's tasks then refusing too);
        # without shared memory, checked here first
        with exchange.publishing(shared, "d", dirty, COPY_THREADS, refuse=NOT_FINITE_IMAGE) as image:
            if image is None:
                if count_not_finite(dirty, exchange.copy_threads(dirty.nbytes, COPY_THREADS)):
                    raise ValueError(NOT_FINITE_IMAGE)
                image = dirty
            if split == "rows":
                result = layout.assemble(rows_vis(token, layout, image, uvw, freq, wgt, mask, options, keep,
                                                  workers, dtype, shared), channel_axis=1)
            else:
                result = slab_vis(slab_layout, layout, chunks, image, layout.pieces(wgt), options, keep, workers,
                                  dtype, shared)
    if vis is not None:
        vis[...] = compute(result, stall_timeout=stall_timeout)[0]
        return vis
    return result
