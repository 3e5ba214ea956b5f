"""What runs on the Dask workers for `clgrid.dask.wgridding`: the worker's kept
`WGridder` s, and the tasks of both splits (the rows split's chunk images and
predictions; the planes split's first pass over the chunks, each chunk's selections and
values for the slabs, each slab's image or prediction, and a chunk's visibilities
assembled from the slabs' shares).  The client builds the graph over these
(`clgrid.dask.rows_split`, `clgrid.dask.planes_split`, the sum `clgrid.dask.images`);
each task names its chunk or slab in errors
(`clgrid.dask.chunks.naming`).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

from . import exchange
from .chunks import naming
from .delivery import DropBox, region
from .slabs import (Slab, assemble, extent, parts_at, plane_counts, points_of, selection, split, takes_whole,
                    values_at)
from ..call_warnings import gathering
from ..device.host_threads import in_slices, not_finite, parallel_copy
from ..device.runtime import get_queue
from ..imaging.devices import first_device, sample_weight
from ..imaging.engine import NOT_FINITE_VIS
from ..imaging.geometry import DIRECTIONS
from ..imaging.memory import engine_device_bytes
from ..imaging.stream import DEVICE_SHARE
from ..imaging.wgridding import WGridder
from ..planning.host import SPEED_OF_LIGHT

__all__ = ["SlabPoints", "cached_wgridders", "forget_operators", "image_chunk", "vis_chunk", "chunk_extent", "slab_capacity",
           "chunk_counts", "split_weight", "chunk_selection", "chunk_values", "chunk_parts", "slab_points", "image_slab",
           "vis_slab", "chunk_assemble", "add_images", "sum_facet", "warnings_union", "chunk_shape", "zeros_image",
           "complex_dtype"]

_operators: OrderedDict = OrderedDict()     # key -> (WGridder, its lock)
_counts = {"made": 0, "reused": 0}
_lock = threading.Lock()
# a slab's operator takes its samples' u, v, w in wavelengths: one channel at c (a scale of 1)
UNIT_FREQ = np.array([SPEED_OF_LIGHT])
TASK_MEMORY_SHARE = 0.5       # of a GPU worker's device memory a slab task's samples and grid may take


@dataclass
class SlabPoints:
    """One slab task's points as its worker keeps them: its parts from its chunks, in
    order, without values (`Part`), and a key of its own (the worker's operator for them
    is kept under it; made afresh whenever the points are, so a recomputed copy never
    finds a stale operator)."""

    parts: list
    key: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def lengths(self) -> list:
        return [len(p) for p in self.parts]

    def __sizeof__(self) -> int:
        """Its arrays' bytes: what Dask weighs moving it by (`dask.sizeof`; told an object
        header's few bytes, the scheduler counts a slab task's points as free to move)."""
        return object.__sizeof__(self) + sum(p.__sizeof__() for p in self.parts)




def _operator(key, points, options: dict, keep: int, geometry=None, planes=None) -> tuple:
    """The worker's `WGridder` kept under ``key`` (with the lock that serialises its
    calls), else built from ``points()`` = (uvw, freq, mask) with the call's keywords,
    ``geometry`` and ``planes``, and kept (the ``keep`` used last), or made for this
    call only where ``keep`` is 0."""
    key = key + (os.environ.get("CLGRID_DEVICE"),)
    with _lock:
        found = _operators.get(key)
        if found is not None:
            _operators.move_to_end(key)
            _counts["reused"] += 1
            return found
    uvw, freq, mask = points()
    if geometry is not None and keep > 0:
        _make_room(engine_device_bytes(geometry, options["precision"], len(uvw) * np.size(freq)), options["device"])
    kwargs = dict(options, tuning=None if options["tuning"] is None else dict(options["tuning"]))
    if isinstance(kwargs["device"], tuple):
        kwargs["device"] = list(kwargs["device"])
    made = (WGridder(uvw, freq, mask=mask, geometry=geometry, planes=planes, **kwargs), threading.Lock())
    with _lock:
        _counts["made"] += 1
        if keep > 0:
            made = _operators.setdefault(key, made)
            _operators.move_to_end(key)
        while len(_operators) > keep:
            _operators.popitem(last=False)
    return made


def _make_room(need: int, device) -> None:
    """Drop the least recently used kept operators while they and one more of ``need``
    bytes (its engine's peak, `clgrid.imaging.memory.engine_device_bytes`) would not fit
    the device's share of memory that an engine may take (`clgrid.imaging.stream.DEVICE_SHARE`):
    each engine weighs its own need against the whole memory, not what the worker's other
    operators hold.  (An operator a running task still holds frees its memory when that
    task ends.)"""
    limit = get_queue(first_device(device)).device.global_mem_size * DEVICE_SHARE
    with _lock:
        while _operators and sum(_held_bytes(op) for op, _ in _operators.values()) + need > limit:
            _operators.popitem(last=False)


def _held_bytes(operator) -> int:
    """The device memory a kept operator's engines hold (their peak, as they say it)."""
    return sum(engine.device_bytes() for engine in operator.engines)


def _chunk_operator(token, chunk, uvw, freq, mask, options: dict, keep: int) -> tuple:
    """A chunk's own operator (the rows split), kept under the call's token and the chunk."""
    return _operator((token, chunk.index), lambda: (np.asarray(uvw), np.asarray(freq),
                                                    None if mask is None else np.asarray(mask)), options, keep)



def cached_wgridders() -> dict:
    """This process's kept operators: how many it keeps, and how many it has made and
    reused since the last `clgrid.dask.clear_wgridders` (``client.run(clgrid.dask.cached_wgridders)``)."""
    with _lock:
        return dict(_counts, kept=len(_operators))


def forget_operators() -> int:
    """Drop this process's kept operators and reset the counts; returns how many were dropped."""
    with _lock:
        count = len(_operators)
        _operators.clear()
        _counts.update(made=0, reused=0)
    return count


def _all_masked(mask) -> bool:
    return mask is not None and not np.any(mask)


def zeros_image(options: dict) -> np.ndarray:
    real = np.float64 if options["precision"] == "double" else np.float32
    return np.zeros((options["npix_x"], options["npix_y"]), real)


def complex_dtype(precision: str):
    return np.complex128 if precision == "double" else np.complex64


def _facets(image: np.ndarray, count: int) -> tuple:
    """``image`` cut into ``count`` blocks of rows (views), for the facet sums."""
    return tuple(np.array_split(image, count, axis=0))


def _room(place, shape: tuple, dtype):
    """Where an imaging task writes its image (`clgrid.dask.images.image_place`): (the
    file's path, a writable array over it) for the client's box (a `DropBox`, where this
    host has it) or a file of the call in shared memory; (None, None) for neither."""
    if isinstance(place, DropBox):
        room = region(place, 0, shape)
        return (None, None) if room is None else (place.path, room)
    room = exchange.room_of(place, shape, dtype)
    return (None, None) if room is None else (place, room)


def _imaged(operator, lock, vis, wgt, place=None, facets: int = 1) -> tuple:
    """The operator's image of ``vis`` in ``facets`` facets and the warnings its call gave
    (a frozenset of (message, category) pairs, for the client to say as they were said;
    none where the image is zero: a part without data is no news, the caller warns for
    the set).  Where
    ``place`` gives room (`_room`), the image is written straight there and its facets
    are `clgrid.dask.exchange.Shared` s over that file (a few bytes each through Dask);
    else views of a new image.  The warnings are those said through
    `clgrid.call_warnings.warn` on this thread, gathered there, not through the
    process's warning state: the tasks a worker runs at once on its threads each keep
    their own."""
    path, room = None, None
    if place is not None:
        path, room = _room(place, (operator.npix_x, operator.npix_y),
                           np.float64 if operator.precision == "double" else np.float32)
    gathered = []
    with lock, gathering(gathered):
        image = operator.vis2dirty(vis, wgt) if room is None else operator.vis2dirty(vis, wgt, out=room)
    said = frozenset(gathered)                  # (message, category) pairs
    said = said if not said or np.any(image) else frozenset()      # (a pass over the image only to drop some)
    parts = _facets(image, facets)
    if path is not None:
        columns, start, shared = image.shape[1], 0, []
        for part in parts:
            shared.append(exchange.Shared(path, start * columns, int(part.size), image.dtype.str,
                                          tuple(int(n) for n in part.shape)))
            start += part.shape[0]
        parts = tuple(shared)
    return parts, said


def image_chunk(token, uvw, freq, vis, wgt, mask, chunk, options, keep, facets, place=None):
    """One task of the rows split: the dirty image of one chunk, in facets, and its
    warnings (``place`` as for `image_slab`)."""
    with naming(chunk):
        if _all_masked(mask):                # nothing to image: no operator, no warning
            return _facets(zeros_image(options), facets) + (frozenset(),)
        operator, lock = _chunk_operator(token, chunk, uvw, freq, mask, options, keep)
        parts, said = _imaged(operator, lock, vis, wgt, place, facets)
        return parts + (said,)


def vis_chunk(token, dirty, uvw, freq, wgt, mask, chunk, options, keep):
    """One task of the rows split: the visibilities of one chunk predicted from the image."""
    with naming(chunk):
        if _all_masked(mask):
            return np.zeros((len(uvw), len(freq)), complex_dtype(options["precision"]))
        operator, lock = _chunk_operator(token, chunk, uvw, freq, mask, options, keep)
        with lock, exchange.taken(dirty) as image:
            return operator.dirty2vis(image, wgt)


def chunk_extent(chunk, uvw, freq, mask):
    with naming(chunk):
        return extent(uvw, freq, mask)


def split_weight(options) -> dict:
    """The planes split's sample weight in each direction for this worker's device,
    {direction: weight} (`clgrid.imaging.devices.sample_weight` over "dask": the tuning
    table's, or the call's ``tuning``)."""
    return {d: sample_weight(options["device"], options["tuning"], d, over="dask") for d in DIRECTIONS}


def slab_capacity(options, geometry, tasks: int = 1) -> int | None:
    """How many samples one slab task may take on this worker's device (the first, where
    it holds several): the most whose engine's peak device memory
    (`clgrid.imaging.memory.engine_device_bytes`, its grid with it) fits
    `TASK_MEMORY_SHARE` of the device's global memory shared among the ``tasks`` slab
    tasks the worker runs in a call (at least one; older kept operators make room,
    `_make_room`); None where the device is not a GPU (a CPU device's memory is the
    host's, which the workers and their chunks share)."""
    found = get_queue(first_device(options["device"])).device
    if not found.type & cl.device_type.GPU:
        return None
    room = found.global_mem_size * TASK_MEMORY_SHARE / max(1, int(tasks))

    def fits(n: int) -> bool:
        return engine_device_bytes(geometry, options["precision"], n) <= room

    if not fits(0):
        return 0
    low, high = 0, 1
    while fits(high):                 # (the model grows with the samples: bisect between powers of two)
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def chunk_counts(chunk, uvw, freq, mask, geometry, threads: int = 1):
    """How many of a chunk's samples have each first plane (on ``threads`` host threads)."""
    with naming(chunk):
        return plane_counts(uvw, freq, mask, geometry, threads)


def chunk_selection(chunk, uvw, freq, mask, geometry, bounds, near=None, threads: int = 1) -> list:
    """A chunk's samples for each slab: flat indices (`clgrid.dask.slabs.selection`, on
    ``threads`` host threads), or None where a slab takes the chunk whole
    (`clgrid.dask.slabs.takes_whole`: then nothing is kept, and its values are the
    chunk's vis as they are: no picks, and no copy where unweighted).  ``near`` (the
    chunk's vis block, unused) only makes Dask run it, and keep it, where that block is:
    every later call's `chunk_values` needs both."""
    with naming(chunk):
        taken = selection(uvw, freq, mask, geometry, bounds, threads)
        every = len(uvw) * len(freq)
        kept = every if mask is None else int(np.count_nonzero(mask))
        return [None if takes_whole(len(flat), kept, every) else flat for flat in taken]


def chunk_values(chunk, vis, wgt, taken, threads: int, targets=None, wanted=None) -> tuple:
    """A chunk's weighted values for each slab, at its kept selection (on ``threads``
    host threads).  With weights, non-finite values or weights are refused here, where
    the chunk is known; without, the values are only copied or picked, and the slab's
    operator counts them as it takes them on its device (`image_slab` then names the
    chunks that hold them): no pass over them here.  With ``targets`` (per slab: None,
    or (file, element offset, count) in shared memory), a slab's values are written
    there (its task's file, at this chunk's place in it) and their
    `clgrid.dask.exchange.Shared` returned instead.  ``wanted`` (per slab; None: all):
    the slabs imaged in this call, None for the others."""
    with naming(chunk):
        out, check = [], wgt is not None
        for s, flat in enumerate(taken):
            if wanted is not None and not wanted[s]:
                out.append(None)
                continue
            target = None if targets is None else targets[s]
            if target is None:
                out.append(values_at(vis, wgt, flat, threads, check=check))
                continue
            path, offset, count = target
            n = np.size(vis) if flat is None else len(flat)
            if n != count:
                raise RuntimeError(f"clgrid.dask: internal error: {n} samples selected for slab {s}, {count} "
                                   f"counted from the first pass")
            out.append(exchange.write_into(path, offset, (n,), np.asarray(vis).dtype,
                                           lambda room, flat=flat: values_at(vis, wgt, flat, threads, out=room,
                                                                             check=check)))
        return tuple(out)


def chunk_parts(chunk, uvw, freq, taken) -> tuple:
    """A chunk's samples for each slab as `Part` s (rows, row and channel numbers)."""
    with naming(chunk):
        return tuple(parts_at(uvw, freq, taken))


def slab_points(*parts) -> SlabPoints:
    """A slab task's points, kept on its worker (persisted) where operators are kept.  The
    parts come as arguments, not in a list: Dask puts a task's worker annotation on every
    task upstream of a list argument (the data's own), and a task tied so to a worker that
    left waits for ever (`clgrid.dask.chunks.prefer_worker`)."""
    return SlabPoints(list(parts))


def _slab_operator(points: SlabPoints, geometry, slab: Slab, options, keep):
    """The slab task's operator over its planes: kept under its points' key, else built
    from them (u, v, w in wavelengths: freq = c)."""
    threads = max(1, options["nthreads"])
    return _operator((points.key,), lambda: (points_of(points.parts, threads), UNIT_FREQ, None), options, keep,
                     geometry, slab.operator_planes())


def image_slab(points: SlabPoints, geometry, slab: Slab, options, keep, facets, place, chunks, *values):
    """One task of the planes split: the image of the taps on one slab's planes, from its
    samples of its group of chunks (``chunks``, their `Chunk` s; values: one array, or
    `clgrid.dask.exchange.Shared`, per chunk, as arguments: `slab_points` says why; or a
    chunk's whole `chunk_values` tuple, of which this slab's entry is taken), in facets,
    and its warnings.  With a ``place`` (`clgrid.dask.images.image_place`: the client's
    box, or a file in shared memory), the image is written straight there and its facets
    are `Shared` s.  Values the operator refuses as not finite are looked for, then only,
    in each chunk's, and the error names the chunks that hold them."""
    with naming(slab):
        operator, lock = _slab_operator(points, geometry, slab, options, keep)
        threads = max(1, options["nthreads"])
        values = [v[slab.index] if isinstance(v, tuple) else v for v in values]     # a chunk's whole result
        joined = exchange.readable(values)
        if joined is None:
            joined = _joined([exchange.read(v) for v in values], threads)
        try:
            parts, said = _imaged(operator, lock, joined[:, None], None, place, facets)
        except ValueError as error:
            if str(error).startswith(NOT_FINITE_VIS) and hasattr(error, "add_note"):
                for chunk, v in zip(chunks, values):
                    bad = not_finite(np.asarray(exchange.read(v)))
                    if bad:          # (a chunk taken whole: some may be samples this slab drops)
                        error.add_note(f"{chunk.describe()}: {bad} non-finite among its values for this slab")
            raise
        return parts + (said,)


def sum_facet(box, start: int, threads: int, facet: int, *parts) -> tuple:
    """One facet of the image: the imaging tasks' parts of it (arrays, or `Shared`; or an
    imaging task's whole output, of which entry ``facet`` is taken) added pairwise by
    task number (`clgrid.dask.chunks.tree_sum`'s order: the same bits as its tree of
    `add_images`), on ``threads`` host threads, written into the
    client's ``box`` at row ``start`` where this host has it (then None), else returned;
    with how many of its pixels are not finite, and whether any is non-zero (counted as
    they are written, so the client need not pass over the image again).  A single part
    may be the box's own rows (a call's only imaging task wrote its image there: then it
    is only counted); nothing is ever added into the box in place, so a sum run again
    writes the same.  (Each thread takes one range of rows whole: in cache-sized blocks
    the threads' many small calls queue for the GIL.)"""
    parts = [p[facet] if isinstance(p, tuple) else p for p in parts]
    arrays = [exchange.read(p) for p in parts]
    out = region(box, start, arrays[0].shape)
    if out is not None and any(isinstance(p, exchange.Shared) and p.path == box.path for p in parts):
        if len(parts) > 1 or parts[0].offset != start * int(np.prod(arrays[0].shape[1:])):
            raise RuntimeError(f"clgrid.dask: internal error: a facet sum of {len(parts)} parts, one in the box "
                               f"(element {parts[0].offset}), at row {start}")
        arrays[0] = out                          # (the box holds the image: counted only)
    target = out if out is not None else np.empty(arrays[0].shape, arrays[0].dtype)
    bad, nonzero, lock = [0], [False], threading.Lock()

    def rows(r):
        level = [a[r] for a in arrays]
        while len(level) > 2:                    # (temporaries only for more than two parts)
            level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
        if len(level) == 2:
            np.add(level[0], level[1], out=target[r])
        elif arrays[0] is not target:
            np.copyto(target[r], level[0])
        found, some = _counted(target[r])
        with lock:
            bad[0] += found
            nonzero[0] = nonzero[0] or some

    in_slices(exchange.copy_threads(target.nbytes * len(arrays), threads), target.shape[0], rows)
    return None if out is not None else target, bad[0], nonzero[0]


def _counted(a: np.ndarray) -> tuple:
    """(how many entries of ``a`` are not finite, whether any is non-zero): from one sum
    over it where that sum is finite and non-zero (`not_finite`'s own first pass), else
    with a count and a look for a non-zero entry."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(a, axis=None)
    if np.isfinite(total):
        return 0, bool(total != 0) or bool(np.any(a))
    return not_finite(a), bool(np.any(a))


def _joined(values: list, threads: int) -> np.ndarray:
    """The values from a slab task's chunks as one array (copied on ``threads`` host threads)."""
    if len(values) == 1:
        return values[0]
    out = np.empty(sum(len(v) for v in values), values[0].dtype)
    start = 0
    for v in values:
        parallel_copy(out[start:start + len(v)], v, max(1, threads))
        start += len(v)
    return out


def vis_slab(dirty, points: SlabPoints, geometry, slab: Slab, options, keep, place=None):
    """One task of the planes split: its samples' shares of the visibilities (the taps on
    its planes, unweighted), one array per chunk of its group; with ``place`` (a file in
    shared memory) and a published image, written there (straight into
    `clgrid.dask.exchange.stamped_room`, the file this task's alone meanwhile) behind a
    stamp of this write (`stamped_shares`), a `Shared` per chunk returned instead.  The
    task computed again (or twice at once) writes the file again under a stamp of its
    own: the readers of the first write then refuse, saying so, rather than read it
    rewritten or half of each."""
    with naming(slab):
        operator, lock = _slab_operator(points, geometry, slab, options, keep)
        stamped = place is not None and isinstance(dirty, exchange.Published)
        dtype = complex_dtype(options["precision"])
        with lock, exchange.taken(dirty) as image, \
                exchange.stamped_room(place if stamped else None, sum(points.lengths), dtype) as room:
            # the prediction written straight into the shared file (no copy of it after)
            predicted = operator.dirty2vis(image, out=None if room is None else room[:, None])[:, 0]
            if room is not None:
                # stamped before the image's stamp is checked again (leaving `taken`): a
                # later call writes this file only once its own image is published, so
                # after that check; stamped later, this call's stamp could land on the
                # later call's half-written values, and its readers would take them
                return exchange.stamped_shares(place, points.lengths, dtype)
        return split(predicted, points.parts)


def chunk_assemble(chunk, taken, wgt, mask, dtype, threads: int, picks: tuple, *shares):
    """A chunk's visibilities: each slab's share added at its samples in slab order, then
    weighted (on ``threads`` host threads).  ``shares``: one argument per slab, in slab
    order (as arguments, not in a list: `slab_points` says why): None where the slab
    takes nothing from the chunk or predicts nothing in this call (no dirty2vis planes),
    else the chunk's share (an array, or
    `clgrid.dask.exchange.Shared`), or, where ``picks`` (per slab) holds a number, the
    slab task's whole `vis_slab` output (a tuple of `Shared`, a few bytes each), of which
    entry ``picks[s]`` is the chunk's: no task in between to pick it
    (`clgrid.dask.planes_split.slab_vis`)."""
    shares = [share if pick is None else share[pick] for share, pick in zip(shares, picks)]
    # a slab without a share here (it takes nothing from the chunk, or has no dirty2vis
    # planes) is left out, its selection with it
    taken = [flat for flat, share in zip(taken, shares) if share is not None]
    with naming(chunk), exchange.reading([share for share in shares if share is not None]) as arrays:
        if not arrays:
            arrays, taken = [np.zeros(0, dtype)], [np.zeros(0, np.int64)]
        return assemble(chunk_shape(chunk), taken, arrays, wgt, mask, dtype, threads)


def add_images(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def warnings_union(*sets) -> frozenset:
    """The union of the imaging tasks' warnings (each a frozenset, or a task's whole
    output, whose last entry it is)."""
    return frozenset().union(*(s[-1] if isinstance(s, tuple) else s for s in sets))



def chunk_shape(chunk) -> tuple:
    return chunk.rows[1] - chunk.rows[0], chunk.channels[1] - chunk.channels[0]
