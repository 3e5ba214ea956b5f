"""Exclusive prefix sum of int32 on the device, for turning counts into offsets.

The tiled gridder's bucket sort needs the start of every tile's bucket from the
per-tile counts, on the device, between two kernels.  pyopencl has a scan, but it
owns its kernels and events; this one is two small kernels (``clgrid/cl_kernels/scan.cl``)
whose events the caller can time like any other stage.  Blocks of ``wg * items``
values are scanned in local memory; their totals are scanned the same way
(recursively) and added back.
"""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl

from .codegen import build_program, launch, render, kernel as codegen_kernel

__all__ = ["ExclusiveScan"]


class ExclusiveScan:
    """``prefix[i] = sum(values[:i])`` for int32 buffers; scratch kept between calls."""

    _shared: dict = {}

    @classmethod
    def of(cls, queue: cl.CommandQueue) -> "ExclusiveScan":
        """The default scan of ``queue`` for the calling thread (its scratch is not shared
        between threads), made once: set-ups that scan every time need not build one."""
        key = (queue.int_ptr, threading.get_ident())
        found = cls._shared.get(key)
        if found is None or found.queue is not queue:
            found = cls._shared[key] = cls(queue)
        return found

    def __init__(self, queue: cl.CommandQueue, wg: int = 256, items: int = 4):
        self.queue = queue
        self.wg = int(min(wg, queue.device.max_work_group_size))
        self.items = int(items)
        self._program = build_program(queue.context, render("scan.cl", wg=self.wg, items=self.items))
        self._scratch: dict = {}

    @property
    def block(self) -> int:
        return self.wg * self.items

    def _buffer(self, level: int, n: int) -> cl.Buffer:
        key = (level, n)
        if key not in self._scratch:
            self._scratch[key] = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, 4 * max(n, 1))
        return self._scratch[key]

    def __call__(self, values: cl.Buffer, prefix: cl.Buffer, n: int, wait_for=None, level: int = 0) -> list:
        """Enqueue the scan of the first ``n`` ints of ``values`` into ``prefix``; returns the events."""
        blocks = -(-n // self.block)
        totals = self._buffer(2 * level, blocks)
        scan_blocks = codegen_kernel(self._program, "scan_blocks")
        events = [scan_blocks(self.queue, (blocks * self.wg,), (self.wg,), values, prefix, totals,
                              np.int32(n), wait_for=wait_for)]
        if blocks > 1:
            offsets = self._buffer(2 * level + 1, blocks)
            events += self(totals, offsets, blocks, level=level + 1)
            add_block_offsets = codegen_kernel(self._program, "add_block_offsets")
            events.append(add_block_offsets(self.queue, (blocks * self.block,), None, prefix, offsets,
                                            np.int32(n)))
        return events

    def every_nth(self, values: cl.Buffer, step: int, count: int, host: np.ndarray) -> cl.Event:
        """Enqueue the copy of ``values[k * step]`` for k in [0, count) into ``host`` (int32,
        ``count`` entries) without waiting: the event says when it is there."""
        out = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, 4 * max(count, 1))
        launch(codegen_kernel(self._program, "every_nth"), self.queue, count, values, np.int32(step),
               np.int32(count), out)
        return cl.enqueue_copy(self.queue, host[:count], out, is_blocking=False)
