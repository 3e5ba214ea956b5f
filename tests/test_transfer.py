"""Pinned staging carries host arrays to and from the device piece by piece, intact."""

import gc
import warnings

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid import reference
from clgrid.errors import EmptyInputWarning
from clgrid.device import transfer
from clgrid.device.transfer import Staging, download, host_empty, upload_pinned

from conftest import random_visibilities, relative_error


@pytest.mark.parametrize("nbytes", [1, 4095, 4096, 3 * 4096 + 17])
def test_staging_round_trips_every_byte(rng, queue, nbytes):
    staging = Staging(queue, piece=4096)                       # several pieces, both buffers in turn
    host = rng.integers(0, 256, nbytes, dtype=np.uint8)
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, nbytes)
    staging.upload(host, buffer)
    direct = np.empty_like(host)
    cl.enqueue_copy(queue, direct, buffer).wait()
    np.testing.assert_array_equal(direct, host)
    back = np.full(nbytes, 7, np.uint8)                        # poisoned
    staging.download(buffer, back)
    np.testing.assert_array_equal(back, host)


def test_a_download_into_an_array_it_cannot_write_in_place_is_refused(rng, queue):
    """`Staging.download` into a strided view or a read-only array raises, naming the
    argument, and leaves the array as it was (before, a strided view was copied into a
    temporary that took the values, and they were lost without a word)."""
    staging = Staging(queue, piece=4096)
    want = rng.normal(size=64).astype(np.float32)
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=want)
    strided = np.full(128, np.nan, np.float32)[::2]
    frozen = np.full(64, np.nan, np.float32)
    frozen.flags.writeable = False
    for host in (strided, frozen):
        with pytest.raises(ValueError, match="host must be a writable C-contiguous"):
            staging.download(buffer, host)
        assert np.isnan(host).all()
    into = np.full(64, np.nan, np.float32)
    staging.download(buffer, into)
    np.testing.assert_array_equal(into, want)


def test_a_large_upload_goes_through_a_pinned_block_of_its_size_from_its_second_time(rng, queue, monkeypatch):
    """An upload of more than two pieces goes through the pieces the first time its size
    is asked for, then through one pinned block of its size from the context's pool
    (`Staging._upload_whole`: each thread's slice sent across as soon as it is copied),
    given back after; every byte arrives, into a poisoned buffer, each time.  Above
    `WHOLE_BYTES`, always the pieces."""
    staging = Staging(queue, piece=4096)
    nbytes = 7 * 4096 + 1001
    whole = []
    real = Staging._upload_whole
    monkeypatch.setattr(Staging, "_upload_whole", lambda self, src, buffer, block: (whole.append(src.size),
                                                                                    real(self, src, buffer, block)))
    key = (queue.context.int_ptr, nbytes)
    transfer._asked.discard(key)
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, nbytes)
    for time in range(3):
        host = rng.integers(0, 256, nbytes, dtype=np.uint8)
        cl.enqueue_fill_buffer(queue, buffer, np.uint8(7), 0, nbytes).wait()
        staging.upload(host, buffer)
        direct = np.empty_like(host)
        cl.enqueue_copy(queue, direct, buffer).wait()
        np.testing.assert_array_equal(direct, host)
        assert whole == [nbytes] * time                        # the pieces first, then the block
        assert len(transfer._pinned.free_blocks().get(key, [])) == (time > 0)    # given back each time, reused
    monkeypatch.setattr(transfer, "WHOLE_BYTES", nbytes - 1)
    staging.upload(host, buffer)
    assert whole == [nbytes] * 2


