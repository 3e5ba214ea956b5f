"""Host and device memory of the imaging operator: models of what one operator holds, read
against what the machine has, so that an image or data set that cannot fit is refused by
name before any work starts (`check_host_memory`), and faceted operators are kept
between calls only where they all fit the device (`clgrid.imaging.facets.faceted_operator`).

The models count the large arrays only (per pixel and per sample), from the code that
makes them (clgrid/imaging/engine.py and pixels.py, clgrid/planning/); benchmarks/host_memory.py
measures them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
import os

from ..errors import HostMemoryError
from ..sources.accuracy import float_taps_allowed
from .geometry import ImageGeometry

__all__ = ["host_memory_available", "engine_device_bytes", "engine_point_bytes", "engine_stream_bytes",
           "stream_sample_bytes",           "host_image_bytes",
           "check_host_memory", "HOST_PART_SAMPLES", "return_freed_memory"]

GiB = float(2 ** 30)
# Host bytes per pixel of an operator's image for the host-side image work (engine.py, pixels.py: the
# float64 accumulator, the w phases and their step in complex128 on a quarter of a centred
# image and a running copy, the correction's factors, the output), in either precision;
# benchmarks/host_memory.py measures it.
HOST_IMAGE_BYTES_PER_PIXEL = 52
# (row, channel) samples an engine on a CPU device plans and arranges at a time (its parts):
# the plan in the caller's order beside its arrangement is then this many samples' worth,
# small beside the points kept (benchmarks/host_memory.py; docs/benchmarks/large.md).
HOST_PART_SAMPLES = 2 ** 21


def host_memory_available() -> int | None:
    """Bytes of host memory available to a new allocation (Linux: MemAvailable), or None
    where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@lru_cache(maxsize=1)
def _libc():
    """The C library, looked up on first use (``find_library`` may run ``ldconfig``: not at
    import), or None."""
    try:
        name = ctypes.util.find_library("c")
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def return_freed_memory() -> bool:
    """Give the heap's freed pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing): on a CPU device the OpenCL runtime allocates buffers with malloc, and a part's
    planning scratch freed between the buffers kept stays resident otherwise (the heap's
    holes, measured in docs/benchmarks/large.md).  Whether it could ask."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


def _sizes(precision: str) -> tuple:
    return (16, 8) if precision == "double" else (8, 4)


def engine_point_bytes(precision: str, support: int, spread: str, float_taps: bool) -> int:
    """Device bytes an engine keeps per kept point between calls: its arrangement (first
    cells, source index, phase), its value in plan order, and its spread's own data: the
    "rows" spread's first cells in an int2, 2 W + 1 kernel values (W along u and v, the
    one on the plane being spread) and the argument of its first plane's value (where
    ``float_taps``, in double precision, the kernel values, the value and the phase in
    float); the others' offsets (four reals) with first cells in an int4."""
    cplx, real = _sizes(precision)
    if spread == "rows":        # first cells in an int2; 2 W + 1 kernel values and the plane's argument
        single = float_taps and precision == "double"    # then the value and phase in float too
        values = 8 + 8 if single else 2 * cplx
        return 8 + 4 + values + (2 * support + 1) * (4 if single else real) + real
    return 16 + 4 + cplx + cplx + 4 * real


def _part_setup_bytes(precision: str, support: int, spread: str, float_taps: bool) -> int:
    """Device bytes per sample while one part is planned and arranged, at most: the plan in
    the caller's order (sample, first cells, offsets, phase), the sort's index and order,
    and the arrangement (its offsets, and what the engine keeps of it)."""
    cplx, real = _sizes(precision)
    plan = 4 + 16 + 4 * real + cplx
    return plan + 8 + 4 * real + engine_point_bytes(precision, support, spread, float_taps)


