"""Float atomic add paths: which a device can take, and a contention micro-benchmark.

The paths are implemented in ``clgrid/cl_kernels/common.cl`` and chosen by the tuning
table's ``atomic`` parameter:

- ``cas``: compare-and-swap loop on the bit pattern; portable (OpenCL 1.1).
- ``xchg``: the ``atomic_xchg`` accumulate trick; portable, fewer retries under contention.
- ``ext``: OpenCL 3.0 ``cl_ext_float_atomics`` (``atomic_fetch_add_explicit``).
- ``ptx``: NVIDIA inline PTX ``red.global.add.f32/.f64``.

A path the device does not offer falls back to ``cas``, first by its reported
facts, then by a failed build (`Strategy.kernel`), with a warning either way.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .codegen import build_program, render
from .runtime import device_facts, get_queue

__all__ = ["ATOMIC_PATHS", "atomic_unavailable", "build_options_for", "contention_benchmark"]

ATOMIC_PATHS = ("cas", "xchg", "ext", "ptx")


def atomic_unavailable(path: str, facts, double: bool) -> str | None:
    """Why ``path`` cannot be used on the device, or None if it can (as far as facts tell)."""
    if path not in ATOMIC_PATHS:
        return f"unknown atomic path {path!r}; choose one of {list(ATOMIC_PATHS)}"
    if path == "ptx" and "nvidia" not in facts.platform.lower():
        return "inline PTX needs NVIDIA's OpenCL platform"
    if path == "ext" and not facts.has("cl_ext_float_atomics"):
        return "the device does not report cl_ext_float_atomics"
    if double and not facts.int64_atomics:
        return "64-bit atomics need cl_khr_int64_base_atomics"
    return None


def build_options_for(path: str) -> tuple:
    """Compiler options a path needs (the atomic_* types of cl_ext_float_atomics are OpenCL C 3.0)."""
    return ("-cl-std=CL3.0",) if path == "ext" else ()


def contention_benchmark(device=None, path: str = "cas", num_adds: int = 1 << 24,
                         num_addresses: int = 4096, local: bool = False, double: bool = False,
                         work_group_size: int = 256, repeats: int = 5):
    """Time ``num_adds`` float atomic adds spread round-robin over ``num_addresses``.

    Work-item i adds ``i % 7 + 1``: small integers, so every sum is exact in any
    order and the result can be checked exactly.  With ``local=True`` each
    work-group first accumulates in local memory and flushes each address once.
    Returns ``(adds_per_second, max_abs_error, path_used)``; the path is "cas"
    when the requested one is unavailable.
    """
    queue = get_queue(device)
    facts = device_facts(queue.device)
    used = path if atomic_unavailable(path, facts, double) is None else "cas"
    real = np.float64 if double else np.float32
    source = render("atomic_contention.cl", double=double, atomic=used, local=local, deterministic=False,
                    num_addresses=num_addresses)
    kernel = cl.Kernel(build_program(queue.context, source, build_options_for(used)), "contend")
    wg = min(work_group_size, facts.max_work_group_size)
    groups = max(1, min(num_adds // wg, 64 * facts.compute_units))
    out = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, num_addresses * np.dtype(real).itemsize)
    times = []
    for i in range(repeats + 1):
        zero = cl.enqueue_fill_buffer(queue, out, np.zeros(1, real), 0, out.size)
        event = kernel(queue, (groups * wg,), (wg,), out, np.int64(num_adds), wait_for=[zero])
        event.wait()
        if i:  # the first run is the warm-up
            times.append((event.profile.end - event.profile.start) * 1e-9)
    got = np.empty(num_addresses, real)
    cl.enqueue_copy(queue, got, out).wait()
    i = np.arange(num_adds, dtype=np.int64)
    expected = np.bincount(i % num_addresses, weights=(i % 7 + 1).astype(np.float64),
                           minlength=num_addresses)
    return num_adds / float(np.median(times)), float(np.abs(got - expected).max()), used
