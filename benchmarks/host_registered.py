"""Can a device copy to and from a file mapped from /dev/shm (what clgrid.dask's tasks
share) as fast as from a pinned block?  268 MB (an 8192^2 float32 image) up and down:
from a pinned block (ALLOC_HOST_PTR, mapped), a numpy array, the shm mapping itself
(pageable), and through a buffer made over the mapping with CL_MEM_USE_HOST_PTR (its
map and unmap keep host and device in step: `clgrid.device.registered`).  Medians of 5
after a warm-up; the first NVIDIA platform's first device ($PROBE_PLATFORM: another
platform whose name holds it).  Then the ways the OpenCL spec itself names for a
USE_HOST_PTR buffer's host bytes (clEnqueueWriteBuffer / ReadBuffer with ptr = host_ptr
+ offset), plain copies from the mapping once it is registered, and whether each way up
carries host bytes written outside a map (a stale device copy against new host bytes).

    python benchmarks/host_registered.py          # ~10 s on an H100

Results: docs/results/hostptr_probe_h100x2_s41.txt, docs/benchmarks/dask.md.
"""
import mmap, os, time
import numpy as np
import pyopencl as cl


def main():
    N = 8192 * 8192 * 4
    dev = [d for p in cl.get_platforms() for d in p.get_devices() if os.environ.get("PROBE_PLATFORM", "NVIDIA") in p.name][0]
    ctx = cl.Context([dev]); q = cl.CommandQueue(ctx)
    mf = cl.mem_flags
    devbuf = cl.Buffer(ctx, mf.READ_WRITE, N)
    path = "/dev/shm/hostptr-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600); os.posix_fallocate(fd, 0, N)
    m = mmap.mmap(fd, N, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)); os.close(fd)
    shm = np.frombuffer(m, np.uint8, N); shm[:] = 1
    plain = np.ones(N, np.uint8)
    pinned_buf = cl.Buffer(ctx, mf.READ_WRITE | mf.ALLOC_HOST_PTR, N)
    pinned, _ = cl.enqueue_map_buffer(q, pinned_buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (N,), np.uint8)
    pinned[:] = 1

    def rate(label, f, reps=5):
        f(); q.finish()
        ts = []
        for _ in range(reps):
            t = time.perf_counter(); f(); q.finish(); ts.append(time.perf_counter() - t)
        t = sorted(ts)[len(ts) // 2]
        print(f"{label:55s} {t*1e3:7.2f} ms  {N/t/1e9:6.1f} GB/s", flush=True)

    rate("up from pinned (ALLOC_HOST_PTR mapped)", lambda: cl.enqueue_copy(q, devbuf, pinned))
    rate("down to pinned", lambda: cl.enqueue_copy(q, pinned, devbuf))
    rate("up from plain numpy (pageable)", lambda: cl.enqueue_copy(q, devbuf, plain))
    rate("down to plain numpy", lambda: cl.enqueue_copy(q, plain, devbuf))
    rate("up from shm (pageable)", lambda: cl.enqueue_copy(q, devbuf, shm))
    rate("down to shm (pageable)", lambda: cl.enqueue_copy(q, shm, devbuf))
    t = time.perf_counter()
    uh = cl.Buffer(ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=shm); q.finish()
    print(f"USE_HOST_PTR over shm: made in {1e3*(time.perf_counter()-t):.1f} ms", flush=True)
    rate("up: copy USE_HOST_PTR(shm) buffer -> device buffer", lambda: cl.enqueue_copy(q, devbuf, uh))
    rate("down: copy device buffer -> USE_HOST_PTR(shm) buffer", lambda: cl.enqueue_copy(q, uh, devbuf))
    # coherence: change the host memory, copy up, read the device back
    shm[:16] = 7
    cl.enqueue_copy(q, devbuf, uh); back = np.empty(16, np.uint8); cl.enqueue_copy(q, back, devbuf); q.finish()
    print("host change seen by a copy up without map/unmap:", bool((back == 7).all()), back[:4])
    def mapped_write():
        a, _ = cl.enqueue_map_buffer(q, uh, cl.map_flags.WRITE_INVALIDATE_REGION, 0, (N,), np.uint8); a.base.release(q)
    rate("map+unmap USE_HOST_PTR(shm) for write", mapped_write)
    cl.enqueue_copy(q, uh, devbuf); q.finish()
    a, _ = cl.enqueue_map_buffer(q, uh, cl.map_flags.READ, 0, (N,), np.uint8)
    print("map READ returns the host pointer itself:", a.__array_interface__["data"][0] == shm.__array_interface__["data"][0])
    t = time.perf_counter(); a.base.release(q); q.finish(); print(f"unmap {1e3*(time.perf_counter()-t):.2f} ms")
    def down_map():
        cl.enqueue_copy(q, uh, devbuf)
        b, _ = cl.enqueue_map_buffer(q, uh, cl.map_flags.READ, 0, (N,), np.uint8); b.base.release(q)
    rate("down into USE_HOST_PTR(shm) + map READ (data in shm)", down_map)
    # the ways the OpenCL spec names for a USE_HOST_PTR buffer's host bytes (its notes to
    # clEnqueueWriteBuffer / ReadBuffer with ptr = host_ptr + offset): no map flag promises
    # that bytes written into host_ptr outside a map survive a WRITE_INVALIDATE_REGION map
    # (docs: review-41)
    rate("up: WriteBuffer(USE_HOST_PTR, host_ptr) + copy", lambda: (cl.enqueue_copy(q, uh, shm),
                                                                    cl.enqueue_copy(q, devbuf, uh)))
    rate("down: copy + ReadBuffer(USE_HOST_PTR, host_ptr)", lambda: (cl.enqueue_copy(q, uh, devbuf),
                                                                     cl.enqueue_copy(q, shm, uh)))
    rate("up from shm, registered (plain WriteBuffer)", lambda: cl.enqueue_copy(q, devbuf, shm))
    rate("down to shm, registered (plain ReadBuffer)", lambda: cl.enqueue_copy(q, shm, devbuf))
    # coherence of each way up: the device's copy is stale (9), the host's bytes new (7)
    for label, up in (("map WRITE_INVALIDATE_REGION + unmap", mapped_write),
                      ("WriteBuffer(host_ptr)", lambda: cl.enqueue_copy(q, uh, shm))):
        cl.enqueue_fill_buffer(q, uh, np.uint8(9), 0, N); q.finish()
        shm[:] = 7
        up(); cl.enqueue_copy(q, devbuf, uh); back = np.empty(N, np.uint8); cl.enqueue_copy(q, back, devbuf)
        q.finish()
        print(f"host bytes up through {label}: device {np.unique(back)[:4]}, host {np.unique(shm)[:4]}", flush=True)
    os.remove(path)
    # a buffer over a second mapping that no command ever uses (a registration only): do
    # plain copies from and to the mapping go at the pinned rate, and does the buffer take
    # device memory (CuPy's cudaMemGetInfo where CuPy is there)?
    def free():
        try:
            import cupy
            return cupy.cuda.runtime.memGetInfo()[0]
        except Exception:
            return None
    path2 = "/dev/shm/hostptr-probe-2"
    fd = os.open(path2, os.O_RDWR | os.O_CREAT, 0o600); os.posix_fallocate(fd, 0, N)
    m2 = mmap.mmap(fd, N, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)); os.close(fd)
    shm2 = np.frombuffer(m2, np.uint8, N); shm2[:] = 3
    rate("up from a second shm mapping (pageable)", lambda: cl.enqueue_copy(q, devbuf, shm2))
    before = free(); t = time.perf_counter()
    token = cl.Buffer(ctx, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=shm2); q.finish()
    made = time.perf_counter() - t; after = free()
    print(f"unused USE_HOST_PTR buffer over it made in {1e3*made:.1f} ms; device memory free "
          f"{before} -> {after} bytes", flush=True)
    rate("up from it, registered by an unused buffer", lambda: cl.enqueue_copy(q, devbuf, shm2))
    rate("down to it, registered by an unused buffer", lambda: cl.enqueue_copy(q, shm2, devbuf))
    half = N // 2
    rate("up from its second half (offset range), registered", lambda: cl.enqueue_copy(q, devbuf, shm2[half:]))
    shm2[:] = 5; cl.enqueue_copy(q, devbuf, shm2); back = np.empty(16, np.uint8)
    cl.enqueue_copy(q, back, devbuf, src_offset=N - 16); q.finish()
    print("host bytes up by a plain copy while registered:", np.unique(back), "device memory free", free(), flush=True)
    t = time.perf_counter(); token.release(); q.finish()
    print(f"released in {1e3*(time.perf_counter()-t):.1f} ms; device memory free {free()}", flush=True)
    rate("up from it after the release", lambda: cl.enqueue_copy(q, devbuf, shm2))
    os.remove(path2)
    more_registrations(dev, N, rate, q, devbuf)


