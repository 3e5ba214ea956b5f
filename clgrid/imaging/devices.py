"""The devices of one imaging operator (``WGridder(device=[...])``): the list resolved to
one command queue each, checked for what the operator needs before any work is done,
and the host threads that drive them at once.

A device named twice gets a context and queue of its own for each mention after the
first (kept per process, so that programs built there serve later operators): two
queues on one device, which is how the code for several devices is tested on one CPU.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyopencl as cl

from ..device.host_threads import add_counting, in_slices, not_finite, parallel_copy
from ..device.runtime import device_facts, get_queue, select_device
from ..device.tuning import resolve_tuning
from ..errors import DeviceCapabilityError
from ..strategies.base import check_precision
from .geometry import ImageGeometry

__all__ = ["add_at", "first_device", "sample_weight", "sparse_share", "device_list", "queues_for", "check_devices", "share_bytes", "on_devices"]

_extra: dict = {}             # (device, mention k >= 1) -> (context, queue)
_lock = threading.Lock()
_pool = None


def device_list(device) -> list | None:
    """``device`` as a list when it is one (a list or tuple: refused when empty; None where
    ``$CLGRID_DEVICE`` names several devices, separated by commas), else None (one device,
    resolved by the engine)."""
    if device is None:
        named = os.environ.get("CLGRID_DEVICE") or ""
        return [d.strip() for d in named.split(",")] if "," in named else None
    if not isinstance(device, (list, tuple)):
        return None
    if not device:
        raise ValueError("device=[]: an empty list names no device; give one or more devices, or None")
    return list(device)


def queues_for(devices: list) -> list:
    """One command queue per entry of ``devices`` (as ``device=`` takes them); the k-th
    mention (k >= 1) of a device already named gets a context and queue of its own."""
    queues, seen = [], {}
    for i, spec in enumerate(devices):
        if isinstance(spec, (cl.CommandQueue, cl.Context)):
            queues.append(get_queue(spec))
            continue
        try:
            device = select_device(spec)
        except (DeviceCapabilityError, ValueError, TypeError) as error:
            raise type(error)(f"device[{i}] = {spec!r}: {error}") from None
        k = seen[device.int_ptr] = seen.get(device.int_ptr, -1) + 1
        if k == 0:
            queues.append(get_queue(device))
            continue
        with _lock:
            found = _extra.get((device.int_ptr, k))
            if found is None:
                context = cl.Context([device])
                found = _extra[device.int_ptr, k] = (context, cl.CommandQueue(
                    context, device, properties=cl.command_queue_properties.PROFILING_ENABLE))
        queues.append(found[1])
    return queues


def _name(i: int, queue) -> str:
    d = queue.device
    return f"device[{i}] ({d.platform.name.strip()}: {d.name.strip()})"


def share_bytes(num_samples: int, num_kept: int, geometry: ImageGeometry, precision: str) -> tuple:
    """(bytes, the largest buffer) that an engine's share needs on its device at least: the
    caller's values and weights (``num_samples``), the plan and values of its
    ``num_kept`` points, and the padded grid (transients and per-strategy tables not
    counted: a device refused on this would fail anyway)."""
    real = 8 if precision == "double" else 4
    values = num_samples * 3 * real                   # complex values and real weights, as the caller gives them
    plan = num_kept * (16 + 4 * real + 4 + 2 * real)  # first cells, offsets, source index, values in plan order
    grid = geometry.nu * geometry.nv * 2 * real
    return values + plan + grid, grid            # (the values' buffers come in parts where they must)


def check_devices(queues: list, precision: str, needs: list) -> None:
    """Refuse, naming the device, a device that cannot do the operator's ``precision`` or
    whose memory cannot hold its share (``needs``: `share_bytes` per device; None for a
    device given no share)."""
    for i, (queue, need) in enumerate(zip(queues, needs)):
        facts = device_facts(queue.device)
        try:
            check_precision(precision, facts, atomics=True)
        except DeviceCapabilityError as error:
            raise DeviceCapabilityError(f"{_name(i, queue)}: {error}") from None
        if need is None:
            continue
        total, largest = need
        if total > facts.global_memory:
            raise DeviceCapabilityError(f"{_name(i, queue)}: its share of the operator needs at least "
                                        f"{total / 2 ** 30:.2f} GiB of device memory, the device has "
                                        f"{facts.global_memory / 2 ** 30:.2f} GiB; use more devices or a smaller "
                                        f"image")
        if largest > facts.max_allocation:
            raise DeviceCapabilityError(f"{_name(i, queue)}: its share of the operator needs a buffer of "
                                        f"{largest / 2 ** 30:.2f} GiB, the device allocates at most "
                                        f"{facts.max_allocation / 2 ** 30:.2f} GiB at once")


def _threads() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(64, thread_name_prefix="clgrid-device")
        return _pool


def on_devices(calls: list) -> list:
    """Run ``calls`` (functions of no argument, one per device) at once on host threads
    (pyopencl releases the GIL while it waits for a device); their results in order.  The
    first failure, in the calls' order, is raised once all have ended."""
    if len(calls) == 1:
        return [calls[0]()]
    futures = [_threads().submit(call) for call in calls]
    results, errors = [], []
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as error:          # noqa: BLE001 - re-raised below, after the others end
            results.append(None)
            errors.append(error)
    if errors:
        raise errors[0]
    return results


