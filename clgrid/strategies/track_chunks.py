"""The moving window's order of a plan: chunks of a baseline's samples, cut on the device.

Both moving-window strategies walk a baseline's samples in the samples' own order (time,
then channel, as seed 004's Algorithm 2 loops), a window at a time.  They need the plan
cut into *chunks*: runs of one baseline and one small ``minor`` key, in that order, at
most ``max_length`` samples long.  The gridder's key is the support and the sign of w (a
chunk is gridded with one window and one conjugation, exactly: seed 000 §8.1), the
degridder's the channel (a track; its window as wide as the chunk's widest support).
On LOFAR tracks the samples' order moves the gridder's window less often than channel
by channel (a subband's channels lie within a cell or so: docs/benchmarks/internals.md).

The chunk table's order is the consumer's (the strategy passes it):

- `LongestFirst`, the gridder's: its work-groups take one tile of one chunk's window
  each, and every work-item of one walks all the chunk's samples, so a work-group's
  time goes with its chunk's *count*, not its width (a wider window is more
  work-groups, not longer ones).  The longest go first, so the kernel does not end on
  a few long work-groups started last (longest processing time first).  The narrowest
  supports make the longest chunks (|w| stays small, so the support holds), which
  widest-first put last, and the gridding kernel took longer so than with the former
  host order by count x width^2 or longest first (docs/benchmarks/internals.md, "The
  moving window's chunks cut on the device").  Counts are ranked in classes of 1/16
  octave (`length_class`), so the device sorts over a couple of hundred classes, not
  every count; quarter octaves were slower than an exact count order with one support.
- `WidestFirst`, the degridder's: it launches one window width at a time, so chunks of
  one support must be consecutive (``supports``, ``per_support``).

A plan made on the device is cut there (``clgrid/cl_kernels/track_chunks.cl``: counts, scans
and stable placements; two small counts come back to size the tables); a plan made on
the host (no fp64, w held over time blocks, interpolated kernels) holds its positions
there already and is cut with numpy (`TrackChunker.on_host`), into the same order to
the entry (both sorts are stable): the tests hold the two equal.  One work-group places
a baseline, so the device cut runs in parallel over baselines: uvw with a single row
axis (one baseline, which the degridder takes as one track per channel) is placed by
one work-group alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..planning.baseline_order import baseline_length
from ..device.codegen import build_program, kernel, launch, render
from ..sources.tables import KernelStack
from ..planning.host import Positions
from ..device.scan import ExclusiveScan
from .base import DevicePlan, read_only_buffer

__all__ = ["ChunkedPlan", "SupportAndSign", "Channel", "LongestFirst", "WidestFirst", "TrackChunker",
           "length_class"]

INT32_MAX = 2 ** 31 - 1
RANK_BLOCK = 64   # chunks a work-group orders by class: class counts take classes x chunks / 64 ints


@dataclass
class ChunkedPlan(DevicePlan):
    """A plan in chunk order with its chunk table, in the chunker's order.

    ``chunks`` (int4 each): first visibility, count, widest support, 1 where the first
    visibility's kernel is conjugated (the whole chunk's, when the key holds the sign
    of w).  ``supports`` the distinct chunk supports, descending, and ``per_support``
    how many chunks have each: consecutive ones, in that order, with `WidestFirst`.
    """

    chunks: cl.Buffer
    num_chunks: int
    supports: np.ndarray
    per_support: np.ndarray


class SupportAndSign:
    """The gridder's runs: one support and one sign of w.  Minor key 2 * rank + sign,
    rank the support's place among the stack's distinct supports."""

    def __init__(self, kernels: KernelStack):
        self.distinct = np.unique(kernels.supports)
        self.kernels = kernels

    def num_minor(self, plan) -> int:
        return 2 * self.distinct.size

    def on_host(self, positions: Positions, plan) -> np.ndarray:
        return 2 * np.searchsorted(self.distinct, positions.support) + positions.conj

    def on_device(self) -> tuple:
        """(C expression, preamble) of the same key, from the packed plan ``p``."""
        minor_of_plane = 2 * np.searchsorted(self.distinct, self.kernels.supports)
        return "MINOR_OF_PLANE[p.w & 0x7fffffff] + (p.w < 0)", \
            f"__constant int MINOR_OF_PLANE[{minor_of_plane.size}] = {{{', '.join(map(str, minor_of_plane))}}};"


class Channel:
    """The degridder's runs: one channel (a baseline's track at one frequency)."""

    def num_minor(self, plan) -> int:
        return plan.nchan or 1

    def on_host(self, positions: Positions, plan) -> np.ndarray:
        return positions.sample % self.num_minor(plan)

    def on_device(self) -> tuple:
        return "s % nchan", ""


CLASS_BITS = 4   # 2^4 length classes per octave: chunks of one class differ by less than 1/16


def length_class(count) -> np.ndarray:
    """``2^CLASS_BITS`` classes per octave of a count (>= 1): the octave, then the
    ``CLASS_BITS`` bits below the top bit, so counts of one class differ by less than a
    factor 1 + 2^-CLASS_BITS.  As ``length_class`` in `LongestFirst.on_device`."""
    count = np.asarray(count, np.int64)
    octave = np.frexp(count)[1] - 1
    return (octave << CLASS_BITS) + (((count << CLASS_BITS) >> octave) & ((1 << CLASS_BITS) - 1))


class LongestFirst:
    """Chunks by descending `length_class` of their count, the gridder's order (see the
    module's docstring): class 0 holds the longest possible, ``max_length``."""

    def __init__(self, kernels: KernelStack, max_length: int):
        self.top = int(length_class(max_length))

    @property
    def num_classes(self) -> int:
        return self.top + 1

    def on_host(self, chunks: np.ndarray) -> np.ndarray:
        return self.top - length_class(chunks[:, 1])

    def on_device(self) -> tuple:
        """(C expression of the int4 chunk ``c``, preamble) of the same class."""
        return f"{self.top} - length_class(c.y)", f"""
inline int length_class(const int count)
{{
    const int octave = 31 - clz(count);
    return (octave << {CLASS_BITS}) + ((int)(((long)count << {CLASS_BITS}) >> octave) & {(1 << CLASS_BITS) - 1});
}}"""


