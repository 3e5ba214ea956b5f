"""Large arrays passed between the tasks of one `clgrid.dask.vis2dirty` or `dirty2vis`
call through the host's shared memory, where every worker and the client are on one host (a
`LocalCluster`, the workers of a many-GPU node beside their client).

Dask moves a task's result to another worker through a socket: the result pickled,
sent, received into fresh memory.  For the planes split that is, in every call, each
chunk's values for the slabs imaged on other workers and each imaging task's partial
image for the facets summed on other workers (on two GPU workers, most of what a call
did besides imaging: docs/benchmarks/dask.md).  Here the producing task writes its array
once into a file in ``/dev/shm`` (`write_into`: its space reserved first with
``posix_fallocate``, so a write into the mapping cannot fail) and returns a `Shared`,
a few bytes naming the file's region; the consuming task maps that region (`read`): one
copy instead of three, and no pickling.  Several producers may fill one file at their
own regions (each chunk its values' place in its slab's file), so the consumer maps one
array without joining them.

The files and the mappings are kept: making a file's pages (``posix_fallocate``) and
mapping them cost several times the copy itself (docs/benchmarks/dask.md, "The floor
of a Dask call"), so a major cycle's calls on the same points reuse one set of files.
They are named under a `prefix` that the client makes from the points' token
(`clgrid.dask.wgridding`'s) and keeps for the last ``KEPT_PREFIXES`` sets of points;
the client removes a set's files when it drops it (`forget`, `clgrid.dask.clear_cache`,
the client's exit), and each worker keeps its mappings (`_region`) until their file is
gone or replaced (checked when it maps another), so their memory goes then.  Two calls
on the same points at once would share the files: the client runs them one after the
other (`using`), and after a `vis2dirty` call that failed, whose tasks may still be
running and writing its files (Dask does not stop them), the next takes new ones
(`using`'s ``renew``).  A producer that cannot make its file (``/dev/shm`` full,
absent) returns its array instead, and the consumers take either.  `prefix` is None (nothing
shared) unless the client and every worker share the host (the same boot of the same
machine, asked once per set of workers).

`dirty2vis` returns a lazy array, computed after the call: its image is written once
by the client (`publishing`: while the call's tasks are sent, under a lock that they
wait for; its threads also count its NaN and inf pixels as they copy them, a bad image
refused before it is stamped) and each slab's prediction for its
chunks by the slab's task (straight into `stamped_room`, then `stamped_shares`), both
behind a stamp that the readers check before and after reading, and where reading fails
(`taken`, `reading`), so a prediction computed after a later call on the same points
rewrote the files refuses instead of reading the other call's arrays, or failing on
them with an error that is not its own.  A slab's file is written by one task at a time (a lock on the file,
held from the stamp's clearing to the new stamp) and each write gets a stamp of its own:
the same prediction computed twice at once (a lazy result computed from two threads, a
task run again) is read from one write or refused, never mixed from two.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import hashlib
import itertools
import mmap
import os
import socket
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

try:
    import fcntl
except ImportError:                  # (not POSIX: no shared memory either, `prefix` is None)
    fcntl = None

from ..device import registered
from ..device.host_threads import in_slices, not_finite, parallel_copy

__all__ = ["Shared", "Published", "publish", "publishing", "taken", "prefix", "using", "forget", "release", "region_of", "place",
           "write_into", "room_of", "stamped_room", "stamped_shares", "reading", "read", "readable", "remove",
           "at_exit", "host_identity", "copy_threads"]

SHARED_MEMORY = "/dev/shm"
KEPT_PREFIXES = 8            # sets of points whose files the client keeps
KEPT_MAPS = 256              # mappings each process keeps
THREADED_BYTES = 4 << 20     # passes over fewer bytes run on one thread
REGISTERED_BYTES = 64 << 20  # mappings this large are registered with the devices (`clgrid.device.registered`)
_hosts: dict = {}            # on the client: (client id, worker addresses) -> all on this host
_prefixes: OrderedDict = OrderedDict()     # on the client: kept prefix -> its `_Kept`
_maps: OrderedDict = OrderedDict()         # in any process: (path, offset, bytes, writable) -> (array, inode)
_generations = itertools.count()           # on the client: the generations of kept files, never one twice
_lock = threading.Lock()


@dataclass
class _Kept:
    """On the client, a kept set of points: the lock its calls take (`using`) and the
    generation of its files (a number no other generation had in this process, so a set
    of points dropped and kept again never names the files of a call before; renewed
    after a call that failed)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    generation: int = field(default_factory=lambda: next(_generations))