def test_a_failed_whole_upload_says_its_own_error_and_gives_its_block_back(rng, queue):
    """An upload through one pinned block whose every copy fails (a buffer too small for
    it) raises the copy's error, not one of the wait for no events, and the block goes
    back to the pool."""
    staging = Staging(queue, piece=4096)
    nbytes = 7 * 4096 + 1001
    key = (queue.context.int_ptr, nbytes)
    transfer._asked.add(key)
    block = transfer._take_pinned(queue, nbytes)
    before = len(transfer._pinned.free_blocks().get(key, []))
    small = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 64)
    with pytest.raises(cl.Error) as raised:
        staging._upload_whole(rng.integers(0, 256, nbytes, dtype=np.uint8), small, block)
    assert "WaitForEvents" not in str(raised.value)
    assert len(transfer._pinned.free_blocks().get(key, [])) == before + 1


def test_a_large_upload_that_the_pools_cannot_keep_goes_through_the_pieces(rng, queue, monkeypatch):
    """Where the pools are full (`POOL_BYTES`), a block pinned for a large upload would be
    unpinned as it is given back, and pinned afresh by every later upload of its size
    (tens of milliseconds each): such uploads go through the staging's pieces instead,
    every byte arriving."""
    staging = Staging(queue, piece=4096)
    nbytes = 7 * 4096 + 1001
    key = (queue.context.int_ptr, nbytes)
    transfer._asked.add(key)
    while transfer._pinned.take(key) is not None:
        pass
    monkeypatch.setattr(transfer, "POOL_BYTES", transfer._pinned.free_bytes + nbytes - 1)
    pinned = []
    real = cl.enqueue_map_buffer
    monkeypatch.setattr(cl, "enqueue_map_buffer", lambda *a, **k: (pinned.append(1), real(*a, **k))[1])
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, nbytes)
    for _ in range(3):
        host = rng.integers(0, 256, nbytes, dtype=np.uint8)
        staging.upload(host, buffer)
        direct = np.empty_like(host)
        cl.enqueue_copy(queue, direct, buffer).wait()
        np.testing.assert_array_equal(direct, host)
    assert pinned == []                                 # no block pinned for each call


@pytest.mark.parametrize("portable", [False, True])
def test_pinned_memory_goes_straight_across_where_the_platform_allows(rng, queue, monkeypatch, portable):
    """`upload_pinned` and `download` copy a pinned block straight across (no staging
    piece, the upload's event its completion) for their own context, and for another
    context only with ``portable``; otherwise through the staging's pieces (the upload
    done on return); every byte arrives either way."""
    contexts = [cl.Context([queue.device]) for _ in range(2)]
    stagings = [Staging(cl.CommandQueue(c), piece=4096) for c in contexts]
    n = int(rng.integers(3000, 9000))
    for staging in stagings:
        host_empty(n, np.float32, staging)                            # the size asked once: pinned next
    pieces = []
    for name in ("_pieces_down", "upload"):
        real = getattr(Staging, name)
        monkeypatch.setattr(Staging, name, lambda self, *a, __real=real, __name=name, **kw:
                            (pieces.append(__name), __real(self, *a, **kw))[1])
    for own, other in ((0, 1), (1, 0)):
        block = host_empty(n, np.float32, stagings[own])
        assert transfer._pinned_block(block) is not None
        for staging in (stagings[own], stagings[other]):
            straight = staging is stagings[own] or portable
            q = staging.queue
            pieces.clear()
            block[...] = rng.normal(size=n).astype(np.float32)
            buffer = cl.Buffer(q.context, cl.mem_flags.READ_WRITE, block.nbytes)
            upload_pinned(q, block, buffer, staging, portable).wait()
            sent = block.copy()
            block[...] = np.nan                                       # poisoned
            download(q, buffer, block, staging, portable=portable)
            np.testing.assert_array_equal(block, sent)
            assert pieces == ([] if straight else ["upload", "_pieces_down"])


