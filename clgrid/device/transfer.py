"""Host arrays to and from a discrete device at the bus's speed, through pinned staging.

A copy from a pageable numpy array runs at a fraction of what the bus carries from
pinned (ALLOC_HOST_PTR, mapped) memory, and a copy into a fresh array slower still, its
pages faulting in one by one (``benchmarks/transfers.py``; the figures:
docs/benchmarks/whole-calls.md).  So a `Staging` keeps two pinned buffers and moves an
array piece by piece: a piece is copied between the caller's array and one pinned
buffer on several host threads (numpy copies release the GIL) while the other buffer's
piece crosses the bus.  Devices that share the
host's memory (CPUs: PoCL, Intel's runtime) gain nothing from it and copy directly.

A result the library hands back (a grid, an image, visibilities) needs a new host array
each call, and a fresh grid's page faults cost a visible part of a whole call.  `host_empty` gives such arrays in pinned memory instead, recycled: a pinned block
goes back to its context's pool when the last array or view on it is dropped (as
CuPy's pinned memory pool), so a loop that drops each call's result reuses two blocks,
and the device writes into them at the bus's speed.  The pools keep at most
`POOL_BYTES` of freed blocks in the whole process (blocks in use are the caller's
arrays; one `clgrid.device.free_lists.FreeList` keyed by context and size).  Pinning costs tens of milliseconds, so a size gets pinned blocks only from its
second request on: a one-off call keeps numpy's array.
"""

from __future__ import annotations

import operator
import os
import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .free_lists import FreeList
from .host_blocks import LentBlock
from .host_threads import in_slices, parallel_copy
from .registered import copy_down, copy_up

__all__ = ["Staging", "shared_staging", "device_layout", "to_device_array", "upload", "upload_pinned", "download",
           "host_empty"]

# Freed pinned blocks the process keeps for reuse, every context's pool together (a device
# list's outputs may come from several); beyond this they are unpinned.  A major cycle's
# results (an image, and the visibilities: 512 MB for 64 M in single) must fit beside each
# other, or each call pins its visibilities afresh.
POOL_BYTES = 4 * 2 ** 30
# Pieces of 64 MiB: each piece costs a thread dispatch, so smaller pieces lose more than the
# overlap gains (16 against 64 MiB pieces on an H100: docs/benchmarks/whole-calls.md).
PIECE_BYTES = 64 * 2 ** 20
# Uploads of up to this many bytes may go through one pinned block of their own size
# (`Staging.upload`): a quarter of what the pools keep, so that the block comes back to them.
WHOLE_BYTES = POOL_BYTES // 4
_pool_lock = threading.Lock()            # (of the shared stagings)
_pinned = FreeList()                     # freed pinned blocks, every context's: (context, bytes) -> (buffer, mapped)
_asked: set = set()                      # the (context, bytes) asked for so far (under _pinned.lock)


def _copy_threads() -> int:
    """Host threads of a staged copy: every core, at most 16."""
    return min(16, os.cpu_count() or 1)


