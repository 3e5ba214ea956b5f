"""Where an imaging operator's set-up goes, stage by stage, with uvw on the host and on the
device (issue 31: "an operator's set-up for 4 M points in 2-D <= 5 ms"), and the 4 M /
4096^2 with-w one call and reused vis2dirty; for this tree and, with ``--baseline``, a
baseline tree in the same run (each in its own process, in turn, the baseline first; each
prints as it goes, with the seconds elapsed).

4 M MeerKAT-track visibilities, epsilon 1e-4, single, in 2-D (7168^2) and with w (4096^2),
as `setup_profile.py`.  Set-up: the median wall time of ``--repeats`` `clgrid.WGridder`
constructions (after two), queue finished; "device uvw": uvw given as a
`pyopencl.array.Array` already on the device (a tree without that prints n/a).  Stages:
each stage's wall time with the queue drained before and after it, so that the device
work a stage enqueues is counted in that stage (nesting as indentation).

    mkdir .ab0 && git archive 713513d clgrid | tar x -C .ab0
    python3 benchmarks/setup_stages.py --device nvidia --repeats 15 --stage-repeats 5 --baseline .ab0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# (module, attribute, label): callables wrapped by a drained timer (missing ones are skipped)
STAGES = [
    ("clgrid.imaging.wgridding", "check_devices", "check devices"),
    ("clgrid.imaging.wgridding", "abs_w_range", "w range (host)"),
    ("clgrid.imaging.wgridding", "device_w_range", "w range (device)"),
    ("clgrid.imaging.wgridding", "choose_geometry", "geometry"),
    ("clgrid.imaging.wgridding", "faceted_operator", "facets"),
    ("clgrid.imaging.wgridding", "ImagingEngine", "engine"),
    ("clgrid.imaging.engine", "PixelModel", "pixel model"),
    ("clgrid.imaging.engine.ImagingEngine", "_make_part", "part"),
    ("clgrid.imaging.engine", "plan_stacked", "plan"),
    ("clgrid.imaging.engine", "plan_arranged", "plan and arrange (fused)"),
    ("clgrid.planning.plan", "upload", "uvw upload"),
    ("clgrid.planning.fused", "upload", "uvw upload"),
    ("clgrid.planning.plan", "stacked_program", "planning program"),
    ("clgrid.planning.plan", "ExclusiveScan", "scan (make)"),
    ("clgrid.planning.stacking", "CountingSort", "counting sort (make)"),
    ("clgrid.strategies.bins.BinsGridding", "arrange", "arrange (bins)"),
    ("clgrid.strategies.stacked", "arrange", "arrange (sort, take)"),
    ("clgrid.planning.stacking", "every_nth", "table download"),
    ("clgrid.strategies.bins", "every_nth", "jobs download"),
    ("clgrid.planning.fused", "read_tables", "tables download"),
    ("clgrid.imaging.engine.ImagingEngine", "_setup_data", "values kernels"),
    ("clgrid.imaging.engine.ImagingEngine", "_setup_planes", "plane kernels"),
    ("clgrid.imaging.engine", "DeviceFFT", "device FFT"),
    ("clgrid.imaging.engine", "plane_regions", "plane regions"),
    # within the fused planning and the bins' tables: each kernel and scan, drained
    ("clgrid.strategies.bins.BinsGridding", "add_tables", "bins tables"),
    ("clgrid.planning.stacking.PointPlan", "wait_ready", "wait for the tables"),
    ("clgrid.device.scan.ExclusiveScan", "__call__", "scan"),
    ("clgrid.planning.fused", "launch", None),
    ("clgrid.strategies.bins", "launch", None),
    ("clgrid.device.scan", "launch", None),
]


def _label(label, args) -> str:
    """A stage's label; None: a `launch`, named by its kernel."""
    if label is not None:
        return label
    try:
        return f"kernel {args[0].function_name}"
    except Exception:
        return "kernel"


