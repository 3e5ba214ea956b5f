"""`clgrid.device.registered`: host memory kept mapped by its owner (a file in shared
memory), registered with a context by a buffer over it (``USE_HOST_PTR``) and copied to and
from a device straight."""

import mmap
import os
import uuid

import numpy as np
import pyopencl as cl
import pytest

from clgrid.device import registered, transfer
from clgrid.device.transfer import Staging


@pytest.fixture
def shm_region():
    """A 3 MiB file in /dev/shm mapped writable (as `clgrid.dask.exchange` keeps its
    files), as bytes; removed after."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this machine: the regions registered are shared-memory files")
    path = f"/dev/shm/clgrid-test-registered-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    nbytes = 3 << 20
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, nbytes)
        mapping = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)
    finally:
        os.close(fd)
    yield np.frombuffer(mapping, np.uint8)
    os.remove(path)


def test_a_registered_region_is_copied_straight_from_its_second_copy(rng, shm_region, queue):
    """First copy in a context: not the region's way (False, nothing done); from the
    second on (a buffer over the region made), up and down: a range at an odd offset goes
    up into a poisoned device buffer whole and comes down into a poisoned range of the
    region, the bytes around it untouched; a host change between copies goes up;
    forgotten, the region is not used again."""
    q = queue
    region = shm_region
    region[:] = rng.integers(0, 256, region.size, dtype=np.uint8)
    n, at = 1 << 20, 4099
    device = cl.Buffer(q.context, cl.mem_flags.READ_WRITE, n)
    registered.register(region)
    try:
        assert registered.registered_count() >= 1
        assert not registered.copy_up(q, region[at:at + n], device)           # (the first ask: no buffer yet)
        for round in range(2):
            cl.enqueue_fill_buffer(q, device, np.uint8(0xAB), 0, n).wait()
            region[at:at + n] = rng.integers(0, 256, n, dtype=np.uint8)       # (changed between copies)
            assert registered.copy_up(q, region[at:at + n], device)
            back = np.empty(n, np.uint8)
            cl.enqueue_copy(q, back, device).wait()
            np.testing.assert_array_equal(back, region[at:at + n])
        want = rng.integers(0, 256, n, dtype=np.uint8)
        cl.enqueue_copy(q, device, want).wait()
        before, after = region[:at].copy(), region[at + n:].copy()
        region[at:at + n] = 0x5A
        assert registered.copy_down(q, device, region[at:at + n])
        np.testing.assert_array_equal(region[at:at + n], want)
        np.testing.assert_array_equal(region[:at], before)
        np.testing.assert_array_equal(region[at + n:], after)
        outside = np.zeros(n, np.uint8)
        assert not registered.copy_up(q, outside, device) and not registered.copy_down(q, device, outside)
    finally:
        registered.forget(region)
    assert not registered.copy_up(q, region[at:at + n], device)


def test_staging_copies_a_registered_region_its_way(rng, shm_region, queue, monkeypatch):
    """`Staging.upload` and `download` (staging forced on the device under test) take a
    registered region's way from its second copy: the values arrive whole (poisoned
    device buffer, poisoned host range) and the pinned pieces are not used."""
    q = queue
    monkeypatch.setattr(Staging, "worth_it", staticmethod(lambda device: True))
    staging = Staging(q, piece=64 << 10)
    region = shm_region
    n = 2 << 20
    host = region[8:8 + n].view(np.float32)
    device = cl.Buffer(q.context, cl.mem_flags.READ_WRITE, n)
    registered.register(region)
    through = []
    real_up, real_down = registered.copy_up, registered.copy_down
    monkeypatch.setattr(transfer, "copy_up", lambda *a: through.append("up") or real_up(*a))
    monkeypatch.setattr(transfer, "copy_down", lambda *a: through.append("down") or real_down(*a))
    try:
        for round in range(2):
            host[:] = rng.normal(size=host.size).astype(np.float32)
            cl.enqueue_fill_buffer(q, device, np.float32(np.nan), 0, n).wait()
            staging.upload(host, device)
            back = np.empty_like(host)
            cl.enqueue_copy(q, back, device).wait()
            np.testing.assert_array_equal(back, host)
            want = rng.normal(size=host.size).astype(np.float32)
            cl.enqueue_copy(q, device, want).wait()
            host[:] = np.nan
            staging.download(device, host)
            np.testing.assert_array_equal(host, want)
        assert through == ["up", "down"] * 2
        assert registered._pinning(host, q.context) is not None         # (its buffer made, on the second copy)
    finally:
        registered.forget(region)


def test_regions_beyond_the_devices_share_go_through_the_staging(rng, shm_region, queue, monkeypatch):
    """Buffers over regions hold at most `DEVICE_SHARE` of the device's memory: a region
    that would pass it gets none (its copies return False, for the staging's pieces),
    and one forgotten gives its share back."""
    monkeypatch.setattr(registered, "DEVICE_SHARE", (shm_region.nbytes + 1) / queue.device.global_mem_size)
    half = shm_region.nbytes // 2
    first, second = shm_region[:half], shm_region[half:]
    device = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 1024)
    for region in (first, second):
        registered.register(region)
    try:
        for _ in range(2):
            registered.copy_up(queue, first[:1024], device)
        assert registered.copy_up(queue, first[:1024], device)
        monkeypatch.setattr(registered, "DEVICE_SHARE", (half + 1) / queue.device.global_mem_size)
        for _ in range(3):
            assert not registered.copy_up(queue, second[:1024], device)      # (no room beside the first)
        registered.forget(first)
        assert registered.copy_up(queue, second[:1024], device)              # (its first ask was counted)
    finally:
        registered.forget(first)
        registered.forget(second)


def test_a_region_forgotten_while_a_copy_looks_for_its_buffer_gives_its_share_back(rng, shm_region, queue,
                                                                                   monkeypatch):
    """`forget` between a copy's look-up of the region and its buffer's making (another
    thread drops the mapping: `clgrid.dask.exchange` replaced or left its file): the copy
    makes no buffer over a forgotten region (it goes through the staging), and the
    context's count of the buffers' bytes (`_held`, against `DEVICE_SHARE`) is what it was
    (before, the buffer was made and counted after its region's share was given back, and
    the count never came down: the share shrank with every such region)."""
    q = queue
    key = q.context.int_ptr
    region = shm_region
    device = cl.Buffer(q.context, cl.mem_flags.READ_WRITE, 1024)
    registered.register(region)
    held = registered._held.get(key, 0)
    try:
        assert not registered.copy_up(q, region[:1024], device)          # (the first ask)
        real = registered._Region.buffer

        def forgotten_first(self, context):
            registered.forget(region)
            return real(self, context)

        monkeypatch.setattr(registered._Region, "buffer", forgotten_first)
        region[:1024] = rng.integers(0, 256, 1024, dtype=np.uint8)
        assert not registered.copy_up(q, region[:1024], device)
    finally:
        registered.forget(region)
    assert registered._held.get(key, 0) == held


def test_a_read_only_registered_region_is_copied_through_the_staging(rng, shm_region, queue, monkeypatch):
    """A region registered read-only (a mapping without ``PROT_WRITE``, or an array whose
    ``writeable`` flag is off), which the runtime's binding refuses as a read-write buffer's
    host memory: its copies go through the staging (False, never an exception, on every
    ask), the values arrive whole, and the context's count of the buffers' bytes (`_held`)
    is what it was (before, the second copy raised pyopencl's ValueError, and every later
    one again, its bytes counted each time and never given back)."""
    q = queue
    key = q.context.int_ptr
    monkeypatch.setattr(Staging, "worth_it", staticmethod(lambda device: True))
    staging = Staging(q, piece=64 << 10)
    region = shm_region.view()
    region.flags.writeable = False
    n = 1 << 20
    device = cl.Buffer(q.context, cl.mem_flags.READ_WRITE, n)
    held = registered._held.get(key, 0)
    registered.register(region)
    try:
        for _ in range(3):
            shm_region[:n] = rng.integers(0, 256, n, dtype=np.uint8)
            assert not registered.copy_up(q, region[:n], device)
            cl.enqueue_fill_buffer(q, device, np.uint8(0xAB), 0, n).wait()
            staging.upload(region[:n], device)
            back = np.empty(n, np.uint8)
            cl.enqueue_copy(q, back, device).wait()
            np.testing.assert_array_equal(back, shm_region[:n])
        assert registered._held.get(key, 0) == held
    finally:
        registered.forget(region)


def test_a_region_keeps_the_bytes_written_after_its_buffer_was_made_when_it_is_forgotten(rng, shm_region, queue):
    """The buffer over a region is made once and never used, so the runtime's own copy of it
    (where it keeps one: NVIDIA's driver copies the memory when it makes the buffer) is as
    stale as the region's bytes are new.  Nothing of it may come back: bytes written into
    the region after the buffer was made (another process's image, a copy down into it)
    are still there once the region is forgotten and its buffer released.  (A runtime
    that wrote its copy back at the release would undo them: on the CPUs the memory is
    the buffer's own, so this guards the GPUs, run there with CLGRID_TEST_DEVICE.)"""
    import gc

    q = queue
    region = shm_region
    device = cl.Buffer(q.context, cl.mem_flags.READ_WRITE, 1 << 20)
    registered.register(region)
    try:
        for _ in range(2):
            registered.copy_up(q, region[:1 << 20], device)
        assert registered._pinning(region[:1 << 20], q.context) is not None        # (made)
        want = rng.integers(0, 256, region.size, dtype=np.uint8)
        region[:] = want
        down = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
        cl.enqueue_copy(q, device, down).wait()
        assert registered.copy_down(q, device, region[4096:4096 + (1 << 20)])
        want[4096:4096 + (1 << 20)] = down
        q.finish()
    finally:
        registered.forget(region)
    gc.collect()
    q.finish()
    np.testing.assert_array_equal(region, want)
