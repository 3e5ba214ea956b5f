"""The warnings of a call: said at once, or gathered for the call on this thread, without
the process's warning state.

A call that runs several operators says their warnings once for the whole call: a
device list (`clgrid.imaging.wgridding.WGridder`) its engines', run on host threads, a
device's "nothing to image" only where every device said it; facets
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
"""

from __future__ import annotations

import contextlib
import threading
import warnings

from .errors import EmptyInputWarning

__all__ = ["warn", "gathering", "say_gathered", "said_once"]

_here = threading.local()          # .sink: the list this thread gathers into, or None


def warn(message: str, category=UserWarning, stacklevel: int = 1) -> None:
    """Say a warning of clgrid's: `warnings.warn` (``stacklevel`` counted from the caller
    of `warn`), unless this thread is `gathering`: then ``(message, category)`` goes into
    its list (the filters are applied when it is said)."""
    sink = getattr(_here, "sink", None)
    if sink is not None:
        sink.append((str(message), category))
        return
    warnings.warn(message, category, stacklevel=stacklevel + 1)


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


class said_once:
    """``with said_once(...):`` the `warn` calls on this thread gathered while inside, then
    said when it ends (on error too, before the error goes on), each (message, category)
    once, in the order first said: one call's warnings for operators run one after
    another (facets), or some left for the caller to say for a whole set.

    Parameters
    ----------
    stacklevel : int
        Where they are said, as `warnings.warn`'s: 1 is the line of the ``with``, 2 the
        call of the function that holds it, ...
    leaving_out : callable, optional
        ``leaving_out(message, category)`` true for a warning not to say (its caller says
        it, or it is no news there).
    """

    def __init__(self, stacklevel: int = 1, leaving_out=None):
        self.stacklevel = int(stacklevel)
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
        say_gathered([kept], stacklevel=self.stacklevel + 1)      # counted from the with's frame
        return False