@dataclass(frozen=True)
class Shared:
    """``count`` elements of ``dtype`` at element ``offset`` of the file ``path``, shaped
    ``shape`` (None: 1-D): what a task returns in place of an array it wrote there."""

    path: str
    offset: int
    count: int
    dtype: str
    shape: tuple | None = None
    stamp: bytes | None = None       # where the writer stamped the file (`stamped_shares`)


def host_identity() -> tuple:
    """(host name, boot id, whether shared memory is there): equal in two processes on the
    same boot of the same host."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = None
    return socket.gethostname(), boot, os.path.isdir(SHARED_MEMORY) and hasattr(os, "posix_fallocate")


def prefix(client, workers: list | None, token: str) -> str | None:
    """The path prefix in shared memory of the files for the points ``token`` (kept, with
    the last ``KEPT_PREFIXES`` others; the oldest's files removed), or None where some
    worker (or the client) is elsewhere, or there is no shared memory."""
    if client is None or not workers:
        return None
    key = (client.id, tuple(workers))
    with _lock:
        together = _hosts.get(key)
    if together is None:
        here = host_identity()
        try:
            theirs = client.run(host_identity, workers=list(workers))
        except Exception:                      # a worker gone: ask again next call
            return None
        together = bool(here[2]) and here[1] is not None and all(tuple(t) == here for t in theirs.values())
        with _lock:
            _hosts[key] = together
            while len(_hosts) > 16:
                _hosts.pop(next(iter(_hosts)))
    if not together:
        return None
    name = hashlib.sha1(f"{client.id}|{token}".encode()).hexdigest()[:24]
    path = os.path.join(SHARED_MEMORY, f"clgrid-x-{os.getpid()}-{name}")
    with _lock:
        if path not in _prefixes:
            _prefixes[path] = _Kept()
        _prefixes.move_to_end(path)
        dropped = [_prefixes.popitem(last=False)[0] for _ in range(max(0, len(_prefixes) - KEPT_PREFIXES))]
    for old in dropped:
        remove(old)
    return path


@contextlib.contextmanager
def using(call_prefix: str | None, renew: bool = False):
    """On the client: ``with using(call_prefix, renew) as files``: one call on the points
    of ``call_prefix``, whose files are named under ``files`` (`place`); calls on the same
    points wait for each other.  ``files`` (None without a prefix) is the current
    generation of the prefix's files: every call gets the same, unless one before it
    failed with ``renew`` (an exception out of its block: its generation's files are then
    removed, and the next call gets the next generation, which no task of the failed
    call, still running, can name).  Every generation's files go with the prefix
    (`remove`)."""
    if call_prefix is None:
        yield None
        return
    with _lock:
        kept = _prefixes.get(call_prefix)
        if kept is None:
            kept = _prefixes[call_prefix] = _Kept()
    with kept.lock:
        files = f"{call_prefix}-g{kept.generation}"
        try:
            yield files
        except BaseException:
            if renew:
                kept.generation = next(_generations)
                remove(files)
            raise


def forget() -> None:
    """On the client: remove the files of every kept set of points."""
    with _lock:
        paths = list(_prefixes)
        _prefixes.clear()
    for path in paths:
        remove(path)


def place(call_prefix: str | None, name: str) -> str | None:
    """The path of one file of the call (None without a prefix)."""
    return None if call_prefix is None else f"{call_prefix}-{name}"


def region_of(path: str, offset_bytes: int, nbytes: int) -> np.ndarray:
    """``nbytes`` at ``offset_bytes`` of the existing file ``path``, writable, as a uint8
    array over a mapping this process keeps (`clgrid.dask.delivery`'s boxes)."""
    return _region(path, offset_bytes, nbytes, True, make=False)


def release() -> None:
    """Drop this process's kept mappings."""
    with _lock:
        for array, _ in _maps.values():
            registered.forget(array)
        _maps.clear()


def _region(path: str, offset_bytes: int, nbytes: int, writable: bool, make: bool = True) -> np.ndarray:
    """``nbytes`` at ``offset_bytes`` of the file ``path`` as a uint8 array over a mapping
    this process keeps (made, and the file and its region made first where ``writable``
    and ``make``, on first use or when the file was replaced or removed)."""
    make = make and writable
    key = (path, offset_bytes, nbytes, writable)
    try:
        found = os.stat(path)
    except FileNotFoundError:
        if not make:
            raise
        found = None
    with _lock:
        kept = _maps.get(key)
        if kept is not None and found is not None and kept[1] == (found.st_dev, found.st_ino):
            _maps.move_to_end(key)
            return kept[0]
        for other in [k for k, (_, ino) in _maps.items() if _gone(k[0], ino)]:
            registered.forget(_maps.pop(other)[0])
    granularity = mmap.ALLOCATIONGRANULARITY
    start = offset_bytes - offset_bytes % granularity
    fd = os.open(path, (os.O_RDWR | (os.O_CREAT if make else 0)) if writable else os.O_RDONLY, 0o600)
    try:
        if make:
            os.posix_fallocate(fd, offset_bytes, nbytes)
        stat = os.fstat(fd)
        m = mmap.mmap(fd, offset_bytes - start + nbytes, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                      prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0), offset=start)
    finally:
        os.close(fd)
    array = np.frombuffer(m, np.uint8, nbytes, offset_bytes - start)
    if writable and nbytes >= REGISTERED_BYTES:      # (a device may copy to and from it at the bus's speed)
        registered.register(array)
    with _lock:
        replaced = _maps.get(key)
        _maps[key] = (array, (stat.st_dev, stat.st_ino))
        if replaced is not None:
            registered.forget(replaced[0])
        while len(_maps) > KEPT_MAPS:
            registered.forget(_maps.popitem(last=False)[1][0])
    return array


def _gone(path: str, ino: tuple) -> bool:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return True
    return (found.st_dev, found.st_ino) != ino


def write_into(path: str | None, offset: int, shape: tuple, dtype, fill):
    """An array of ``shape`` and ``dtype`` that ``fill(out)`` writes, made at element
    ``offset`` of the file ``path``: its `Shared`; without ``path``, or where the file
    cannot be made, the array itself."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    if path is not None and count:
        try:
            room = _region(path, offset * dtype.itemsize, count * dtype.itemsize, True)
        except (OSError, ValueError):
            room = None
        if room is not None:
            fill(room.view(dtype).reshape(shape))
            return Shared(path, int(offset), count, dtype.str, tuple(int(n) for n in shape))
    out = np.empty(shape, dtype)
    fill(out)
    return out


def room_of(path: str | None, shape: tuple, dtype) -> np.ndarray | None:
    """The file ``path`` (made where it is not) as a writable array of ``shape`` and
    ``dtype`` over a kept mapping, for a task to write its result straight into; None
    without ``path``, or where the file cannot be made."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    if path is None or count == 0:
        return None
    try:
        return _region(path, 0, count * dtype.itemsize, True).view(dtype).reshape(shape)
    except (OSError, ValueError):
        return None


def copy_threads(nbytes: int, threads: int) -> int:
    """Host threads for a pass over ``nbytes``: one below ``THREADED_BYTES`` (starting
    threads costs more than a small copy), else ``threads``, at most the cores."""
    return 1 if nbytes < THREADED_BYTES else max(1, min(int(threads), os.cpu_count() or 1))


def _copy(out: np.ndarray, array: np.ndarray, threads: int) -> None:
    flat_out, flat_in = out.reshape(-1), np.ascontiguousarray(array).reshape(-1)
    parallel_copy(flat_out, flat_in, copy_threads(flat_out.nbytes, threads))


def read(shared) -> np.ndarray:
    """A `Shared` region as a read-only array (over a kept mapping, no copy); anything else
    as it is."""
    if not isinstance(shared, Shared):
        return shared
    dtype = np.dtype(shared.dtype)
    if shared.count == 0:
        return np.empty(shared.shape or (0,), dtype)
    room = _read_region(shared.path, shared.offset * dtype.itemsize, shared.count * dtype.itemsize)
    return room.view(dtype).reshape(shared.shape or (shared.count,))


def _read_region(path: str, offset_bytes: int, nbytes: int) -> np.ndarray:
    """``nbytes`` at ``offset_bytes`` of the existing file ``path`` as a read-only uint8
    view of a kept mapping; one of `REGISTERED_BYTES` or more is mapped writable, so that
    it is registered with the devices (`clgrid.device.registered`: a read-only mapping is
    not pinned by NVIDIA's driver)."""
    view = _region(path, offset_bytes, nbytes, nbytes >= REGISTERED_BYTES, make=False)[:]
    view.flags.writeable = False
    return view


def readable(parts: list) -> np.ndarray | None:
    """Consecutive `Shared` regions of one file (each chunk's values for one slab task, in
    order) as one array, mapped once; None where they are not that."""
    parts = [p for p in parts if isinstance(p, Shared) or np.size(p)]      # a chunk that gives nothing
    if not parts or not all(isinstance(p, Shared) for p in parts):
        return None
    if any(p.path != parts[0].path or p.dtype != parts[0].dtype for p in parts):
        return None
    if any(b.offset != a.offset + a.count for a, b in zip(parts, parts[1:])):
        return None
    total = sum(p.count for p in parts)
    return read(Shared(parts[0].path, parts[0].offset, total, parts[0].dtype))


@dataclass(frozen=True)
class Published:
    """An array the client wrote once into the file ``path`` for every task of a call to
    read (`dirty2vis`'s image), under the stamp ``stamp``: a later call on the same points
    writes the same file with another stamp, and a task that finds another stamp, before
    or after it reads, refuses to go on (`taken`) instead of reading another call's array."""

    path: str
    stamp: bytes
    shape: tuple
    dtype: str


STAMP = 16                   # bytes of the stamp at the head of a published file


# bytes `publish` copies and checks at once, in cache (0: each thread's share copied, then
# counted).  0 by default: in blocks, each thread's many small numpy calls queue for the GIL
# on many threads (docs/benchmarks/dask.md, d2v-38)
CHECK_BLOCK = 0


def publish(call_prefix: str | None, name: str, array: np.ndarray, threads: int = 1,
            refuse: str | None = None) -> Published | None:
    """On the client: ``array`` written into the kept file ``name`` of ``call_prefix``
    behind a fresh stamp (cleared while it is written); None without a prefix or where the
    file cannot be made.  With ``refuse`` (a message), the array's NaN and infinite
    entries are counted by the threads that copy it, each its own share, right after
    copying it (`_copy_counting`), and where there is any, ValueError(``refuse``) is
    raised and the file left without a stamp: nothing is published, and the tasks of an
    earlier array in the file, not yet computed, refuse (`taken`) as once it is replaced.
    `publishing` with nothing done in its block."""
    with publishing(call_prefix, name, array, threads, refuse) as published:
        pass
    return published


@contextlib.contextmanager
def publishing(call_prefix: str | None, name: str, array: np.ndarray, threads: int = 1,
               refuse: str | None = None):
    """On the client: ``with publishing(call_prefix, name, array, threads, refuse) as
    published``: `publish`, its copy made as the block ends, so that the tasks reading
    ``published`` can be built and sent to the cluster meanwhile (the copy overlaps their
    way through the scheduler to the workers: docs/benchmarks/dask.md).

    On entering, the file is made and its stamp cleared, and the client holds an
    exclusive lock (``flock``) on it until the array is there, which `taken` waits for:
    a task that comes before the copy is done waits, then reads the array, never what
    the file held before.  As the block ends, the array is copied (and counted, with
    ``refuse``) and stamped; where it has a NaN or infinite entry, ValueError(``refuse``)
    is raised and the file left without a stamp, so the tasks already sent refuse
    (`taken`), as do those of an earlier array in the file.  A block that raises leaves
    the file without a stamp too.  ``published`` is None without a prefix, or where the
    file cannot be made or locked (then nothing is copied: the caller sends ``array``
    another way)."""
    path = place(call_prefix, name)
    array = np.ascontiguousarray(array)
    room = fd = None
    if path is not None and fcntl is not None:
        try:
            room = _region(path, 0, STAMP + array.nbytes, True)
            fd = os.open(path, os.O_RDWR)
            fcntl.flock(fd, fcntl.LOCK_EX)   # (released when fd is closed)
        except (OSError, ValueError):
            room = None
            if fd is not None:
                os.close(fd)
    if room is None:
        yield None
        return
    try:
        stamp = uuid.uuid4().bytes
        room[:STAMP] = 0
        yield Published(path, stamp, tuple(array.shape), array.dtype.str)
        out = room[STAMP:].view(array.dtype).reshape(array.shape)
        if refuse is None:
            _copy(out, array, threads)
        elif _copy_counting(out, array, threads):
            raise ValueError(refuse)
        room[:STAMP] = np.frombuffer(stamp, np.uint8)
    finally:
        os.close(fd)


def _wait_published(path: str) -> None:
    """Until the client's `publishing` of ``path`` is over (a shared ``flock``, taken and
    dropped at once); nothing where the file is gone."""
    if fcntl is None:
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


def _copy_counting(out: np.ndarray, array: np.ndarray, threads: int, block: int | None = None) -> int:
    """`_copy`, and how many of the entries copied are NaN or infinite (a complex one
    once), each thread counting in ``out`` what it has just written, in blocks of
    ``block`` entries (None: ``CHECK_BLOCK`` bytes' worth; 0: its whole share at once)."""
    flat_out, flat_in = out.reshape(-1), np.ascontiguousarray(array).reshape(-1)
    step = CHECK_BLOCK // flat_out.itemsize if block is None else int(block)
    step = step if step > 0 else max(1, flat_out.size)
    counts = []

    def copy(r):
        found = 0
        for a in range(r.start, r.stop, step):
            part = flat_out[a:min(a + step, r.stop)]
            np.copyto(part, flat_in[a:a + part.size])
            found += not_finite(part)
        counts.append(found)

    in_slices(copy_threads(flat_out.nbytes, threads), flat_out.size, copy)
    return sum(counts)


@contextlib.contextmanager
def taken(published):
    """In a task: the published array (over the kept mapping), once the client's copy of
    it is done (`publishing`: a task sent while the client copies waits for it), its
    stamp checked before and after the block, and where the block fails too: a block
    that failed while a
    later call replaced the array (a prediction of this image whose engine found the
    later image's NaN: `publish` clears the stamp before it writes, so a reader that saw
    any of the later array finds the stamp changed) refuses as a block that ended would
    (``REPLACED``), its own error named in a note and as the cause, rather than
    complain of an array that was never its own.  Anything else as it is."""
    if not isinstance(published, Published):
        yield published
        return
    dtype = np.dtype(published.dtype)
    nbytes = int(np.prod(published.shape)) * dtype.itemsize
    _wait_published(published.path)
    try:
        room = _read_region(published.path, 0, STAMP + nbytes)
    except FileNotFoundError:
        room = None
    _check_stamp(room, published)
    try:
        yield room[STAMP:].view(dtype).reshape(published.shape)
    except Exception as error:
        _refused_after(error, lambda: _check_stamp(room, published))
        raise
    _check_stamp(room, published)


def _refused_after(error: Exception, check) -> None:
    """A reader's block failed with ``error``: ``check()`` (a stamp check), whose refusal,
    where it refuses, is raised instead, from ``error`` and with a note naming it (a
    note, unlike the cause, goes with the refusal through Dask's pickling)."""
    try:
        check()
    except RuntimeError as refused:
        refused.add_note(f"clgrid.dask: reading it failed first: {type(error).__name__}: {error}")
        raise refused from error


REPLACED = ("clgrid.dask: the image of this dirty2vis was replaced by a later dirty2vis call on the same points "
            "(or dropped by clear_cache) before it was computed: compute each prediction before the next is made, "
            "or pass keep_operators=0")
# what a slab's stamp, found changed by a reader, says (`reading`)
REWRITTEN = ("clgrid.dask: a slab's prediction of this dirty2vis was {how} before its chunks had read it: compute "
             "each prediction once, and before the next is made on the same points, or pass keep_operators=0")
_WRITING = ("being written again (or left unfinished by a prediction that failed) by another dirty2vis call on "
            "the same points, or by this one computed again")
_WRITTEN = "written again by another dirty2vis call on the same points, or by this one computed again"
_REMOVED = "removed (clear_cache, or its set of points dropped)"


def _check_stamp(room, published: Published) -> None:
    if room is None or bytes(room[:STAMP]) != published.stamp:
        raise RuntimeError(REPLACED)


def _stamp_room(path: str, writable: bool) -> np.ndarray:
    return _region(f"{path}-stamp", 0, STAMP, writable)


@contextlib.contextmanager
def stamped_room(path: str | None, total: int, dtype):
    """In a task: ``with stamped_room(path, total, dtype) as room``: room for ``total``
    values of ``dtype`` in the file ``path``, for a prediction written there directly,
    then `stamped_shares` inside the block; None without ``path`` or where the file
    cannot be made.

    The file is this task's alone from entering the block to leaving it (an exclusive
    ``flock`` on its stamp file, which another task's `stamped_room`, in this process
    or another, waits for; the system drops it with a process that dies), and its stamp
    is cleared first (a reader refuses the file until `stamped_shares` stamps it
    again).  So two writes of one file never overlap, and a write that fails leaves the
    stamp cleared: the readers of the write before refuse, saying so (`reading`)."""
    if path is None:
        yield None
        return
    dtype = np.dtype(dtype)
    try:
        stamp_room = _stamp_room(path, True)
        fd = os.open(f"{path}-stamp", os.O_RDWR)
    except (OSError, ValueError):
        yield None
        return
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)               # (released when fd is closed)
        stamp_room[:] = 0
        try:
            room = _region(path, 0, max(total, 1) * dtype.itemsize, True).view(dtype)[:total]
        except (OSError, ValueError):
            room = None
        yield room
    finally:
        os.close(fd)