def more_registrations(dev, N, rate, q, devbuf):
    """Two questions `clgrid.device.registered` leaves open (review-42): (1) can a mapping
    without PROT_WRITE (what clgrid.dask.exchange's readers could map, were they not
    mapped writable for this) be registered by a READ_ONLY USE_HOST_PTR buffer, and are
    plain uploads from it then pinned-fast?  (pyopencl refuses a READ_WRITE buffer over
    read-only memory.)  (2) a device list in one process has a context per device, each
    with its own buffer over the same region: is the second made, and are copies pinned-
    fast in both (a second context on the same device, and on a second device if there
    is one)?"""
    mf = cl.mem_flags
    path = "/dev/shm/hostptr-probe-3"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600); os.posix_fallocate(fd, 0, N); os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    ro = mmap.mmap(fd, N, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
    os.close(fd)
    shm3 = np.frombuffer(ro, np.uint8, N)
    rate("up from a read-only shm mapping (pageable)", lambda: cl.enqueue_copy(q, devbuf, shm3))
    try:
        token = cl.Buffer(q.context, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=shm3); q.finish()
        print("READ_ONLY USE_HOST_PTR buffer over the read-only mapping: made", flush=True)
        rate("up from it, registered READ_ONLY", lambda: cl.enqueue_copy(q, devbuf, shm3))
        del token
    except Exception as error:
        print(f"READ_ONLY USE_HOST_PTR buffer over the read-only mapping refused: {error!r}", flush=True)
    os.remove(path)
    path = "/dev/shm/hostptr-probe-4"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600); os.posix_fallocate(fd, 0, N)
    m4 = mmap.mmap(fd, N, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)); os.close(fd)
    shm4 = np.frombuffer(m4, np.uint8, N); shm4[:] = 4
    others = [d for d in dev.platform.get_devices() if d != dev][:1]
    tokens = [cl.Buffer(q.context, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=shm4)]
    for label, device in [("a second context, same device", dev)] + [("a second device's context", d) for d in others]:
        ctx2 = cl.Context([device]); q2 = cl.CommandQueue(ctx2); dev2 = cl.Buffer(ctx2, mf.READ_WRITE, N)
        try:
            tokens.append(cl.Buffer(ctx2, mf.READ_WRITE | mf.USE_HOST_PTR, hostbuf=shm4)); q2.finish()
            print(f"{label}: a second buffer over the registered mapping made", flush=True)
        except Exception as error:
            print(f"{label}: a second buffer over the registered mapping refused: {error!r}", flush=True)
        for name, queue, target in (("first context", q, devbuf), (label, q2, dev2)):
            def up(queue=queue, target=target):
                cl.enqueue_copy(queue, target, shm4); queue.finish()
            def down(queue=queue, target=target):
                cl.enqueue_copy(queue, shm4, target); queue.finish()
            rate(f"up, both registered: {name}", up)
            rate(f"down, both registered: {name}", down)
        tokens[1:] = []
    os.remove(path)


if __name__ == "__main__":
    main()
