"""OpenCL device discovery and selection.

``device=`` anywhere in clgrid accepts a pyopencl Device, Context or CommandQueue,
a string matched against platform and device names ("pocl", "nvidia", "cpu",
"gpu", "H100"; a last word ``#k`` picks the k-th match from 0, "gpu #1": one of
several equal GPUs, one per Dask worker), or None.  None means ``$CLGRID_DEVICE`` if
set (the first where it names several, separated by commas: `clgrid.WGridder` takes
them all), else the first GPU, else PoCL, else whatever device exists.  One context and one profiling queue are
kept per device, so programs built for it are shared by every gridder.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyopencl as cl

from ..errors import DeviceCapabilityError

__all__ = ["devices", "matching_devices", "select_device", "get_queue", "fill_zeros", "DeviceFacts", "device_facts",
           "register_pip_icds", "open_only_drivers_for", "INTEL_CPU_RUNTIME", "is_intel_cpu_runtime"]

_queues: dict = {}
_contexts: dict = {}
# the user's own $OCL_ICD_VENDORS, before clgrid's registration may set it
_USER_VENDORS = os.environ.get("OCL_ICD_VENDORS")
# whether this process has asked the ICD loader for its platforms (it reads its vendors then, once)
_platforms_listed = False

# NVIDIA's clEnqueueFillBuffer hangs or fails on fills of 2**31 bytes or more on Pascal
# and Volta GPUs (pyopencl issue #395), so buffers are filled in pieces (an H100 has no
# such limit: docs/benchmarks/large.md).
FILL_PIECE_BYTES = 2 ** 30
# NVIDIA's OpenCL reports a quarter of the memory as its largest buffer, but a buffer past
# 8 GiB fails at its first use, by a fill or by a kernel, with error -9999 and the context
# lost with it (an H100: docs/benchmarks/large.md, "NVIDIA buffers over 8 GiB"), so clgrid
# refuses such buffers up front.
NVIDIA_MAX_BUFFER_BYTES = 2 ** 33


# Intel's OpenCL CPU runtime from the package index (the `intel` extra): the distribution and
# the driver library it installs.  The ICD file it ships names a path on Intel's build
# machine ("/opt/anaconda1anaconda2anaconda3/lib/libintelocl.so"), so the loader cannot use it.
INTEL_CPU_RUNTIME = ("intel-opencl-rt", "libintelocl.so")


def _pip_driver(distribution: str, library: str) -> Path | None:
    """The installed path of ``library`` from ``distribution``, or None if it is not installed."""
    try:
        files = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    found = [Path(f.locate()) for f in files if f.name == library]
    return next((path.resolve() for path in found if path.is_file()), None)


def _replace(path: Path, make) -> None:
    """Create ``path`` atomically (``make`` writes a temporary beside it), so that processes
    starting together never see a half-written vendors folder."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    make(tmp)
    os.replace(tmp, path)


def _own_vendors_folder(driver: Path | None = None) -> str | None:
    """The vendors folder `register_pip_icds` makes for ``driver`` (Intel's pip runtime by
    default; None where it is not installed)."""
    driver = driver or _pip_driver(*INTEL_CPU_RUNTIME)
    if driver is None:
        return None
    import platformdirs

    # one folder per driver path: environments with their own copies never rewrite each other's
    tag = hashlib.sha1(str(driver).encode()).hexdigest()[:10]
    return str(Path(platformdirs.user_cache_dir("clgrid")) / f"icd-vendors-{tag}")


