"""Ordering planned visibilities on the device by a small integer key (a counting sort).

Strategies order a plan for their kernels' caches: the tiled gridder by w-plane
(seed 003 §3.6), the gather degridder by w-plane and cell tile (seed 001).  A
comparison sort is not needed for keys this small: count per key, scan the counts
(`clgrid.device.scan`), place each visibility at its key's next slot.  Two passes over the
plan, all on the device, no host round trip.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .codegen import build_program, launch, render, kernel as codegen_kernel
from .runtime import fill_zeros
from .scan import ExclusiveScan

__all__ = ["CountingSort"]


class CountingSort:
    """Sort (packed plan, sample index) pairs by ``key``, a C expression of the int4 ``p``
    with values in ``[0, num_keys)``."""

    def __init__(self, queue: cl.CommandQueue, key: str, num_keys: int):
        if not 0 < num_keys < 2 ** 31 - 1:
            raise ValueError(f"num_keys must be in [1, 2**31 - 1), got {num_keys}")
        self.queue = queue
        self.num_keys = int(num_keys)
        self._program = build_program(queue.context, render("counting_sort.cl", key=key, num_keys=self.num_keys))
        self._scan = ExclusiveScan.of(queue)

    def __call__(self, packed: cl.Buffer, source: cl.Buffer, n: int, wait_for=None, starts: cl.Buffer = None):
        """``(sorted_packed, sorted_source, events)``: new buffers in key order.  ``starts``,
        if given (``num_keys + 1`` ints), receives where each key's run begins (the last:
        ``n``)."""
        context = self.queue.context
        counts = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4 * (self.num_keys + 1))
        cursor = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4 * (self.num_keys + 1))
        sorted_packed = cl.Buffer(context, cl.mem_flags.READ_WRITE, 16 * max(n, 1))
        sorted_source = cl.Buffer(context, cl.mem_flags.READ_WRITE, 4 * max(n, 1))
        events = [fill_zeros(self.queue, counts, 4 * (self.num_keys + 1), np.int32, wait_for)]
        if starts is not None and not n:
            events.append(fill_zeros(self.queue, starts, 4 * (self.num_keys + 1), np.int32, wait_for))
        if n:
            count_keys, place = (codegen_kernel(self._program, name) for name in ("count_keys", "place"))
            events.append(launch(count_keys, self.queue, n, packed, np.int32(n), counts))
            events += self._scan(counts, cursor, self.num_keys + 1)
            if starts is not None:
                events.append(cl.enqueue_copy(self.queue, starts, cursor, byte_count=4 * (self.num_keys + 1)))
            events.append(launch(place, self.queue, n, packed, source, np.int32(n), cursor,
                                 sorted_packed, sorted_source))
        return sorted_packed, sorted_source, events
