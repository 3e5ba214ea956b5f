"""Computing a clgrid.dask graph so that a call that cannot make progress ends with an
error instead of waiting for ever.

On a distributed cluster Dask itself never gives up on a graph whose tasks cannot run:
a worker whose process memory stays above ``distributed.worker.memory.pause`` (80% of
its ``memory_limit``) is paused and starts nothing (a PoCL worker's own programs and
buffers can keep it there, with no data to spill), and tasks that lose every worker at
once wait in the scheduler's "no-worker" state.  `compute` submits the graph and
watches the cluster while it runs (`client.processing` and the workers' status, once
a second): the call is healthy while some running (not paused) worker has a task to
work on.  When it has been unhealthy for ``stall_timeout`` seconds in a row it cancels
the graph and raises `ClusterStalledError`, saying what it saw: paused workers with
their memory, workers gone or restarted (the nanny restarts one above
``distributed.worker.memory.terminate``, 95%), tasks no worker holds.  A task that
runs long on a healthy worker is never a stall.  Without a distributed client (dask's
local schedulers) there is nothing to watch and `compute` is `dask.compute`.
"""

from __future__ import annotations

import math
import threading
import time

try:
    import dask
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

from ..errors import ClusterStalledError
from .chunks import client as current_client, send_now, worker_identities

__all__ = ["compute", "STALL_TIMEOUT", "POLL_SECONDS"]

STALL_TIMEOUT = 120.0     # seconds without a task any running worker can work on
POLL_SECONDS = 1.0


def stall_seconds(stall_timeout) -> float:
    """``stall_timeout`` checked: None (the default, `STALL_TIMEOUT`), a number of seconds
    > 0, or ``math.inf`` (never give up)."""
    if stall_timeout is None:
        return STALL_TIMEOUT
    if isinstance(stall_timeout, bool) or not isinstance(stall_timeout, (int, float)) or not stall_timeout > 0:
        raise ValueError(f"stall_timeout must be a number of seconds > 0 (math.inf: wait for ever) or None "
                         f"(the default, {STALL_TIMEOUT:g} s), got {stall_timeout!r}")
    return float(stall_timeout)


def compute(*collections, stall_timeout=None) -> tuple:
    """``dask.compute(*collections)`` (Dask collections or `dask.delayed` objects; a tuple
    of their results), watched on a distributed cluster: `ClusterStalledError` after
    ``stall_timeout`` seconds (None: `STALL_TIMEOUT`) during which no running worker had
    a task to work on (module docstring).  Lazy results of `clgrid.dask.degrid` and
    `clgrid.dask.dirty2vis` can be computed through it (`clgrid.dask.compute`)."""
    seconds = stall_seconds(stall_timeout)
    client = current_client()               # (None where dask.config.set(scheduler=...) chose a local one)
    if client is None or math.isinf(seconds):
        return dask.compute(*collections)

    from distributed import KilledWorker

    futures = client.compute(list(collections))
    send_now(client)
    watch = _Watch(client, seconds)
    try:
        done = _all_done(futures)
        while not done.wait(POLL_SECONDS) and not all(f.done() for f in futures):
            watch.check()
        return tuple(client.gather(futures))
    except KilledWorker as error:
        error.add_note("clgrid.dask: the workers running this task died; where the nanny killed them for memory "
                       "(distributed.worker.memory.terminate, its log says so), give them more memory_limit or cut "
                       "the data into smaller chunks (row_chunks, slab_samples)")
        client.cancel(futures)
        raise
    except BaseException:
        client.cancel(futures)
        raise


def _all_done(futures: list) -> threading.Event:
    """An event set, by the futures' done callbacks, once every one of ``futures`` is done
    (finished, failed or cancelled), for `compute` to wait on a second at a time without
    an exception: ``distributed.wait(timeout=)`` raises TimeoutError, which distributed's
    ``sync`` holds in a reference cycle with the frames it went through, so the caller's
    frame and every array in it (a result whose box `clgrid.dask.delivery` pools) would
    outlive the caller until the garbage collector runs (docs/design/architecture.md)."""
    done, lock, left = threading.Event(), threading.Lock(), [len(futures)]

    def finished(_) -> None:
        with lock:
            left[0] -= 1
            if left[0] <= 0:
                done.set()

    if not futures:
        done.set()
    for future in futures:
        future.add_done_callback(finished)
    return done


class _Watch:
    """What the cluster does while a graph runs: when some running worker last had a task
    (`check` raises once that is ``seconds`` ago), and the workers seen, to count those
    that left (a worker the nanny restarts comes back under a new address)."""

    def __init__(self, client, seconds: float):
        self.client, self.seconds = client, seconds
        self.healthy = time.monotonic()
        self.seen: set = set(worker_identities(client))
        self.left: set = set()

    def check(self) -> None:
        workers = worker_identities(self.client)
        processing = self.client.processing()
        self.left |= self.seen - set(workers)
        self.seen |= set(workers)
        now = time.monotonic()
        if any(processing.get(address) and info.get("status") == "running" for address, info in workers.items()):
            self.healthy = now
        elif now - self.healthy > self.seconds:
            raise ClusterStalledError(self.describe(workers, processing))

    def describe(self, workers: dict, processing: dict) -> str:
        seen = []
        paused = [f"{address} ({_mib(info['metrics'].get('memory'))} of its {_mib(info.get('memory_limit'))} "
                  f"memory_limit)" for address, info in sorted(workers.items()) if info.get("status") == "paused"]
        if paused:
            seen.append(f"{len(paused)} of {len(workers)} worker(s) paused for memory: " + ", ".join(paused)
                        + " (Dask pauses a worker whose process memory is above distributed.worker.memory.pause, "
                          "0.8 of memory_limit by default; what is not Dask's data, such as the device runtime's "
                          "and the operators' memory, cannot be spilled)")
        if self.left:
            seen.append(f"{len(self.left)} worker(s) left during the call (killed or restarted: the nanny "
                        f"restarts a worker above distributed.worker.memory.terminate, 0.95 of memory_limit by "
                        f"default)")
        if not workers:
            seen.append("the cluster has no workers")
        elif not paused and not any(processing.values()):
            seen.append("no worker holds a task of the call (tasks may wait for workers that left)")
        return (f"clgrid.dask: no progress possible for {self.seconds:g} s: no running worker had a task to work "
                f"on. Seen: {'; '.join(seen) or 'nothing running'}. Give the workers more memory (memory_limit), "
                f"cut the data into smaller chunks (row_chunks, slab_samples) or image fewer pixels per task; "
                f"stall_timeout (seconds, math.inf to wait for ever) sets how long to wait")


def _mib(nbytes) -> str:
    return "?" if not nbytes else f"{nbytes / 2 ** 20:.0f} MiB"
