"""Every pyopencl Buffer made while a `BufferTracker` is installed: the live bytes, their
peak and, where asked, the clgrid line that made each (for the memory benchmarks and
tests: on a CPU device the buffers are host memory)."""

from __future__ import annotations

import collections
import threading
import traceback
import weakref

import numpy as np
import pyopencl as cl

__all__ = ["BufferTracker"]


class BufferTracker:
    """Counts the bytes of every device ``pyopencl.Buffer`` made after `install`
    (pyopencl.array's too: the class is replaced in pyopencl's namespace), until each is
    released or collected.  Buffers made with ``ALLOC_HOST_PTR`` (pinned host memory: the
    transfers' staging, `clgrid.device.transfer`) are host memory and counted apart, in
    ``host_bytes``.  Buffers may be made and collected on several threads (a streaming
    engine plans on one of its own): the count is kept under a lock, as a running total.

    Parameters
    ----------
    sites : bool
        Also record which clgrid line made each buffer (`at_peak`: bytes by line at the
        peak); costs a stack walk per buffer.

    Attributes
    ----------
    peak : int
        The most device bytes live at once since `install` or the last `reset`.
    host_bytes : int
        The bytes of the pinned host buffers made since `install` (not in ``peak``).
    at_peak : collections.Counter
        With ``sites``: the live bytes by the clgrid line that made them, at the peak.
    """

    def __init__(self, sites: bool = False):
        self.sites = sites
        self.live: dict = {}
        self.peak = 0
        self.host_bytes = 0
        self.at_peak = collections.Counter()
        self._total = 0
        self._lock = threading.RLock()      # re-entrant: a collection may run inside `_made`

    @property
    def now(self) -> int:
        """The bytes live now."""
        return self._total

    def reset(self) -> None:
        """Start a new peak from the bytes live now."""
        with self._lock:
            self.peak = self._total

    def install(self, monkeypatch=None) -> "BufferTracker":
        """Replace ``pyopencl.Buffer`` by a counting subclass (through pytest's
        ``monkeypatch`` where given, so that a test undoes it); returns self."""
        original, tracker = cl.Buffer, self

        class Tracked(original):
            def __init__(self, context, flags, size=0, hostbuf=None):
                if hostbuf is None:
                    super().__init__(context, flags, size)
                else:
                    super().__init__(context, flags, size, hostbuf)
                    size = size or np.asarray(hostbuf).nbytes
                if flags & cl.mem_flags.ALLOC_HOST_PTR:
                    tracker.host_bytes += int(size)      # pinned host memory, not the device's
                    return
                tracker._made(id(self), int(size))
                weakref.finalize(self, tracker._gone, id(self))

            def release(self):
                tracker._gone(id(self))
                super().release()

        if monkeypatch is not None:
            monkeypatch.setattr(cl, "Buffer", Tracked)
        else:
            cl.Buffer = Tracked
        return self

    def _made(self, key: int, size: int) -> None:
        site = _clgrid_site() if self.sites else None
        with self._lock:
            self._gone(key)           # (an id of a buffer collected unseen, used again)
            self.live[key] = (site, size)
            self._total += size
            if self._total > self.peak:
                self.peak = self._total
                if self.sites:
                    self.at_peak = collections.Counter()
                    for name, s in list(self.live.values()):
                        self.at_peak[name] += s

    def _gone(self, key: int) -> None:
        with self._lock:
            _, size = self.live.pop(key, (None, 0))
            self._total -= size


def _clgrid_site() -> str:
    """``module:line`` of the innermost clgrid frame (outside the tooling) on the stack."""
    frames = [f for f in traceback.extract_stack()[:-1] if "clgrid" in f.filename
              and "benchmarks" not in f.filename and "tools/buffers" not in f.filename]
    return f"{frames[-1].filename.split('clgrid/')[-1]}:{frames[-1].lineno}" if frames else "?"
