"""OpenCL device discovery and selection.

``device=`` anywhere in clgrid accepts a pyopencl Device, Context or CommandQueue,
a string matched against platform and device names ("pocl", "nvidia", "cpu",
"gpu", "H100"), or None.  None means ``$CLGRID_DEVICE`` if set, else the first GPU,
else PoCL, else whatever device exists.  One context and one profiling queue are
kept per device, so programs built for it are shared by every gridder.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from .errors import DeviceCapabilityError

__all__ = ["devices", "select_device", "get_queue", "fill_zeros", "DeviceFacts", "device_facts"]

_queues: dict = {}

# NVIDIA's clEnqueueFillBuffer hangs or fails on fills of 2**31 bytes or more on Pascal
# and Volta GPUs (pyopencl issue #395), so buffers are filled in pieces.  (On an H100,
# driver 580.159, one fill of a 2.6 GB grid works.)
FILL_PIECE_BYTES = 2 ** 30
# NVIDIA's OpenCL reports a quarter of the memory as its largest buffer (21.25 GB on an
# 80 GB H100, driver 580.159), but there a buffer past 8 GiB fails at its first use, by
# a fill or by a kernel (8.5 GB worked; 8.7 GB failed with error -9999 and took the
# context with it), so clgrid refuses such buffers up front.
NVIDIA_MAX_BUFFER_BYTES = 2 ** 33


def devices() -> list:
    """Every OpenCL device on every platform, in platform order."""
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD at all
        return []
    found = []
    for platform in platforms:
        try:
            found.extend(platform.get_devices())
        except cl.Error:  # a platform with no devices raises instead of returning []
            continue
    return found


def _description(device) -> str:
    return " ".join([device.platform.name, device.platform.vendor, device.name, device.vendor,
                     cl.device_type.to_string(device.type)]).lower()


def select_device(spec=None):
    """Resolve ``spec`` (see module docstring) to one pyopencl Device."""
    if isinstance(spec, cl.CommandQueue):
        return spec.device
    if isinstance(spec, cl.Context):
        return spec.devices[0]
    if isinstance(spec, cl.Device):
        return spec
    if spec is None:
        spec = os.environ.get("CLGRID_DEVICE") or None
    found = devices()
    if not found:
        raise DeviceCapabilityError(
            "no OpenCL device found; install an OpenCL driver or PoCL "
            "(pip install 'clgrid[pocl]')")
    if spec is None:
        gpus = [d for d in found if d.type & cl.device_type.GPU]
        pocl = [d for d in found if "portable computing language" in d.platform.name.lower()]
        return (gpus or pocl or found)[0]
    if not isinstance(spec, str):
        raise TypeError(f"device must be None, a string or a pyopencl Device/Context/CommandQueue, "
                        f"got {type(spec).__name__}")
    words = spec.lower().split()
    matches = [d for d in found if all(w in _description(d) for w in words)]
    if not matches:
        names = "; ".join(f"{d.platform.name}: {d.name}" for d in found)
        raise DeviceCapabilityError(f"no OpenCL device matches {spec!r}; devices here: {names}")
    return matches[0]


def get_queue(spec=None) -> cl.CommandQueue:
    """A profiling-enabled queue on the selected device (the caller's own queue if given)."""
    if isinstance(spec, cl.CommandQueue):
        return spec
    if isinstance(spec, cl.Context):
        return cl.CommandQueue(spec, properties=cl.command_queue_properties.PROFILING_ENABLE)
    device = select_device(spec)
    key = device.int_ptr
    if key not in _queues:
        context = cl.Context([device])
        _queues[key] = cl.CommandQueue(context, device,
                                       properties=cl.command_queue_properties.PROFILING_ENABLE)
    return _queues[key]


def fill_zeros(queue: cl.CommandQueue, buffer, nbytes: int, dtype, wait_for=None) -> cl.Event:
    """Zero the first ``nbytes`` of ``buffer`` (a multiple of dtype's size) in fills of at most
    FILL_PIECE_BYTES, each after the last; returns the last fill's event."""
    zero = np.zeros(1, dtype)
    piece = FILL_PIECE_BYTES - FILL_PIECE_BYTES % zero.nbytes
    event = cl.enqueue_marker(queue, wait_for=wait_for) if nbytes == 0 else None
    for offset in range(0, int(nbytes), piece):
        event = cl.enqueue_fill_buffer(queue, buffer, zero, offset, min(piece, int(nbytes) - offset),
                                       wait_for=[event] if event else wait_for)
    return event


@dataclass(frozen=True)
class DeviceFacts:
    """What clgrid needs to know about a device to render and launch kernels."""

    platform: str
    vendor: str
    name: str
    type: str
    driver: str
    compute_units: int
    global_memory: int
    max_allocation: int
    local_memory: int
    max_work_group_size: int
    fp64: bool
    int64_atomics: bool
    images: bool
    extensions: tuple

    def has(self, extension: str) -> bool:
        return extension in self.extensions


def device_facts(device) -> DeviceFacts:
    ext = tuple(device.extensions.split())
    max_allocation = device.max_mem_alloc_size
    if "NVIDIA" in device.platform.name:
        max_allocation = min(max_allocation, NVIDIA_MAX_BUFFER_BYTES)
    return DeviceFacts(
        platform=device.platform.name.strip(), vendor=device.vendor.strip(), name=device.name.strip(),
        type=cl.device_type.to_string(device.type), driver=device.driver_version,
        compute_units=device.max_compute_units, global_memory=device.global_mem_size,
        max_allocation=max_allocation, local_memory=device.local_mem_size,
        max_work_group_size=device.max_work_group_size,
        fp64="cl_khr_fp64" in ext or device.double_fp_config != 0,
        int64_atomics="cl_khr_int64_base_atomics" in ext, images=bool(device.image_support),
        extensions=ext)
