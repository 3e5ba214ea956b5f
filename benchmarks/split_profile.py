"""Where a reused call of an operator over several devices goes, device by device: the
wall seconds of each step of each engine's `dirty2vis` / `vis2dirty` (from the engines'
threads) and of the host's sum, on the "large" set of `devices.py` (64 M visibilities
into 8192^2, slabs of w-planes), against one device in the same run.  ``--timeline``
also prints the last call's steps on each thread as start-end milliseconds from the
call's start, with ``gpu`` the wait for the device's queue before its image or
visibilities come down (a ``finish`` the library does not make: the probe's own).

    python3 benchmarks/split_profile.py --devices nvidia --timeline
    python3 benchmarks/split_profile.py --devices nvidia --variant no-hand-over one-thread-picks

``--variant`` runs this tree with parts of it as they were before (monkeypatched), to
time a change against its absence on one machine: ``no-hand-over`` (the device-FFT
plane loops keep the GIL, `clgrid.device.host_threads.let_others_run` a no-op),
``one-thread-picks`` (a share's values picked on one thread), ``pieces`` (uploads
through the staging's pieces only, never one pinned block).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import defaultdict

import numpy as np

import clgrid
from clgrid.imaging import devices as imaging_devices
from clgrid.device import transfer
from clgrid.imaging import engine as imaging_engine
from devices import SETS, expand, make_set

import clgrid.imaging.wgridding as imaging_wgridding  # noqa: E402
import clgrid.imaging.plane_passes as imaging_passes  # noqa: E402

STEPS = {imaging_engine.ImagingEngine: ["dirty2vis", "vis2dirty", "_dirty2vis_device", "_vis2dirty_device", "_upload_held", "_part_launch",
                                        "_tally_counts", "_gather_values", "_held_values", "_scatter_parts",
                                        "__init__", "_make_part", "_setup_device", "_prefetch_start",
                                        "_prefetch_settle", "_prefetch_taken"],
         imaging_engine: ["download", "count_nonfinite", "host_empty", "plan_arranged", "plan_stacked", "add_at",
                         "plane_regions", "get_queue", "build_program"],
         imaging_passes: ["download", "upload_pinned", "host_empty"],
         imaging_devices: ["add_at"],
         transfer.Staging: ["upload", "download", "_pieces_down"],
         imaging_wgridding: ["first_planes", "plane_counts", "slab_bounds", "check_devices", "queues_for",
                             "device_w_range", "abs_w_range", "choose_geometry", "on_devices", "host_empty",
                             "direction_slabs", "sample_weight", "queues_for"],
         imaging_wgridding.WGridder: ["__init__", "_setup_devices"]}


def _no_hand_over():
    imaging_passes.let_others_run = lambda: None


def _one_thread_picks():
    pick = imaging_engine.pick
    imaging_engine.pick = lambda a, index, out=None, parts=1: pick(a, index, out)


def _pieces():
    transfer.WHOLE_BYTES = 0


VARIANTS = {"no-hand-over": _no_hand_over, "one-thread-picks": _one_thread_picks, "pieces": _pieces}

TIMELINE: list = []      # (thread, step, start, end) of every wrapped call, when asked


def wrap(times, timeline=False):
    if timeline:
        for module, name in ((imaging_passes, "download"), (imaging_engine, "download")):
            original = getattr(module, name)

            def waited(queue, *args, __original=original, **kwargs):
                start = time.perf_counter()
                queue.finish()
                TIMELINE.append((threading.get_ident(), "gpu", start, time.perf_counter()))
                return __original(queue, *args, **kwargs)

            setattr(module, name, waited)
    for owner, names in STEPS.items():
        for name in names:
            original = getattr(owner, name, None)
            if original is None:
                continue

            def timed(*args, __original=original, __name=name, **kwargs):
                start = time.perf_counter()
                try:
                    return __original(*args, **kwargs)
                finally:
                    end = time.perf_counter()
                    times[(threading.get_ident(), __name)].append(end - start)
                    if timeline:
                        TIMELINE.append((threading.get_ident(), __name, start, end))

            setattr(owner, name, timed)


def print_timeline(start: float) -> None:
    """The last call's steps, thread by thread, as start-end ms from ``start``."""
    threads = sorted({t for t, *_ in TIMELINE}, key=lambda t: min(s for tt, _, s, _ in TIMELINE if tt == t))
    for i, t in enumerate(threads):
        steps = sorted((s, e, n) for tt, n, s, e in TIMELINE if tt == t)
        print(f"   timeline thread {i}: " + ", ".join(f"{n} {1e3 * (s - start):.1f}-{1e3 * (e - start):.1f}"
                                                     for s, e, n in steps))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", nargs="+", default=["nvidia"])
    p.add_argument("--set", default="large", choices=tuple(SETS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeline", action="store_true", help="the last call's steps on each thread, in time")
    p.add_argument("--variant", nargs="*", default=[], choices=tuple(VARIANTS),
                   help="parts of the tree as they were before (the module docstring)")
    a = p.parse_args(argv)
    for name in a.variant:
        VARIANTS[name]()
    print(f"variant: {' + '.join(a.variant) or 'this tree'}")
    data = make_set(*SETS[a.set])
    devices = expand(a.devices)
    times = defaultdict(list)
    wrap(times, a.timeline)
    for devs in ([devices[0]], devices):
        build = lambda prefetch=None: clgrid.WGridder(
            data["uvw"], data["freq"], data["npix"], data["npix"], data["pix"], data["pix"], 1e-4, do_wgridding=True,
            precision="single", device=devs if len(devs) > 1 else devs[0], split="planes" if len(devs) > 1 else "auto",
            prefetch=prefetch)
        op = build()
        times.clear()
        walls = []
        for _ in range(a.repeats):              # the set-up of a one call, step by step
            start = time.perf_counter()
            build()
            walls.append(time.perf_counter() - start)
        print(f"{len(devs)} device(s) set-up: {np.median(walls):.4f} s (median of {a.repeats})")
        for i, t in enumerate(sorted({t for t, _ in times})):
            steps = {n: round(float(np.sum(v)) / a.repeats, 4) for (tt, n), v in times.items() if tt == t}
            print(f"   thread {i}: {steps}")
        dirty = op.vis2dirty(data["vis"])
        op.dirty2vis(dirty)
        for name, call in (("vis2dirty", lambda: op.vis2dirty(data["vis"])), ("dirty2vis", lambda: op.dirty2vis(dirty))):
            times.clear()
            walls = []
            for _ in range(a.repeats):
                TIMELINE.clear()
                start = time.perf_counter()
                call()
                walls.append(time.perf_counter() - start)
            print(f"{len(devs)} device(s) {name}: {np.median(walls):.4f} s (median of {a.repeats})")
            if a.timeline:
                print_timeline(start)
            threads = sorted({t for t, _ in times})
            for i, t in enumerate(threads):
                steps = {n: round(float(np.sum(v)) / a.repeats, 4) for (tt, n), v in times.items() if tt == t}
                print(f"   thread {i}: {steps}")
        # one call as `clgrid.vis2dirty` / `dirty2vis` make it (vis2dirty's values sent up
        # during the planning): set-up, first call, the operator dropped (medians of the phases)
        for name in ("vis2dirty", "dirty2vis"):
            phases = []
            for _ in range(a.repeats):
                TIMELINE.clear()
                t0 = time.perf_counter()
                fresh = build({"vis": data["vis"], "wgt": None} if name == "vis2dirty" else None)
                t1 = time.perf_counter()
                fresh.vis2dirty(data["vis"]) if name == "vis2dirty" else fresh.dirty2vis(dirty)
                t2 = time.perf_counter()
                del fresh
                phases.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
            build_s, call_s, drop_s = np.median(np.array(phases), axis=0)
            print(f"{len(devs)} device(s) one {name}: set-up {build_s:.4f} + call {call_s:.4f} + drop {drop_s:.4f} s")
            if a.timeline:
                print_timeline(t0)
        del op
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
