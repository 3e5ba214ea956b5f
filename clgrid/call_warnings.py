"""The warnings of a call: said at once, or gathered for the call on this thread, without
the process's warning state.

A call that runs several operators says their warnings once for the whole call: a
device list (`clgrid.imaging.wgridding.WGridder`) its engines', set up and run on host
threads, a device's "nothing to image" only where every device said it; facets
(`clgrid.imaging.facets.FacetedImager`) their operators', one after another; a Dask task
(`clgrid.dask`) records its operator's for the client, or leaves out those the client
says for the whole set.  `warnings.catch_warnings` would gather them by swapping the
process's filters and ``showwarning`` for the call's time, which is not thread-safe: two
calls at once from two threads (two operators, two tasks on one Dask worker) could each
take, lose or restore the other's warnings, or leave the process's state swapped for
good.  So clgrid says the warnings of its calls through `warn`, which puts them in the
list the calling thread is `gathering` into, if any; `say_gathered` (or `said_once`)
then says them for the call.  Only the thread that called `gathering` gathers: a warning
said on another thread, or by other code through `warnings.warn` (numpy, pyopencl), goes
its usual way.

Where a warning is said, ``stacklevel`` as `warnings.warn`'s names the line it points
at; ``stacklevel=None`` names the first frame outside clgrid (`caller_level`): the
caller's own line, however many of the library's calls lie between (a warning of the
engine said from a call of `clgrid.vis2dirty`, of `WGridder.vis2dirty`, or of its set-up,
each at its own depth).  clgrid's operators say theirs so (tests/test_warning_lines.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings

from .errors import EmptyInputWarning

__all__ = ["warn", "caller_level", "gathering", "say_gathered", "said_once"]

_here = threading.local()          # .sink: the list this thread gathers into, or None
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep       # clgrid/


def caller_level() -> int:
    """The ``stacklevel`` of a `warnings.warn` called where `caller_level` is called that
    names the first frame outside clgrid's package: the line of the code that called
    into clgrid.  (Python 3.12's ``skip_file_prefixes`` does the same; clgrid runs on
    3.10 too.)"""
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def warn(message: str, category=UserWarning, stacklevel: int | None = 1) -> None:
    """Say a warning of clgrid's: `warnings.warn` (``stacklevel`` counted from the caller
    of `warn`; None: at the first frame outside clgrid, `caller_level`), unless this
    thread is `gathering`: then ``(message, category)`` goes into its list (the filters
    are applied when it is said)."""
    sink = getattr(_here, "sink", None)
    if sink is not None:
        sink.append((str(message), category))
        return
    warnings.warn(message, category, stacklevel=caller_level() if stacklevel is None else stacklevel + 1)


@contextlib.contextmanager
def gathering(sink: list):
    """`warn` calls on this thread go into ``sink`` (a list of (message, category) pairs,
    appended to) while inside; the list this thread gathered into before is restored
    after, on error too.  A sink nobody says is a call's warnings dropped."""
    before = getattr(_here, "sink", None)
    _here.sink = sink
    try:
        yield sink
    finally:
        _here.sink = before


def say_gathered(sinks: list, stacklevel: int | None = 1) -> None:
    """Say the warnings ``sinks`` (one list per device of a call) gathered, each message
    once; an `EmptyInputWarning` only where every device said one (else the others' shares
    are in the result).  Through `warn`: into an enclosing gathering where there is one.
    ``stacklevel`` as `warnings.warn`'s, counted from the caller (None: the first frame
    outside clgrid)."""
    said: dict = {}
    for sink in sinks:
        for message, category in sink:
            said.setdefault((message, category), None)
    empty = sum(any(issubclass(category, EmptyInputWarning) for _, category in sink) for sink in sinks)
    for message, category in said:
        if issubclass(category, EmptyInputWarning) and empty < len(sinks):
            continue
        warn(message, category, stacklevel=None if stacklevel is None else stacklevel + 1)


class said_once:
    """``with said_once(...):`` the `warn` calls on this thread gathered while inside, then
    said when it ends (on error too, before the error goes on), each (message, category)
    once, in the order first said: one call's warnings for operators run one after
    another (facets), or some left for the caller to say for a whole set.

    Parameters
    ----------
    stacklevel : int or None
        Where they are said, as `warnings.warn`'s: 1 is the line of the ``with``, 2 the
        call of the function that holds it, ...; None: the first frame outside clgrid
        (`caller_level`).
    leaving_out : callable, optional
        ``leaving_out(message, category)`` true for a warning not to say (its caller says
        it, or it is no news there).
    """

    def __init__(self, stacklevel: int | None = 1, leaving_out=None):
        self.stacklevel = None if stacklevel is None else int(stacklevel)
        self.leaving_out = leaving_out
        self.sink: list = []
        self._gathering = None

    def __enter__(self) -> list:
        self._gathering = gathering(self.sink)
        return self._gathering.__enter__()

    def __exit__(self, *exc) -> bool:
        self._gathering.__exit__(*exc)
        kept = [(message, category) for message, category in self.sink
                if self.leaving_out is None or not self.leaving_out(message, category)]
        level = None if self.stacklevel is None else self.stacklevel + 1      # counted from the with's frame
        say_gathered([kept], stacklevel=level)
        return False