def stamped_shares(path: str, lengths: list, dtype) -> tuple:
    """In a task, inside `stamped_room`'s block once its room holds the prediction: a
    fresh stamp put on the file and a `Shared` per piece (consecutive, of ``lengths``)
    carrying it, each checked by its reader (`reading`).  A stamp of this write alone,
    not the image's: the same prediction written again (a task computed twice) clears it
    and stamps its own, so the first write's readers refuse instead of reading bits of
    both.  Called while the image is still held (`taken`), before its stamp is checked
    again: another call writes the file only after publishing its own image, so never
    between this check and this stamp."""
    stamp = uuid.uuid4().bytes
    _stamp_room(path, True)[:] = np.frombuffer(stamp, np.uint8)
    out, start = [], 0
    for n in lengths:
        out.append(Shared(path, start, int(n), np.dtype(dtype).str, None, stamp))
        start += int(n)
    return tuple(out)


@contextlib.contextmanager
def reading(parts: list):
    """In a task: ``parts`` (arrays, `Shared`) as arrays, the stamps of stamped ones
    (`stamped_shares`) checked before and after the block, and where the block fails too
    (a stamp changed meanwhile: the refusal is raised instead, as in `taken`)."""
    stamped = [p for p in parts if isinstance(p, Shared) and p.stamp is not None]

    def check():
        for p in stamped:
            try:
                found = bytes(_stamp_room(p.path, False))
            except FileNotFoundError:
                raise RuntimeError(REWRITTEN.format(how=_REMOVED)) from None
            if found != p.stamp:
                how = _WRITING if found == bytes(STAMP) else _WRITTEN
                raise RuntimeError(REWRITTEN.format(how=how))

    check()
    try:
        yield [read(p) if p is not None else None for p in parts]
    except Exception as error:
        _refused_after(error, check)
        raise
    check()


def remove(call_prefix: str | None) -> None:
    """On the client: remove every file under ``call_prefix`` (a kept set of points', of
    every generation; or one generation's, `using`), their memory going with the last
    mapping: the workers drop theirs at their next use of shared memory."""
    if call_prefix is None:
        return
    for path in glob.glob(glob.escape(call_prefix) + "-*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def at_exit(cleanup) -> None:
    """``cleanup()`` when this process exits, not in a child of a bare ``os.fork`` that
    exits normally (which runs its parent's exit handlers too): the shared-memory files go
    with the process that made them, and a child leaves its parent's alone."""
    owner = os.getpid()

    def run() -> None:
        if os.getpid() == owner:
            cleanup()

    atexit.register(run)


at_exit(forget)