def _parallel_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` (1-D byte views of equal size) on `_copy_threads` host threads."""
    parallel_copy(dst, src, _copy_threads())


def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


class Staging:
    """Two pinned buffers of ``piece`` bytes (128 MiB of pinned host memory by default) on
    ``queue``'s context, for `upload` and `download`."""

    def __init__(self, queue: cl.CommandQueue, piece: int = PIECE_BYTES):
        self.queue = queue
        self.piece = int(piece)
        self._lock = threading.Lock()
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
        self._buffers = [cl.Buffer(queue.context, flags, self.piece) for _ in range(2)]
        self._host = [cl.enqueue_map_buffer(queue, b, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                            (self.piece,), np.uint8)[0] for b in self._buffers]

    @staticmethod
    def worth_it(device) -> bool:
        """Only for GPUs with memory of their own (not for CPUs, nor for simulators such as
        Oclgrind that call themselves every type at once)."""
        return device.type == cl.device_type.GPU and not device.host_unified_memory

    def upload(self, host: np.ndarray, buffer: cl.Buffer) -> None:
        """Copy the C-contiguous ``host`` into the start of ``buffer``; returns when done.
        An array of more than two pieces, up to `WHOLE_BYTES`, whose size was asked for
        before, goes through one pinned block of its size from the context's pool instead
        (`_upload_whole`).  From a registered mapping (`clgrid.device.registered`) straight,
        at the pinned speed where the runtime pins registered memory."""
        src = _bytes(np.ascontiguousarray(host))
        if copy_up(self.queue, src, buffer):     # (a registered mapping's: `clgrid.device.registered`)
            return
        if 2 * self.piece < src.size <= WHOLE_BYTES:
            block = _take_pinned(self.queue, src.size, kept_only=True)
            if block is not None:
                self._upload_whole(src, buffer, block)
                return
        with self._lock:
            pending = [None, None]
            for i, start in enumerate(range(0, src.size, self.piece)):
                slot = i % 2
                if pending[slot] is not None:
                    pending[slot].wait()
                n = min(self.piece, src.size - start)
                _parallel_copy(self._host[slot][:n], src[start:start + n])
                pending[slot] = cl.enqueue_copy(self.queue, buffer, self._host[slot][:n], dst_offset=start,
                                                is_blocking=False)
            for event in pending:
                if event is not None:
                    event.wait()

    def _upload_whole(self, src: np.ndarray, buffer: cl.Buffer, block) -> None:
        """``src`` (bytes) into ``buffer`` through ``block`` = (pinned buffer, its mapped bytes)
        of ``src``'s size, then given back to the pool: each host thread copies its slice
        into the block and sends that slice across at once.  The pieces' loop takes the GIL
        back for every slice of every piece, and waits for it while another device's thread
        holds it; here each thread takes it a few times in all."""
        pinned, mapped = block
        events = []

        def send(r):
            np.copyto(mapped[r], src[r])
            events.append(cl.enqueue_copy(self.queue, buffer, mapped[r], dst_offset=r.start, is_blocking=False))

        try:
            in_slices(_copy_threads(), src.size, send)
        finally:
            if events:                          # (none where every copy failed: OpenCL refuses an empty wait)
                cl.wait_for_events(events)      # (the block is read until then)
            _give_back_pinned(self.queue.context.int_ptr, pinned, mapped)

    def download(self, buffer: cl.Buffer, host: np.ndarray, wait_for=None, portable: bool = False) -> None:
        """Copy the start of ``buffer`` into the C-contiguous ``host``; returns when done.
        Straight across the bus where ``host`` lies in a pinned block of this staging's
        context (`host_empty`), or of any context with ``portable`` (the platform's pinned
        memory serves every context: the tuning table's ``pinned_across_contexts``);
        another context's block (a device list's output) otherwise goes through the
        staging's pieces, as pageable memory would: it need not be pinned for this
        context.  Into a registered mapping (`clgrid.device.registered`: shared memory
        another process reads) straight, at the pinned speed too where the runtime pins
        registered memory."""
        if not (isinstance(host, np.ndarray) and host.flags.c_contiguous and host.flags.writeable):
            raise ValueError("Staging.download: host must be a writable C-contiguous numpy array (a copy "
                             f"would take the values and be lost), got {type(host).__name__}"
                             + (f" with strides {host.strides}" if isinstance(host, np.ndarray) else ""))
        if _pinned_for(host, self.queue, portable):
            cl.enqueue_copy(self.queue, host, buffer, wait_for=wait_for).wait()
            return
        dst = _bytes(host)
        if copy_down(self.queue, buffer, dst, wait_for):     # (a registered mapping's)
            return
        self._pieces_down(buffer, dst.size, self.piece,
                          lambda at, piece: _parallel_copy(dst[at:at + piece.size], piece), wait_for)

    def _pieces_down(self, buffer: cl.Buffer, nbytes: int, step: int, use, wait_for=None) -> None:
        """The first ``nbytes`` of ``buffer`` brought down in pieces of ``step`` bytes through
        the two pinned buffers in turn, ``use(offset, piece)`` (piece: the pinned bytes) called
        on each while the next crosses; under the staging's lock."""
        starts = list(range(0, nbytes, step))
        events = {}

        def fetch(i):
            n = min(step, nbytes - starts[i])
            events[i] = cl.enqueue_copy(self.queue, self._host[i % 2][:n], buffer, src_offset=starts[i],
                                        is_blocking=False, wait_for=wait_for)

        with self._lock:
            if starts:
                fetch(0)
            for i, start in enumerate(starts):
                if i + 1 < len(starts):
                    fetch(i + 1)                          # the next piece crosses while this one is used
                events[i].wait()
                use(start, self._host[i % 2][:min(step, nbytes - start)])


class _PinnedBlock(LentBlock):
    """A pinned buffer seen as one array (`clgrid.device.host_blocks.LentBlock`): the base
    of every array `host_empty` returns; when it dies its buffer goes back to the pool.
    ``context``: the OpenCL context it is pinned for (its buffer's)."""

    def __init__(self, buffer: cl.Buffer, mapped: np.ndarray, shape, dtype):
        self.context = buffer.context
        super().__init__(mapped, shape, dtype, _give_back_pinned, self.context.int_ptr, buffer, mapped)


def _take_pinned(queue, nbytes: int, kept_only: bool = False):
    """A pinned (buffer, mapped bytes) pair of ``nbytes`` on ``queue``'s context, a freed one
    where there is one; None on a size's first request in that context; with
    ``kept_only``, None too where a new block would not be kept when given back (the
    pools hold `POOL_BYTES` already): a block for one copy, pinned afresh each time,
    costs more than it saves."""
    key = (queue.context.int_ptr, nbytes)
    with _pinned.lock:
        if key not in _asked:
            _asked.add(key)
            return None
        block = _pinned.take(key)
        if block is None and kept_only and _pinned.free_bytes + nbytes > POOL_BYTES:
            return None
    if block is not None:
        return block
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
    mapped, _ = cl.enqueue_map_buffer(queue, buffer, cl.map_flags.READ | cl.map_flags.WRITE, 0, (nbytes,),
                                      np.uint8)
    return buffer, mapped


def _give_back_pinned(context: int, buffer: cl.Buffer, mapped: np.ndarray) -> None:
    """A freed pinned block kept for its context (``context``: its ``int_ptr``) while every
    context's together keep at most `POOL_BYTES` (a cap per process, not per context: a
    list of eight devices pins no more than one); else unpinned as it is dropped."""
    _pinned.give_back((context, mapped.size), (buffer, mapped), nbytes=mapped.size, bytes_at_most=POOL_BYTES)


def _pinned_for(host: np.ndarray, queue: cl.CommandQueue, portable: bool) -> bool:
    """Whether ``host`` lies in a pinned block that ``queue`` may copy straight to or from:
    one of its context's, or any with ``portable``."""
    block = _pinned_block(host)
    return block is not None and (portable or block.context.int_ptr == queue.context.int_ptr)


def _pinned_block(a: np.ndarray):
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return base if isinstance(base, _PinnedBlock) else None


def host_empty(shape, dtype, staging: Staging | None) -> np.ndarray:
    """A new C-contiguous host array for a result that ``staging``'s device writes: pinned
    and recycled where staging pays and the size was asked for before, else `np.empty`.
    ``shape`` is an integer or a sequence of them, as `np.empty` takes it: a float (3.7) is
    a TypeError and a negative size a ValueError, never truncated or passed on."""
    dtype = np.dtype(dtype)
    shape = tuple(operator.index(n) for n in ((shape,) if np.ndim(shape) == 0 else shape))
    if any(n < 0 for n in shape):
        raise ValueError(f"host_empty: negative dimensions are not allowed, got shape {shape}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if staging is None or nbytes == 0:
        return np.empty(shape, dtype)
    taken = _take_pinned(staging.queue, nbytes)
    if taken is None:
        return np.empty(shape, dtype)
    return np.asarray(_PinnedBlock(*taken, shape, dtype))


_shared: dict = {}


def shared_staging(queue: cl.CommandQueue) -> Staging | None:
    """One `Staging` per queue for operators made and dropped call after call (clgrid.vis2dirty
    builds an operator per call): pinning 128 MiB costs tens of milliseconds, so it is
    done once.  None where staging does not pay (`Staging.worth_it`).  Its lock
    serialises the copies of operators sharing it."""
    if not Staging.worth_it(queue.device):
        return None
    with _pool_lock:
        key = queue.int_ptr
        if key not in _shared:
            _shared[key] = Staging(queue)
        return _shared[key]


def device_layout(host: np.ndarray) -> np.ndarray:
    """``host`` as the device reads it: C-contiguous, in the machine's byte order (a
    big-endian array, as FITS files give, is converted; the values are unchanged)."""
    host = np.asarray(host)
    return np.ascontiguousarray(host, host.dtype.newbyteorder("="))


def upload(queue, host: np.ndarray, buffer: cl.Buffer, staging: Staging | None, wait_for=None) -> cl.Event:
    """Copy ``host`` into the start of ``buffer`` after ``wait_for``: through ``staging`` when
    there is one (done on return; the event is a marker), else a plain enqueued copy."""
    host = device_layout(host)
    if not host.nbytes:                       # nothing to copy (and no buffer behind an empty array)
        return cl.enqueue_marker(queue, wait_for=wait_for)
    if staging is None:
        return cl.enqueue_copy(queue, buffer, host, is_blocking=False, wait_for=wait_for)
    if wait_for:
        cl.wait_for_events(wait_for)
    staging.upload(host, buffer)
    return cl.enqueue_marker(queue)


def upload_pinned(queue, host: np.ndarray, buffer: cl.Buffer, staging: Staging | None,
                  portable: bool = False) -> cl.Event:
    """Copy the C-contiguous ``host`` into the start of ``buffer``, without waiting where it
    can: straight across the bus, the event's completion the copy's, where ``host`` lies in
    a pinned block ``queue`` may copy from (`Staging.download`'s ``portable``) or there is
    no staging; else as `upload` (done on return, the event a marker).  ``host`` must stay
    as it is until the event completes."""
    if staging is None or _pinned_for(host, queue, portable):
        if not host.nbytes:
            return cl.enqueue_marker(queue)
        event = cl.enqueue_copy(queue, buffer, host, is_blocking=False)
        queue.flush()
        return event
    return upload(queue, host, buffer, staging)


def download(queue, buffer: cl.Buffer, host: np.ndarray, staging: Staging | None, wait_for=None,
             portable: bool = False) -> None:
    """Copy the start of ``buffer`` into the C-contiguous ``host`` after ``wait_for``; returns
    when done (``portable``: as `Staging.download`'s)."""
    if not host.nbytes or buffer is None:     # nothing to copy (an empty device array has no buffer)
        if wait_for:
            cl.wait_for_events(wait_for)
        return
    if staging is None:
        cl.enqueue_copy(queue, host, buffer, wait_for=wait_for).wait()
    else:
        staging.download(buffer, host, wait_for=wait_for, portable=portable)


def to_device_array(queue, host: np.ndarray, staging: Staging | None) -> cla.Array:
    """``host`` as a new device array, through ``staging`` when there is one; the copy is
    complete on return, so kernels on any queue of the context may read it (a blocking
    write only promises that ``host`` may be reused: Intel's CPU runtime let a kernel on
    another queue read the buffer before the data were in it, found by the property tests)."""
    host = device_layout(host)
    if staging is None:
        out = cla.empty(queue, host.shape, host.dtype)
        if host.nbytes:
            cl.enqueue_copy(queue, out.data, host, is_blocking=True).wait()
        return out
    out = cla.empty(queue, host.shape, host.dtype)
    if host.nbytes:
        staging.upload(host, out.data)
    return out