class WidestFirst:
    """Chunks by descending support, the degridder's order: one launch per window width."""

    def __init__(self, kernels: KernelStack, max_length: int):
        self.descending = np.unique(kernels.supports)[::-1]

    @property
    def num_classes(self) -> int:
        return self.descending.size

    def on_host(self, chunks: np.ndarray) -> np.ndarray:
        return np.searchsorted(-self.descending, -chunks[:, 2])

    def on_device(self) -> tuple:
        return "RANK_OF_SUPPORT[c.z]", ""


class TrackChunker:
    """Cuts plans into chunks: runs by ``key`` (`SupportAndSign`, `Channel`) of at most
    ``max_length`` samples, listed in ``order`` (`LongestFirst`, `WidestFirst`: the
    class, made here).  ``wg`` work-items put a baseline's samples in order (the
    strategies' tuning ``arrange_wg``): many compare keys in local memory (GPUs), one
    walks the baseline alone (CPUs)."""

    def __init__(self, queue: cl.CommandQueue, kernels: KernelStack, key, order, max_length: int, wg: int):
        self.queue = queue
        self.key = key
        self.max_length = int(max_length)
        self.order = order(kernels, self.max_length)
        self.descending = np.unique(kernels.supports)[::-1]
        self.kernels = kernels
        self.wg = int(min(wg, queue.device.max_work_group_size))
        self.block = int(min(RANK_BLOCK, queue.device.max_work_group_size))

    def arrange(self, plan) -> ChunkedPlan:
        """The chunks of ``plan``: on the device where it was made there, else on the host."""
        if plan.planned_on == "device":
            return self.on_device(plan)
        positions = plan.host()
        order, chunks = self.on_host(positions, plan)
        return self.upload(positions, order, chunks)

    # -- on the host ----------------------------------------------------------------

    def on_host(self, positions: Positions, plan) -> tuple:
        """``(order, chunks)``: the positions' order and the chunk table (int32, (num_chunks, 4))."""
        key = (positions.sample // baseline_length(plan)).astype(np.int64) * self.key.num_minor(plan) \
            + self.key.on_host(positions, plan)
        order = np.argsort(key, kind="stable")
        key = key[order]
        run_first = np.flatnonzero(np.diff(key, prepend=-1))
        position = np.arange(key.size) - np.repeat(run_first, np.diff(np.append(run_first, key.size)))
        start = np.flatnonzero(position % self.max_length == 0)
        count = np.diff(np.append(start, key.size))
        support = positions.support[order]
        widest = np.maximum.reduceat(support, start) if start.size else support[:0]
        chunks = np.stack([start, count, widest, positions.conj[order][start]], axis=1).astype(np.int32)
        return order, chunks[np.argsort(self.order.on_host(chunks), kind="stable")]

    def upload(self, positions: Positions, order: np.ndarray, chunks: np.ndarray) -> ChunkedPlan:
        """Host-made chunks on the device, with the positions in their ``order``."""
        def buffer(a):     # an empty plan's buffers hold one unread row
            return read_only_buffer(self.queue.context, a if len(a) else np.zeros((1,) + a.shape[1:], a.dtype))

        supports, per_support = np.unique(-chunks[:, 2], return_counts=True)
        return ChunkedPlan(buffer(positions.packed()[order]), None, positions.num_kept,
                           buffer(positions.sample[order].astype(np.int32)), buffer(chunks), len(chunks),
                           -supports, per_support)

    # -- on the device ----------------------------------------------------------------

    @cached_property
    def program(self) -> cl.Program:
        """The kernels, with the key's minor, the order's class and the supports' ranks, widest first."""
        minor, preamble = self.key.on_device()
        order_class, order_preamble = self.order.on_device()
        rank = np.zeros(int(self.descending.max()) + 1, np.int32)
        rank[self.descending] = np.arange(self.descending.size)
        return build_program(self.queue.context, render(
            "track_chunks.cl", minor=minor, preamble=preamble, order_class=order_class,
            order_preamble=order_preamble, rank_of_support=rank.tolist(), wg=self.wg, block=self.block))

    @cached_property
    def plane_supports(self) -> cl.Buffer:
        """The stack's support per plane, on the device."""
        return read_only_buffer(self.queue.context, self.kernels.supports.astype(np.int32))

    def on_device(self, plan) -> ChunkedPlan:
        """The chunks of a plan made on the device, made there.  Every buffer it enqueues work
        on stays referenced until the last count is read back (Oclgrind frees a released
        buffer under pending kernels, though OpenCL says it must wait)."""
        queue, n, program = self.queue, plan.num_kept, self.program
        if not n:
            return self.upload(plan.host(), np.zeros(0, np.int64), np.zeros((0, 4), np.int32))
        scan = ExclusiveScan(queue)   # one per call: its scratch is not shared between threads
        length = baseline_length(plan)
        num_baselines, num_minor = plan.num_samples // length, self.key.num_minor(plan)
        num_keys = num_baselines * num_minor
        if num_keys >= INT32_MAX:
            raise ValueError(f"{num_baselines} baselines x {num_minor} runs each overflow 32-bit run keys")
        # counts copied from zeros, not filled: Oclgrind reads fills as unset
        counts = cla.to_device(queue, np.zeros(num_keys + 1, np.int32))
        starts = cla.empty(queue, num_keys + 1, np.int32)
        launch(kernel(program, "count_keys"), queue, n, plan.packed.data, plan.sample.data, np.int32(n),
               np.int32(length), np.int32(plan.nchan or 1), np.int32(num_minor),
               counts.data)
        scan(counts.data, starts.data, num_keys + 1)
        cursor = starts.copy()
        packed, source = cla.empty(queue, (n, 4), np.int32), cla.empty(queue, n, np.int32)
        kernel(program, "place")(queue, (num_baselines * self.wg,), (self.wg,), plan.packed.data,
                                 plan.sample.data, np.int32(plan.nchan or 1), np.int32(num_minor), starts.data,
                                 cursor.data, packed.data, source.data)

        chunks_of_key = cla.empty(queue, num_keys + 1, np.int32)
        chunk_starts = cla.empty(queue, num_keys + 1, np.int32)
        launch(kernel(program, "count_chunks"), queue, num_keys + 1, starts.data, np.int32(num_keys),
               np.int32(self.max_length), chunks_of_key.data)
        scan(chunks_of_key.data, chunk_starts.data, num_keys + 1)
        num_chunks = int(chunk_starts[num_keys].get())
        chunks = cla.empty(queue, (num_chunks, 4), np.int32)
        launch(kernel(program, "write_chunks"), queue, num_chunks, starts.data, chunk_starts.data,
               np.int32(num_keys), np.int32(num_chunks), np.int32(self.max_length),
               packed.data, self.plane_supports, chunks.data)

        blocks, classes = -(-num_chunks // self.block), self.order.num_classes
        class_counts = cla.to_device(queue, np.zeros(classes * blocks + 1, np.int32))
        class_starts = cla.empty(queue, classes * blocks + 1, np.int32)
        per_rank = cla.to_device(queue, np.zeros(self.descending.size, np.int32))
        kernel(program, "count_classes")(queue, (blocks * self.block,), (self.block,), chunks.data,
                                         np.int32(num_chunks), class_counts.data, per_rank.data)
        scan(class_counts.data, class_starts.data, classes * blocks + 1)
        ordered = cla.empty(queue, (num_chunks, 4), np.int32)
        kernel(program, "place_by_class")(queue, (blocks * self.block,), (self.block,), chunks.data,
                                          np.int32(num_chunks), class_starts.data, ordered.data)
        per_rank = per_rank.get()
        present = per_rank > 0
        return ChunkedPlan(packed.data, None, n, source.data, ordered.data, num_chunks,
                           self.descending[present], per_rank[present])

    def work_list(self, chunked: ChunkedPlan, tiles: np.ndarray) -> tuple:
        """``(work, rows)``: one int2 row (chunk, tile) per work-group, ``tiles[i]`` for each chunk
        of support ``chunked.supports[i]``, in chunk order; expanded on the device from the
        chunk table, whichever side cut it (a scan of the tiles per chunk: chunks of one
        support need not be consecutive)."""
        total = int((chunked.per_support * tiles).sum())
        work = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, 8 * max(total, 1))
        if total:
            queue, n, scan = self.queue, chunked.num_chunks, ExclusiveScan(self.queue)
            tiles_of_support = np.zeros(int(self.descending.max()) + 1, np.int32)
            tiles_of_support[chunked.supports] = tiles
            table = read_only_buffer(queue.context, tiles_of_support)
            # copied from zeros, though kernels write every entry: after a first cut in a
            # process, Oclgrind 21.10 takes a kernel's stores into a fresh buffer for unset
            tiles_of_chunk, first_row = (cla.to_device(queue, np.zeros(n + 1, np.int32)) for _ in range(2))
            launch(kernel(self.program, "count_tiles"), queue, n + 1, chunked.chunks, np.int32(n), table,
                   tiles_of_chunk.data)
            scan(tiles_of_chunk.data, first_row.data, n + 1)
            launch(kernel(self.program, "expand_work"), queue, n, chunked.chunks, np.int32(n), table,
                   first_row.data, work).wait()   # before any buffer goes (`on_device`)
        return work, total