def wrap_stages(queue, times: dict, depth: list):
    """Replace each stage's callable by one that drains ``queue`` and records its time."""
    import importlib

    for where, name, label in STAGES:
        try:
            try:
                owner = importlib.import_module(where)
            except ImportError:                       # module.Class
                module, cls_name = where.rsplit(".", 1)
                owner = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError):
            continue
        original = getattr(owner, name, None)
        if original is None:
            continue

        def timed(*args, __original=original, __label=label, **kwargs):
            queue.finish()
            __label = _label(__label, args)
            depth.append(__label)
            start = time.perf_counter()
            try:
                return __original(*args, **kwargs)
            finally:
                queue.finish()
                times[(len(depth), __label)].append(time.perf_counter() - start)
                depth.pop()

        setattr(owner, name, timed)


def _median_ms(make, repeats: int, warm: int = 2) -> tuple:
    for _ in range(warm):
        make()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        make()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times)), 1e3 * min(times)


def _text(value) -> str:
    return f"{value[0]:8.2f} ms  (min {value[1]:.2f})" if isinstance(value, (list, tuple)) else str(value)


def measure(a) -> dict:
    """This process's clgrid (whichever is first on the path): every figure, printed as it
    comes (a run cut short keeps what it printed) and returned as a dict."""
    import pyopencl.array as cla

    import clgrid
    from clgrid.device.runtime import get_queue
    from engine_ab import C, tracks

    began = time.perf_counter()

    def say(text: str) -> None:
        print(f"{text}", flush=True)

    out = {"clgrid": clgrid.__file__, "setup": {}, "stages": {}}
    uvw = tracks(a.rows)
    freq = np.array([1.4e9])
    pix = 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq.max() / C)
    queue = get_queue(a.device)
    out["device"] = queue.device.name.strip()
    say(f"== {out['clgrid']} on {out['device']} ({a.rows} points made in {time.perf_counter() - began:.1f} s)")
    uvw_d = cla.to_device(queue, uvw)
    try:                                   # a tree without device uvw: not tried (its numpy would read the
        import clgrid.planning.device_points  # noqa: F401   array one element at a time: minutes)
        kinds = (("device uvw", uvw_d), ("host uvw", uvw))
    except ImportError:
        kinds = (("host uvw", uvw),)
        for label in ("2-D", "with w"):
            out["setup"][f"{label}, device uvw"] = "n/a (this tree takes no device uvw)"
    times, depth = defaultdict(list), []
    cases = [("2-D", False, 7168), ("with w", True, 4096)]
    say(f"set-up, {a.rows} points (median of {a.repeats} after 2; min):")
    for label, w, npix in cases:
        for where, points in kinds:
            kw = dict(uvw=points, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4,
                      do_wgridding=w, precision="single", device=queue, nthreads=16)
            key = f"{label}, {where}"
            try:
                out["setup"][key] = _median_ms(lambda: clgrid.WGridder(**kw).queue.finish(), a.repeats)
            except Exception as exc:             # a tree without device uvw
                out["setup"][key] = f"n/a ({type(exc).__name__}: {str(exc)[:80]})"
            say(f"  {key:<22s} {_text(out['setup'][key])}   [{time.perf_counter() - began:.0f} s]")
    # the 4 M / 4096^2 with-w calls (before the stage wrappers)
    rng = np.random.default_rng(1)
    vis = (rng.normal(size=(len(uvw), 1)) + 1j * rng.normal(size=(len(uvw), 1))).astype(np.complex64)
    kw = dict(freq=freq, npix_x=4096, npix_y=4096, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4, do_wgridding=True,
              device=queue, nthreads=16)
    say("4 M / 4096^2 with w, single (median after 2; min):")
    op = clgrid.WGridder(uvw=uvw, precision="single", **kw)
    out["reused vis2dirty"] = _median_ms(lambda: op.vis2dirty(vis), a.repeats)
    say(f"  {'reused vis2dirty':<32s} {_text(out['reused vis2dirty'])}")
    del op
    out["one call vis2dirty, host uvw"] = _median_ms(lambda: clgrid.vis2dirty(uvw=uvw, vis=vis, **kw), a.calls)
    say(f"  {'one call vis2dirty, host uvw':<32s} {_text(out['one call vis2dirty, host uvw'])}")
    if len(kinds) > 1:
        out["one call vis2dirty, device uvw"] = _median_ms(lambda: clgrid.vis2dirty(uvw=uvw_d, vis=vis, **kw),
                                                           a.calls)
    else:
        out["one call vis2dirty, device uvw"] = "n/a (this tree takes no device uvw)"
    say(f"  {'one call vis2dirty, device uvw':<32s} {_text(out['one call vis2dirty, device uvw'])}"
        f"   [{time.perf_counter() - began:.0f} s]")
    if not a.stage_repeats:
        return out
    # the stages, drained (last: the wrappers stay)
    wrap_stages(queue, times, depth)
    for label, w, npix in cases:
        for where, points in kinds:
            kw = dict(uvw=points, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix, epsilon=1e-4,
                      do_wgridding=w, precision="single", device=queue, nthreads=16)
            key = f"{label}, {where}"
            if not isinstance(out["setup"][key], tuple) or (a.stage_cases and key not in a.stage_cases):
                continue
            clgrid.WGridder(**kw).queue.finish()
            times.clear()
            n = a.stage_repeats
            drained = _median_ms(lambda: clgrid.WGridder(**kw).queue.finish(), n, warm=0)
            rows = [("drained between stages", 0, drained[0], n)]
            for (level, stage), ts in times.items():
                per_call = np.asarray(ts).reshape(n, -1).sum(axis=1) if len(ts) % n == 0 else ts
                rows.append((stage, level, 1e3 * float(np.median(per_call)), len(ts)))
            out["stages"][key] = rows
            say(f"stages, {key} (each drained; median of {n} set-ups)   [{time.perf_counter() - began:.0f} s]:")
            for stage, level, ms, calls in rows:
                say(f"  {'  ' * level}{stage:<30s} {ms:8.2f} ms  ({calls} calls)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--rows", type=int, default=4_000_000)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--calls", type=int, default=5, help="one calls timed (median)")
    p.add_argument("--stage-repeats", type=int, default=5, help="drained set-ups for the stage split (0: none)")
    p.add_argument("--stage-cases", default="", help="the cases split into stages, separated by ';' "
                   "(e.g. '2-D, device uvw'; default: all)")
    p.add_argument("--baseline", default=None, help="a tree holding clgrid/ to measure too, e.g. .ab0")
    p.add_argument("--json", default=None)
    p.add_argument("--one-tree", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.stage_cases = [c.strip() for c in a.stage_cases.split(";") if c.strip()]
    if a.one_tree:
        sys.path.insert(0, str(HERE))
        Path(a.one_tree).write_text(json.dumps(measure(a)))
        return 0
    # the baseline first (shorter: it has no device uvw), then this tree
    trees = ([("baseline", str(Path(a.baseline).resolve()))] if a.baseline else []) + [("this tree", str(HERE.parent))]
    results = {}
    for name, tree in trees:
        print(f"=== {name}: {tree}", flush=True)
        env = dict(os.environ, PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""))
        target = Path(tempfile.mkdtemp()) / "result.json"
        args = [sys.executable, __file__, "--one-tree", str(target), "--rows", str(a.rows), "--repeats",
                str(a.repeats), "--calls", str(a.calls), "--stage-repeats", str(a.stage_repeats),
                "--stage-cases", ";".join(a.stage_cases)] + \
            (["--device", a.device] if a.device else [])
        if subprocess.run(args, env=env).returncode or not target.is_file():
            print(f"=== {name} failed", flush=True)
            continue
        results[name] = json.loads(target.read_text())
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