def engine_device_bytes(geometry: ImageGeometry, precision: str, num_samples: int, spread: str | None = None,
                        part_samples: int | None = None, float_taps: bool | None = None,
                        epsilon: float | None = None) -> int:
    """A model of one engine's peak device memory (`clgrid.imaging.engine.ImagingEngine`,
    which says its own with ``device_bytes``): its grid, and the larger of the last part's
    set-up (the parts before it kept, `engine_point_bytes` a sample; this one planned and
    arranged, `_part_setup_bytes`) and a call (every part kept, one part's caller values
    and weights, which go through one part at a time), and the parts' tables of where each
    plane's rows (or bins) begin.  ``spread``: the
    engine's ("rows" on CPUs), None: the larger of a CPU's engine ("rows", parts of
    `HOST_PART_SAMPLES`) and a GPU's (one part); ``part_samples``: samples a part holds
    (None: all); ``float_taps``: the rows spread's kernel values in float (None: where
    `clgrid.sources.accuracy.float_taps_allowed` allows at ``epsilon``; no epsilon: in
    the operator's precision, the larger)."""
    if spread is None:
        return max(engine_device_bytes(geometry, precision, num_samples, "rows", HOST_PART_SAMPLES, float_taps,
                                       epsilon),
                   engine_device_bytes(geometry, precision, num_samples, "bins", None, float_taps, epsilon))
    if float_taps is None:
        float_taps = float_taps_allowed(geometry.kernel, precision, 3 if geometry.do_wgridding else 2, epsilon)
    cplx, real = _sizes(precision)
    support = geometry.kernel.support
    part = num_samples if part_samples is None else min(num_samples, part_samples)
    kept = engine_point_bytes(precision, support, spread, float_taps)
    setup = (num_samples - part) * kept + part * _part_setup_bytes(precision, support, spread, float_taps)
    call = num_samples * kept + part * (cplx + real)
    # each part's table of where each (plane, row) begins, and the sort's counts and cursors
    tables = (-(-num_samples // max(part, 1)) + 2) * 4 * (geometry.num_planes * (geometry.nu + 1) + 1)
    return geometry.nu * geometry.nv * cplx + max(setup, call) + tables


def stream_sample_bytes(precision: str, support: int, spread: str, float_taps: bool) -> int:
    """Device bytes per sample of the rows a streaming engine plans at once: one part's
    set-up (`_part_setup_bytes`) and the caller's value and weight held for it."""
    cplx, real = _sizes(precision)
    return _part_setup_bytes(precision, support, spread, float_taps) + cplx + real


def engine_stream_bytes(geometry: ImageGeometry, precision: str, part_samples: int, parts: int, spread: str,
                        float_taps: bool, device_fft: bool) -> tuple:
    """``(fixed, per point)``: a model of a streaming engine's device memory (one whose
    points do not fit its device at once: `clgrid.imaging.stream`), the bytes it holds
    whatever it streams (the grid, the image buffers of a device FFT, the held caller's
    values and weights and one part's set-up, ``part_samples`` of the rows' samples, and
    the tables of ``parts`` parts), and the bytes each point it holds at once adds
    (`engine_point_bytes`)."""
    cplx, real = _sizes(precision)
    support = geometry.kernel.support
    fixed = geometry.nu * geometry.nv * cplx + (2 * geometry.npix_x * geometry.npix_y * real if device_fft else 0)
    fixed += part_samples * stream_sample_bytes(precision, support, spread, float_taps)
    fixed += (parts + 2) * 4 * (geometry.num_planes * (geometry.nu + 1) + 1)
    return fixed, engine_point_bytes(precision, support, spread, float_taps)


def host_image_bytes(npix_x: int, npix_y: int) -> int:
    """The host-side image work of one operator (`HOST_IMAGE_BYTES_PER_PIXEL`)."""
    return HOST_IMAGE_BYTES_PER_PIXEL * npix_x * npix_y


def check_host_memory(npix_x: int, npix_y: int, precision: str, num_samples: int, geometries: list,
                      device_is_host: bool, faceted: bool, available: int | None = None,
                      together: bool = False, epsilon: float | None = None,
                      device_memory: int | None = None) -> None:
    """Refuse, before any work, an operator the host cannot hold: the output image, the
    largest facet's (or the whole image's) host-side work, the visibilities dirty2vis
    returns (twice with facets: the sum and one facet's), and on a device that shares the
    host's memory (a CPU) the operators' device buffers (`engine_device_bytes`) too.
    ``geometries``: the operators' (one, or one per facet; none: the image and the
    visibilities only, what any way of imaging needs); ``together``: the operators are
    all kept at once (else one at a time); ``available``: bytes (None:
    `host_memory_available`; unknown: no check); ``epsilon``: each operator's (what its
    kernel values' precision follows; None: the larger model); ``device_memory``: the
    device's global memory, where known (an engine streams points beyond it: its buffers
    are counted up to it)."""
    available = host_memory_available() if available is None else available
    if available is None:
        return
    cplx, real = _sizes(precision)
    parts = {"the image": npix_x * npix_y * real,
             "the visibilities out": (2 if faceted else 1) * num_samples * cplx}
    if geometries:
        parts["the per-facet image work" if faceted else "the image work"] = \
            max(host_image_bytes(g.npix_x, g.npix_y) for g in geometries)
    if geometries and device_is_host:
        each = [engine_device_bytes(g, precision, num_samples, "rows", HOST_PART_SAMPLES, epsilon=epsilon)
                for g in geometries]
        if device_memory is not None:
            each = [min(e, device_memory) for e in each]
        parts["device buffers (in host memory)"] = sum(each) if together else max(each)
    need = sum(parts.values())
    if need > available:
        detail = ", ".join(f"{name} {size / GiB:.2f} GiB" for name, size in parts.items())
        raise HostMemoryError(f"a {npix_x} x {npix_y} image of {num_samples} samples in {precision} precision needs "
                              f"about {need / GiB:.2f} GiB of host memory ({detail}); this machine has "
                              f"{available / GiB:.2f} GiB available: image a smaller field or fewer pixels, "
                              f"or in single precision")