def register_pip_icds(folder: Path | None = None) -> Path | None:
    """Make OpenCL drivers installed by pip visible to pyopencl's ICD loader, as pyopencl's
    own loader finds PoCL's binary distribution (in pyopencl/.libs).

    ocl-icd reads ``.icd`` files from /etc/OpenCL/vendors, or from ``$OCL_ICD_VENDORS``
    instead.  When a pip-installed driver is present (Intel's CPU runtime) and the user has
    not set ``$OCL_ICD_VENDORS``, this writes a vendors folder in clgrid's cache with links
    to the system's ``.icd`` files plus one naming the pip driver, and points
    ``$OCL_ICD_VENDORS`` at it.  It must run before the loader's first platform query, so
    clgrid calls it on import; ``CLGRID_REGISTER_ICDS=0`` turns it off.  Returns the folder,
    or None where nothing was done.
    """
    if os.environ.get("CLGRID_REGISTER_ICDS", "1") == "0" or os.environ.get("OCL_ICD_VENDORS"):
        return None
    driver = _pip_driver(*INTEL_CPU_RUNTIME)
    if driver is None:
        return None
    if folder is None:
        folder = Path(_own_vendors_folder(driver))
    folder.mkdir(parents=True, exist_ok=True)
    system = Path(os.environ.get("OPENCL_VENDOR_PATH") or "/etc/OpenCL/vendors")
    wanted = {icd.name: icd for icd in (sorted(system.glob("*.icd")) if system.is_dir() else [])}
    ours = "clgrid-intel-cpu.icd"
    for stale in folder.glob("*.icd"):
        if stale.name not in wanted and stale.name != ours:
            stale.unlink(missing_ok=True)
    for name, icd in wanted.items():
        if not ((folder / name).is_symlink() and os.readlink(folder / name) == str(icd)):
            _replace(folder / name, lambda tmp, icd=icd: tmp.symlink_to(icd))
    if not (folder / ours).is_file() or (folder / ours).read_text().strip() != str(driver):
        _replace(folder / ours, lambda tmp: tmp.write_text(f"{driver}\n"))
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    return folder