def test_operators_through_staging_match_the_reference(rng, queue):
    n, cell = 64, 4e-3
    stack = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=50, num_planes=4, oversample=4,
                                            max_support=5)
    uvw, vis = random_visibilities(rng, 2000, n, cell, 50, npol=2)
    gridder = clgrid.Gridder(n, cell, stack, method="tiled", device=queue, precision="double")
    degridder = clgrid.Degridder(n, cell, stack, device=queue, precision="double")
    for operator in (gridder, degridder):       # as on a GPU, where staging is used (small pieces here)
        operator._staging = Staging(operator.transfer_queue, piece=5000)
    expected = reference.grid(uvw, vis, n, cell, stack)
    for _ in range(3):            # the first result a numpy array, the next ones pinned and recycled
        grid = gridder.grid(uvw, vis)
        assert relative_error(grid, expected) < 1e-12
        got = degridder.degrid(grid, uvw)        # the grid loaded while the device plans
        assert relative_error(got, reference.degrid(grid, uvw, n, cell, stack)) < 1e-12
    bad_grid, bad_uvw = grid.copy(), uvw.copy()
    bad_grid[0, 3, 5] = np.nan
    bad_uvw[7, 1] = np.inf
    with pytest.raises(ValueError, match="grid contains NaN"):
        degridder.degrid(bad_grid, uvw)
    with pytest.raises(ValueError, match="uvw contains NaN or inf"):
        degridder.degrid(bad_grid, bad_uvw)          # planning's error, not the grid's, the first
    assert relative_error(degridder.degrid(grid, uvw), got) == 0


def test_pinned_results_are_recycled_only_when_nothing_holds_them(rng, queue):
    context = cl.Context([queue.device])                       # a context of its own: a pool of its own
    queue = cl.CommandQueue(context)
    staging = Staging(queue, piece=4096)
    shape = (3, 40, 40)
    first = host_empty(shape, np.complex64, staging)
    assert first.base is None                                  # a size's first request: numpy's own
    source = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=source)
    pinned = host_empty(shape, np.complex64, staging)
    assert pinned.base is not None and pinned.flags.c_contiguous and pinned.flags.writeable
    pinned[...] = 7
    staging.download(buffer, pinned)
    np.testing.assert_array_equal(pinned, source)
    address = pinned.ctypes.data
    view = pinned[1]                                           # a view keeps the block from reuse
    del pinned
    gc.collect()
    other = host_empty(shape, np.complex64, staging)
    assert other.ctypes.data != address
    other[...] = 0
    np.testing.assert_array_equal(view, source[1])
    del view
    gc.collect()
    again = host_empty(shape, np.complex64, staging)          # now the block is free: reused
    assert again.ctypes.data == address
    assert host_empty((5,), np.float32, staging).base is None  # other sizes are asked for afresh


@pytest.mark.slow
def test_uploads_on_the_transfer_queue_are_complete_before_kernels_read_them(rng, queue):
    """`Gridder.grid` uploads uvw and vis on its second queue and grids on the first: each
    upload must have finished, not only released the host array (a blocking write's only
    promise).  On Intel's CPU runtime some calls read the buffer early (found by the
    property tests: "vis contains NaN" from finite data; stale data would be silently
    wrong; docs/reliability.md).  Many small calls, each against the reference."""
    N, CELL = 64, 4e-3
    stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=100, num_planes=4, oversample=4,
                                            max_support=8)
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", precision="double", device=queue,
                             on_dropped="ignore")
    for n in rng.integers(1, 60, 300):
        uvw, vis = random_visibilities(rng, int(n), N, CELL, 100)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyInputWarning)    # a call whose every sample drops
            got = gridder.grid(uvw, vis)
        expected = reference.grid(uvw, vis, N, CELL, stack, on_dropped="ignore")
        if not np.any(expected):          # every sample off the grid: nothing to compare but zeros
            assert not np.any(got)
            continue
        assert relative_error(got, expected) <= 1e-12


@pytest.mark.parametrize("shape,error", [(3.7, TypeError), ((2, 3.0), TypeError), ((4, -1), ValueError),
                                         (-2, ValueError)])