def first_device(device):
    """The device a ``device=`` option (a name, Device, Context, CommandQueue or None, or a
    list or tuple of them) opens first: a list's first entry (None for an empty one)."""
    if isinstance(device, (list, tuple)):
        return device[0] if device else None
    return device


def sparse_share(device=None, tuning=None) -> float:
    """The tuning table's ``[wgridding] sparse_share`` for ``device`` (as `sample_weight`
    takes it), which ``tuning`` may set: below this share of its rows' samples kept, an
    engine's part has its values picked by the host each call."""
    given = {k: v for k, v in dict(tuning or {}).items() if k == "sparse_share"}
    return float(resolve_tuning("wgridding", given, device_facts(select_device(first_device(device))))["sparse_share"])


_WEIGHT_KEYS = {("devices", "vis2dirty"): "split_sample_weight",
                ("devices", "dirty2vis"): "split_sample_weight_dirty2vis",
                ("dask", "vis2dirty"): "dask_split_sample_weight",
                ("dask", "dirty2vis"): "dask_split_sample_weight_dirty2vis"}


def sample_weight(device=None, tuning=None, direction: str = "vis2dirty", over: str = "devices") -> float:
    """How a planes split weighs a sample's taps against a plane's FFT on ``device`` (a
    name, Device, Context or CommandQueue, a list of them: the first; None: the default
    device) in ``direction`` ("vis2dirty" or "dirty2vis"), for the parts it is split
    ``over``: "devices" (a device list's: the tuning table's ``[wgridding]
    split_sample_weight`` or ``split_sample_weight_dirty2vis``) or "dask" (the slab
    tasks of `clgrid.dask`'s planes split: ``dask_split_sample_weight`` or
    ``dask_split_sample_weight_dirty2vis``, where 0 takes the device list's), which
    ``tuning`` (a dict or a tuple of items) may set (`clgrid.imaging.split.slab_bounds`);
    over "dask", a device list's key in ``tuning`` serves where the Dask key is not given
    or is 0 there too."""
    if (over, direction) not in _WEIGHT_KEYS:
        raise ValueError(f"direction must be one of ('vis2dirty', 'dirty2vis') and over one of ('devices', "
                         f"'dask'), got {direction!r}, {over!r}")
    device = select_device(first_device(device))
    given = dict(tuning or {})
    own, lists = _WEIGHT_KEYS[(over, direction)], _WEIGHT_KEYS[("devices", direction)]
    params = resolve_tuning("wgridding", {k: given[k] for k in (own, lists) if k in given}, device_facts(device))
    for key in (own, lists):          # ``tuning``'s first (checked above; a Dask key's 0: on), then the table's
        if key in given and (key == lists or params[key]):
            return float(params[key])
    return float(params[own] or params[lists])


def add_at(target: np.ndarray, values: np.ndarray, index, workers: int = 1, add: bool = True) -> int:
    """``target[index] += values`` (``add``) or ``target[index] = values``, ``index`` None for
    all of ``target`` (1-D arrays; the indices distinct), on ``workers`` host threads: a
    device's share of visibilities put into the caller's.

    Returns
    -------
    not_finite : int
        With ``add``, how many of the sums are inf or NaN (real and imaginary parts apart),
        counted in the same pass (the overflow check of a sum of devices' shares); else 0.
    """
    if index is None:
        if add:
            return add_counting(target, values, workers)
        parallel_copy(target, values, workers)
        return 0
    counts = []

    def share(r):
        at = index[r]
        if not add:
            target[at] = values[r]
            return
        with np.errstate(over="ignore", invalid="ignore"):       # counted below
            written = target[at] + values[r]
        target[at] = written
        counts.append(not_finite(written.view(written.real.dtype) if np.iscomplexobj(written) else written))

    in_slices(workers, values.size, share)
    return sum(counts)
