"""The warnings of an engine's call: said at once, or gathered for the device list that
runs it, without the process's warning state.

A device list (`clgrid.imaging.wgridding.WGridder`) runs its engines on host threads and
says their warnings once for the whole call, a device's "nothing to image" only where
every device said it.  `warnings.catch_warnings` would gather them by swapping the
process's filters and ``showwarning`` for the call's time, which is not thread-safe: two
operators called at once from two threads could each take, lose or restore the other's
warnings.  So an engine says its call's warnings through `warn`, which puts them in the
list its thread is `gathering` into, if any; `say_gathered` then says them for the call.
Warnings of other code (a kernel build's fallback, ...) go their usual way.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

from ..errors import EmptyInputWarning

__all__ = ["warn", "gathering", "say_gathered"]

_here = threading.local()          # .sink: the list this thread gathers into, or None


def warn(message: str, category=UserWarning, stacklevel: int = 1) -> None:
    """`warnings.warn` (``stacklevel`` counted from the caller of `warn`), unless this thread
    is `gathering`: then (message, category) goes into its list."""
    sink = getattr(_here, "sink", None)
    if sink is not None:
        sink.append((str(message), category))
        return
    warnings.warn(message, category, stacklevel=stacklevel + 1)


@contextlib.contextmanager
def gathering(sink: list):
    """`warn` calls on this thread go into ``sink`` (a list) while inside; the list this
    thread gathered into before is restored after."""
    before = getattr(_here, "sink", None)
    _here.sink = sink
    try:
        yield sink
    finally:
        _here.sink = before


def say_gathered(sinks: list, stacklevel: int = 1) -> None:
    """Say the warnings ``sinks`` (one list per device of a call) gathered, each message
    once; an `EmptyInputWarning` only where every device said one (else the others' shares
    are in the result).  Through `warn`: into an enclosing gathering where there is one.
    ``stacklevel`` as `warnings.warn`'s, counted from the caller."""
    said: dict = {}
    for sink in sinks:
        for message, category in sink:
            said.setdefault((message, category), None)
    empty = sum(any(issubclass(category, EmptyInputWarning) for _, category in sink) for sink in sinks)
    for message, category in said:
        if issubclass(category, EmptyInputWarning) and empty < len(sinks):
            continue
        warn(message, category, stacklevel=stacklevel + 1)