def test_host_empty_refuses_a_shape_np_empty_refuses(rng, queue, shape, error):
    """A non-integer or negative size is refused (3.7 was truncated to 3), with or without
    staging; integer sizes (numpy's too) still give arrays of that shape."""
    staging = Staging(queue, piece=4096)
    for given in (None, staging):
        with pytest.raises(error):
            np.empty(shape)
        with pytest.raises(error):
            host_empty(shape, np.float32, given)
        n = int(rng.integers(1, 50))
        assert host_empty(np.int64(n), np.float32, given).shape == (n,)
        assert host_empty((np.int32(n), 2), np.complex64, given).shape == (n, 2)


def test_freed_pinned_blocks_are_capped_for_the_whole_process(rng, queue, monkeypatch):
    """`POOL_BYTES` bounds the freed blocks every context's pool keeps together (it bounded
    each context's, so a list of n devices could keep n times as much): with room for two
    blocks, two freed on one context fill it and a third, freed on another, is unpinned;
    once one is taken again, the other context keeps its next one.  One context alone keeps
    as many as before."""
    from clgrid.device import transfer
    from clgrid.device.free_lists import FreeList

    shape = (int(rng.integers(2, 6)), 256)
    nbytes = int(np.prod(shape)) * 8
    monkeypatch.setattr(transfer, "_pinned", FreeList())        # this test's pools only
    monkeypatch.setattr(transfer, "_asked", set())
    monkeypatch.setattr(transfer, "POOL_BYTES", 2 * nbytes)
    contexts = [cl.Context([queue.device]) for _ in range(2)]
    stagings = [Staging(cl.CommandQueue(c), piece=4096) for c in contexts]
    for staging in stagings:
        host_empty(shape, np.complex64, staging)                 # the size asked once: pinned next

    def kept() -> list:
        free = transfer._pinned.free_blocks()
        return [nbytes * len(free.get((c.int_ptr, nbytes), [])) for c in contexts]

    held = [host_empty(shape, np.complex64, stagings[0]) for _ in range(2)]
    other = host_empty(shape, np.complex64, stagings[1])
    assert all(a.base is not None for a in held + [other])
    del held
    gc.collect()
    assert kept() == [2 * nbytes, 0]       # one context: two kept, as before
    del other
    gc.collect()
    assert kept() == [2 * nbytes, 0]       # the cap is full: not kept
    again = host_empty(shape, np.complex64, stagings[0])          # one taken back: room for one
    other = host_empty(shape, np.complex64, stagings[1])
    del other
    gc.collect()
    assert kept() == [nbytes, nbytes]
    del again
    gc.collect()
    assert sum(kept()) == transfer._pinned.free_bytes == 2 * nbytes


