"""A one-call operator's values sent up while its points are planned (`PrefetchedValues`).

`clgrid.vis2dirty` builds an operator and calls it once: the set-up plans the points on
the device while the host waits, then the call sends the values up while the device
waits.  Given the call's values and weights when it is made (``prefetch``), the engine
sends them up on a queue of its own (`transfer_queue`) during the planning, into the
buffers the call gathers them from.  Only where the engine holds every sample of its rows
in one part: whether a share's values go by position (picked by the host,
`ImagingEngine._make_part`) is known only after the planning.  A device list's share
expected to pick its values (``whole=False``) sends nothing during the planning; where it
does pick them, in one part, it picks and sends them at the end of its set-up
(`_prefetch_picks`), while the list's other devices still plan theirs, instead of at the
start of the call.  (``dirty2vis``'s image, sent up the same way, gained nothing
measurable: docs/benchmarks/dask.md.)
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from types import SimpleNamespace

import numpy as np
import pyopencl as cl

from ..device.host_threads import in_background
from ..device.transfer import shared_staging, upload
from ..call_warnings import warn
from .stream import DEVICE_SHARE

__all__ = ["PrefetchedValues", "transfer_queue", "values_key"]

_queues: dict = {}
_lock = threading.Lock()


def transfer_queue(queue: cl.CommandQueue) -> cl.CommandQueue:
    """A second queue on ``queue``'s context and device, one per context, kept (with its
    pinned staging) for the process: copies on it overlap the first queue's kernels."""
    with _lock:
        key = (queue.context.int_ptr, queue.device.int_ptr)
        if key not in _queues:
            _queues[key] = cl.CommandQueue(queue.context, queue.device)
        return _queues[key]


def values_key(given: dict) -> tuple:
    """What identifies the caller's arrays (name -> array or None): their memory, shape,
    strides and dtype (a view of the same rows is the same values)."""
    def key(a):
        if a is None:
            return None
        a = np.asarray(a)
        return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype.str
    return tuple(sorted((name, key(a)) for name, a in given.items()))


class PrefetchedValues:
    """`ImagingEngine`'s values of its first `vis2dirty` sent up during its set-up (the module
    docstring): ``prefetch`` = {"vis": (nrow, nchan), "wgt": the same or None}."""

    def _prefetch_start(self, prefetch, whole: bool = True) -> None:
        """Start sending ``prefetch`` up into buffers of every sample, where the engine is one
        part with staging (a discrete device); else nothing.  ``whole`` False: nothing now,
        the values kept for `_prefetch_picks`."""
        self._prefetched, self._prefetch_later = None, None
        nsample = self.nrow * self.nchan
        if not prefetch or self.staging is None or self._stream is not None or self._max_planes is not None \
                or nsample > self._part_samples or not nsample:
            return
        if not whole:
            self._prefetch_later = dict(prefetch)
            return
        # the early buffers live beside the planning's scratch, which the engine's memory
        # model (set-up or call, the larger) does not count together: only where both fit
        extra = nsample * (np.dtype(self.complex).itemsize + np.dtype(self.real).itemsize)
        if self.device_bytes() + extra > self.facts.global_memory * DEVICE_SHARE:
            return
        ctx, mf = self.queue.context, cl.mem_flags
        # the given arrays held until the call takes them: their memory is the key, and an
        # array dropped and another made at its address must not match
        early = SimpleNamespace(key=values_key(prefetch), given=dict(prefetch),
                                vis=cl.Buffer(ctx, mf.READ_WRITE, nsample * np.dtype(self.complex).itemsize),
                                wgt=cl.Buffer(ctx, mf.READ_ONLY, nsample * np.dtype(self.real).itemsize))
        sends = [(np.asarray(prefetch["vis"], self.complex), early.vis)]
        if prefetch.get("wgt") is not None:
            sends.append((np.asarray(prefetch["wgt"], self.real), early.wgt))
        queue = transfer_queue(self.queue)
        staging = shared_staging(queue)

        def send():
            for host, buffer in sends:
                upload(queue, host.reshape(-1), buffer, staging)

        early.done = in_background(send)
        self._prefetched = early

    def _prefetch_settle(self, held: int):
        """After the parts are made: the early (vis, wgt) buffers where the one part holds
        every sample (``held`` of them, its values not picked), to hold the values; else
        None (early values dropped once their copy ended)."""
        early = self._prefetched
        if early is None:
            return None
        one_part = len(self._parts) == 1 and self._parts[0].index is None
        if one_part and held == self.nrow * self.nchan:
            return early.vis, early.wgt
        self._prefetch_end()
        return None

    def _prefetch_picks(self) -> None:
        """With ``whole=False`` given to `_prefetch_start`, where the engine is one part that
        picks its values: those of the prefetch picked and sent into the held buffers now
        (the end of the set-up), for the first call to take as it would take values sent
        during the planning; else nothing (the call sends them)."""
        given, self._prefetch_later = getattr(self, "_prefetch_later", None), None
        if given is None or len(self._parts) != 1 or self._parts[0].index is None:
            return
        try:
            self._upload_held(self._parts[0], given["vis"], given.get("wgt"))
        except Exception as failed:                 # (as a prefetch's failed copy: `_prefetch_end`)
            warn(f"clgrid: the values picked during the set-up could not be sent ({type(failed).__name__}: "
                 f"{failed}); a vis2dirty sends its values itself", RuntimeWarning, stacklevel=None)
            return
        done = Future()
        done.set_result(None)
        self._prefetched = SimpleNamespace(key=values_key(given), given=given, vis=self._vis_held,
                                           wgt=self._wgt_held, done=done)

    def _prefetch_taken(self, **given) -> bool:
        """Whether this call's inputs (name -> array) are the prefetched ones (then they are
        up, once waited for); the prefetch is used once, by the first call."""
        early = self._prefetch_end()
        return early is not None and early.key == values_key(given)

    def _prefetch_end(self):
        """The prefetch, once its copy ended, forgotten; or None.  Before anything else
        writes the buffers it writes.  A copy that failed is not this call's error (the
        call may not even take those values): a warning says so, None is returned, and a
        `vis2dirty` sends its values itself."""
        early, self._prefetched = getattr(self, "_prefetched", None), None
        if early is None:
            return None
        failed = early.done.exception()
        if failed is None:
            return early
        if not isinstance(failed, Exception):
            raise failed
        warn(f"clgrid: the values sent up during the set-up did not arrive ({type(failed).__name__}: {failed}); "
             f"a vis2dirty sends its values itself", RuntimeWarning, stacklevel=None)   # the caller's line
        return None