def _cpu_brand() -> str | None:
    """The CPU's brand string as the kernel reports it (Linux), which Intel's CPU runtime
    gives as its device name; None where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def _icd_library(icd: Path) -> str:
    try:
        return icd.read_text().strip()
    except OSError:
        return ""


def open_only_drivers_for(spec) -> str | None:
    """Before this process first lists the OpenCL platforms, keep from the ICD loader the
    drivers that cannot give the device ``spec`` names, so that their libraries are never
    loaded (each costs memory: Intel's CPU runtime ~86 MiB, a PoCL ~20-60 MiB, measured in
    docs/benchmarks/imaging.md).  For one-device programs such as ``clgrid image --device``:
    the loader reads its vendor list once per process, so a later ``select_device`` of a
    driver left out finds nothing.

    It never changes which device ``select_device(spec)`` picks, and does nothing where
    the user set ``$OCL_ICD_VENDORS`` or ``CLGRID_REGISTER_ICDS=0``, where the platforms were
    already listed, or where ``spec`` is not a string:

    - ``spec`` naming PoCL (a word ``pocl`` or ``portable``) with exactly one PoCL ``.icd``
      among the system's vendors: ``$OCL_ICD_VENDORS`` names that file, which the loader
      (ocl-icd, pyopencl's too) then opens alone.  `devices` keeps the first PoCL platform,
      the system's, so that is the one ``spec`` picks anyway.
    - otherwise, Intel's CPU runtime from pip (registered by `register_pip_icds`) is left
      unregistered when some word of ``spec`` is in none of its names (its platform, vendor,
      the CPU's brand as its device name, "cpu").

    Returns what was done, as a sentence, or None."""
    if (not isinstance(spec, str) or _platforms_listed or _USER_VENDORS
            or os.environ.get("CLGRID_REGISTER_ICDS", "1") == "0"):
        return None
    words = spec.lower().split()
    if words and words[-1].startswith("#"):
        words.pop()
    if not words:
        return None
    system = Path(os.environ.get("OPENCL_VENDOR_PATH") or "/etc/OpenCL/vendors")
    icds = sorted(system.glob("*.icd")) if system.is_dir() else []
    if {"pocl", "portable"} & set(words):
        pocl = [icd for icd in icds if "pocl" in Path(_icd_library(icd)).name.lower()]
        if len(pocl) == 1:
            os.environ["OCL_ICD_VENDORS"] = str(pocl[0])
            return f"OpenCL drivers: only {pocl[0]} (the device asked for is PoCL's)"
    ours = os.environ.get("OCL_ICD_VENDORS")
    brand = _cpu_brand()
    if ours is None or brand is None:
        return None
    intel = " ".join(["intel(r) opencl", "intel(r) corporation", brand, "intel(r) corporation", "all | cpu"]).lower()
    if all(word in intel for word in words):
        return None
    del os.environ["OCL_ICD_VENDORS"]                 # clgrid's own folder: back to the system's vendors
    return f"OpenCL drivers: Intel's CPU runtime left out ({spec!r} cannot name it)"


def _is_pocl(platform) -> bool:
    return "portable computing language" in platform.name.lower()


def devices() -> list:
    """Every OpenCL device on every platform, in platform order, with one PoCL: where
    several PoCL platforms are installed (the system's and the one pyopencl's wheel
    brings), the first one's, since they drive the same host CPU."""
    global _platforms_listed
    _platforms_listed = True
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD at all
        return []
    found, pocl_seen = [], False
    for platform in platforms:
        if _is_pocl(platform):
            if pocl_seen:
                continue
            pocl_seen = True
        try:
            found.extend(platform.get_devices())
        except cl.Error:  # a platform with no devices raises instead of returning []
            continue
    return found


def _description(device) -> str:
    return " ".join([device.platform.name, device.platform.vendor, device.name, device.vendor,
                     cl.device_type.to_string(device.type)]).lower()


def matching_devices(spec: str, found=None) -> list:
    """The devices whose platform and device names, vendors and type contain every word of
    ``spec`` (case-insensitive), in platform order: what ``"spec #k"`` indexes."""
    words = spec.lower().split()
    return [d for d in (devices() if found is None else found) if all(w in _description(d) for w in words)]


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
        if spec is not None and "," in spec:     # several devices (an imaging operator's list): the first
            spec = spec.split(",")[0].strip() or None
    found = devices()
    if not found:
        raise DeviceCapabilityError(
            "no OpenCL device found; install an OpenCL driver or PoCL "
            "(pip install 'clgrid[pocl]')")
    if spec is None:
        gpus = [d for d in found if d.type & cl.device_type.GPU]
        pocl = [d for d in found if _is_pocl(d.platform)]
        return (gpus or pocl or found)[0]
    if not isinstance(spec, str):
        raise TypeError(f"device must be None, a string or a pyopencl Device/Context/CommandQueue, "
                        f"got {type(spec).__name__}")
    words = spec.lower().split()
    index = 0
    if words and words[-1].startswith("#"):      # "gpu #2": the third match (one device per worker)
        if not words[-1][1:].isdigit():
            raise ValueError(f"device {spec!r}: '#' must be followed by a device index, as in 'gpu #1'")
        index = int(words.pop()[1:])
    matches = matching_devices(" ".join(words), found)
    if not matches:
        names = "; ".join(f"{d.platform.name}: {d.name}" for d in found)
        raise DeviceCapabilityError(f"no OpenCL device matches {spec!r}; devices here: {names}")
    if index >= len(matches):
        raise DeviceCapabilityError(f"device {spec!r}: only {len(matches)} OpenCL device(s) match "
                                    f"{' '.join(words)!r} (indices from #0)")
    return matches[index]


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
        # Keep our own reference: Intel's CPU runtime (2026.2) refuses clRetainContext once the
        # context's last user reference is gone, although the queue still holds it, so
        # ``queue.context`` would fail with INVALID_CONTEXT.
        _contexts[key] = context
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
    # Sub-group built-ins (get_sub_group_local_id, sub_group_reduce_add): cl_khr_subgroups,
    # cl_intel_subgroups, or OpenCL C 3.0's optional __opencl_c_subgroups feature (Intel's CPU
    # runtime reports the last two, not the first).
    subgroups: bool = False
    # NVIDIA's compute capability (major, minor), for table entries that match an architecture
    # family (cl_nv_device_attribute_query); () on other devices.
    compute_capability: tuple = ()

    def has(self, extension: str) -> bool:
        return extension in self.extensions


def _opencl_c_features(device) -> set:
    """OpenCL C 3.0 feature macros the device supports (none before OpenCL 3.0)."""
    try:
        return {feature.name for feature in device.opencl_c_features}
    except (cl.Error, AttributeError):
        return set()


def _compute_capability(device, ext) -> tuple:
    if "cl_nv_device_attribute_query" not in ext:
        return ()
    return (device.compute_capability_major_nv, device.compute_capability_minor_nv)


def is_intel_cpu_runtime(facts) -> bool:
    """Whether a device is Intel's OpenCL CPU runtime (for workarounds of its bugs)."""
    return facts.platform.startswith("Intel(R) OpenCL") and "CPU" in facts.type


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
        extensions=ext,
        subgroups=bool({"cl_khr_subgroups", "cl_intel_subgroups"} & set(ext))
        or "__opencl_c_subgroups" in _opencl_c_features(device),
        compute_capability=_compute_capability(device, ext))


try:
    register_pip_icds()
except OSError as exc:  # a read-only cache folder: the pip drivers stay invisible, nothing else changes
    import warnings

    warnings.warn(f"clgrid could not register pip-installed OpenCL drivers: {exc}", stacklevel=2)