@pytest.mark.parametrize("order", ["F", "strided"])
def test_a_non_contiguous_array_is_counted_in_place(rng, order):
    """`host_threads.count_not_finite` of a Fortran-ordered or strided 2-D array (an image
    the Dask client checks as the caller gave it) counts its inf and NaN entries exactly,
    slice by slice of the array as it is: what the pass allocates stays far below a copy
    of it (traced by tracemalloc, which numpy reports its arrays to)."""
    import tracemalloc

    from clgrid.device import host_threads

    shape = (int(rng.integers(900, 1200)), int(rng.integers(900, 1200)))
    if order == "F":
        a = np.asfortranarray(rng.normal(size=shape))
    else:
        a = rng.normal(size=(shape[0], 2 * shape[1]))[:, ::2]
    assert not a.flags.c_contiguous
    assert host_threads.count_not_finite(a, 3) == 0
    flat = rng.choice(a.size, int(rng.integers(5, 40)), replace=False)
    rows, cols = np.unravel_index(flat, a.shape)
    a[rows[::2], cols[::2]] = np.nan
    a[rows[1::2], cols[1::2]] = np.inf * rng.choice([-1, 1], cols[1::2].size)
    for parts in (1, 3):
        tracemalloc.start()
        try:
            counted = host_threads.count_not_finite(a, parts)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert counted == flat.size
        assert peak < a.nbytes / 4, f"{peak} bytes allocated to count a {a.nbytes}-byte array: a copy"


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.complex128])
def test_host_passes_count_non_finite_entries_without_a_mask(rng, dtype):
    """`host_threads.not_finite` / `count_not_finite` (a sum first, the count only where it
    is not finite) count the inf and NaN entries (a complex entry once, whichever part),
    and none among finite values whose sum overflows; `add_counting` adds in place and
    counts the sums' non-finite parts."""
    from clgrid.device import host_threads

    n = 300_001
    a = rng.normal(size=n).astype(dtype)
    if np.iscomplexobj(a):
        a.imag = rng.normal(size=n)
    assert host_threads.not_finite(a) == 0 == host_threads.count_not_finite(a, 3)
    bad = np.unique(np.concatenate([rng.choice(n, 20, replace=False), [0, n - 1]]))
    a[bad[::2]] = np.nan
    a[bad[1::2]] = -np.inf if not np.iscomplexobj(a) else complex(1.0, np.inf)
    assert host_threads.not_finite(a) == bad.size
    assert host_threads.count_not_finite(a.reshape(-1, 1), 3) == bad.size
    huge = np.full(1000, np.finfo(a.real.dtype).max / 10, dtype)        # finite, their sum not
    assert host_threads.not_finite(huge) == 0
    dst, src = rng.normal(size=n).astype(dtype), np.zeros(n, dtype)
    src[bad] = a[bad]
    expected = dst + src
    assert host_threads.add_counting(dst, src, 3) == int(np.count_nonzero(~np.isfinite(
        expected.view(expected.real.dtype) if np.iscomplexobj(expected) else expected)))
    assert np.array_equal(dst, expected, equal_nan=True)


def test_host_slices_all_end_before_one_slices_error_is_raised():
    """`in_slices` returns, its first exception raised, only once every slice has ended:
    a caller's cleanup (a pinned block given back, `Staging._upload_whole`) must not run
    while another slice still writes into what it cleans up."""
    import time
    from clgrid.device.host_threads import in_slices

    ended = []

    def work(r):
        if r.start == 0:
            raise RuntimeError("the first slice failed")
        time.sleep(0.3)
        ended.append(r.start)

    with pytest.raises(RuntimeError, match="first slice"):
        in_slices(2, 100, work)
    assert ended == [50]


@pytest.mark.parametrize("dtype", [np.complex64, np.float32, np.complex128])
def test_picks_from_an_unaligned_array_are_its_entries(rng, dtype):
    """`host_threads.pick` (by bytes: np.take copies an unaligned source whole first) gives
    the entries at the indices of an array at an odd address, as Dask deserializes blocks,
    into a poisoned out or a new array, on one thread or several; `clgrid.dask.slabs.values_at`
    likewise, weighted."""
    from clgrid.device import host_threads
    from clgrid.dask.slabs import values_at

    n = 10_001
    raw = np.empty(n * np.dtype(dtype).itemsize + 1, np.uint8)
    a = raw[1:].view(dtype)
    assert not a.flags.aligned
    a[...] = rng.normal(size=n) + (1j * rng.normal(size=n) if np.iscomplexobj(a) else 0)
    index = np.sort(rng.choice(n, 3000, replace=False)).astype(np.intp)
    out = np.full(index.size, np.nan, dtype)
    assert host_threads.pick(a, index, out) is out and np.array_equal(out, np.asarray(a)[index])
    assert np.array_equal(host_threads.pick(a.reshape(-1, 1), index), np.asarray(a)[index])
    out[...] = np.nan                                   # in slices on the pool's threads: the same
    assert host_threads.pick(a, index, out, parts=3) is out and np.array_equal(out, np.asarray(a)[index])
    if np.iscomplexobj(a):
        w = raw[1:1 + 4 * n].view(np.float32).copy()
        w[...] = rng.uniform(0.5, 2.0, n)
        got = values_at(a.reshape(-1, 1), w.reshape(-1, 1), index, threads=2)
        assert np.allclose(got, np.asarray(a)[index] * w[index], rtol=1e-6)
