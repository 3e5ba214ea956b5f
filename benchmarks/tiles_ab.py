"""Tiled and bins, one tree against another (issue 31b: the attempt to make them one strategy): two clgrid trees
measured in turn, in alternating subprocesses, on the same machine.

Each round runs tree A, then tree B (each a fresh process with that tree first on
PYTHONPATH); every number is the median over the rounds of each process's own median
(device time from profiling events, or wall clock), and the table gives B / A.

Cases (the issue's targets in brackets):
- ``tiled``: W-projection tiled gridding, 4 M MeerKAT-track visibilities, 7^2 kernels,
  4096^2 grid, device time of the strategy's kernels [<= 0.85 ms on an H100];
- ``tiled_analytic``: the same with the analytic kernel source (KernelStack.analytic(1e-5));
- ``spread_w4m``: the imaging operator's spread alone, device time summed over the active
  w-planes, 4 M points with w, 4096^2, epsilon 1e-4, single;
- ``w4m``: vis2dirty on a kept operator of the same (wall clock) [<= 45 ms];
- ``spread_flat``: the 2-D spread alone, 4 M points, 7168^2, epsilon 1e-5, single;
- ``interp_w4m``, ``w4m_d2v``: the interpolation alone (points.cl, now reading the stacked
  source through the common names) and a kept operator's dirty2vis, as ``spread_w4m``.

    mkdir -p .ab0 && git archive 713513d clgrid | tar x -C .ab0
    python3 benchmarks/tiles_ab.py --a .ab0 --b . --device nvidia --rounds 3 --json ab.json

``--tuning-a`` / ``--tuning-b '{"spread": ..., ...}'`` pass an imaging tuning to one tree;
``--variants-b '[{...}, ...]'`` then times tree B's spread (the imaging cases only, one
process each, after the rounds) with each of those tunings: a sweep of the merged
strategy's tile parameters beside the rounds' numbers; ``--tiled-variants-b`` the same for
W-projection's tiled case (tunings of [tiled] on top of the table's).  ``--scale 16`` divides the
sizes for a quick check on a CPU device.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

C = 299792458.0
CASES = ("tiled", "tiled_analytic", "spread_w4m", "w4m", "spread_flat", "interp_w4m", "w4m_d2v")


# -- one tree, in its own process ------------------------------------------------------

def tiled(device, repeats: int, scale: int, analytic: bool, tuning=None) -> dict:
    import pyopencl as cl
    import clgrid
    from clgrid.tools.bench import make_workload
    from clgrid.operators.operation import kernel_seconds

    work = make_workload("tracks", 4_000_000 // scale, 4096 // scale, 3)
    kernels = clgrid.KernelStack.analytic(1e-5) if analytic else work.kernels
    uvw = np.ascontiguousarray(work.uvw.reshape(-1, 3))
    vis = np.ascontiguousarray(work.vis.reshape(-1, 1)).astype(np.complex64)
    gridder = clgrid.Gridder(work.grid_size, work.cell_size, kernels, method="tiled", device=device,
                             on_dropped="ignore", tuning=tuning)
    prepared = gridder.prepare(gridder.plan(uvw), vis)
    cl.wait_for_events(gridder.execute(prepared))
    times = []
    for _ in range(repeats):
        events = gridder.execute(prepared)[1:]          # not the grid's zeroing
        cl.wait_for_events(events)
        times.append(1e3 * kernel_seconds(events))
    return {"ms": float(np.median(times)), "min_ms": float(min(times))}


def tracks(num_rows: int):
    from clgrid.tools import datasets

    layout = datasets.load_layout("meerkat")
    nbl = datasets.baselines(layout)[0].size
    ha = np.linspace(-np.pi / 3, np.pi / 3, max(1, num_rows // nbl))
    return datasets.simulate_uvw(layout, declination=-0.5, hour_angles=ha).reshape(-1, 3)[:num_rows]


def imaging_operator(uvw, npix: int, w: bool, epsilon: float, device, tuning):
    import clgrid

    freq = np.array([1.4e9])
    uv_max = np.abs(uvw[:, :2]).max() * freq.max() / C
    pix = 0.9 / (2 * uv_max)
    return clgrid.WGridder(uvw=uvw, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=pix, pixsize_y=pix,
                           epsilon=epsilon, do_wgridding=w, precision="single", device=device, nthreads=16,
                           tuning=tuning)


def spread_ms(op, repeats: int, interp: bool = False) -> dict:
    """Device time of the spread (or interpolation) over the active planes (the operator's
    values and grid as they are)."""
    e = op.engine
    planes = [p for p in range(op.geometry.num_planes) if e._active(p)]
    times = []
    for _ in range(repeats + 1):
        events = []
        for p in planes:
            launched = e._launch_interp(p) if interp else e._launch_spread(p)
            events += [ev for ev in (launched if isinstance(launched, list) else [launched]) if ev is not None]
        op.queue.finish()
        times.append(1e3 * sum((ev.profile.end - ev.profile.start) * 1e-9 for ev in events))
    times = times[1:]
    return {"ms": float(np.median(times)), "min_ms": float(min(times)), "planes": len(planes),
            "spread": e.spread_mode, "kernels": type(e.interpolator if interp else e.spreader).__name__}


def wall_ms(run, repeats: int) -> dict:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(1e3 * (time.perf_counter() - start))
    return {"ms": float(np.median(times)), "min_ms": float(min(times))}


def measure(cases, device, repeats: int, scale: int, tuning, tiled_tuning=None) -> dict:
    import clgrid

    out = {"clgrid_file": clgrid.__file__}
    for case in ("tiled", "tiled_analytic"):
        if case in cases:
            out[case] = tiled(device, repeats, scale, case == "tiled_analytic", tiled_tuning)
    if {"spread_w4m", "w4m", "spread_flat", "interp_w4m", "w4m_d2v"} & set(cases):
        uvw = tracks(4_000_000 // scale)
        rng = np.random.default_rng(1)
        vis = (rng.normal(size=(len(uvw), 1)) + 1j * rng.normal(size=(len(uvw), 1))).astype(np.complex64)
        if {"spread_w4m", "w4m", "interp_w4m", "w4m_d2v"} & set(cases):
            op = imaging_operator(uvw, 4096 // scale, True, 1e-4, device, tuning)
            image = op.vis2dirty(vis)
            out["image_rms"] = float(np.sqrt(np.mean(image.astype(np.float64) ** 2)))
            if "w4m" in cases:
                out["w4m"] = wall_ms(lambda: op.vis2dirty(vis), repeats)
            if "spread_w4m" in cases:
                out["spread_w4m"] = spread_ms(op, repeats)
            if {"interp_w4m", "w4m_d2v"} & set(cases):
                dirty = rng.normal(size=image.shape).astype(np.float32)
                predicted = op.dirty2vis(dirty)
                out["vis_rms"] = float(np.sqrt(np.mean(np.abs(predicted.astype(np.complex128)) ** 2)))
                if "w4m_d2v" in cases:
                    out["w4m_d2v"] = wall_ms(lambda: op.dirty2vis(dirty), repeats)
                if "interp_w4m" in cases:
                    out["interp_w4m"] = spread_ms(op, repeats, interp=True)
            del op
        if "spread_flat" in cases:
            op = imaging_operator(uvw, 7168 // scale, False, 1e-5, device, tuning)
            op.vis2dirty(vis)
            out["spread_flat"] = spread_ms(op, repeats)
    return out


# -- the two trees in turn -------------------------------------------------------------

def run_tree(tree: str, args, tuning, tiled_tuning=None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(tree).resolve())]
                                                      + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    cmd = [sys.executable, __file__, "--one", "--cases", args.cases, "--repeats", str(args.repeats),
           "--scale", str(args.scale)]
    if args.device:
        cmd += ["--device", args.device]
    if tuning:
        cmd += ["--tuning", json.dumps(tuning)]
    if tiled_tuning:
        cmd += ["--tiled-tuning", json.dumps(tiled_tuning)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"tree {tree} failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", default=".ab0", help="tree A (the baseline): a directory holding clgrid/")
    p.add_argument("--b", default=".", help="tree B (this one)")
    p.add_argument("--device", default=None)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--scale", type=int, default=1, help="divide the sizes by this (a quick check)")
    p.add_argument("--tuning-a", default=None, help="imaging tuning (JSON) for tree A")
    p.add_argument("--tuning-b", default=None, help="imaging tuning (JSON) for tree B")
    p.add_argument("--variants-b", default=None, help="JSON list of imaging tunings: tree B's spread with each")
    p.add_argument("--json", default=None)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tuning", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tiled-tuning", default=None, help=argparse.SUPPRESS)
    p.add_argument("--tiled-variants-b", default=None,
                   help="JSON list of W-projection [tiled] tunings: tree B's tiled case with each")
    a = p.parse_args(argv)
    cases = a.cases.split(",")
    unknown = set(cases) - set(CASES)
    if unknown:
        p.error(f"unknown cases {sorted(unknown)}; choose from {list(CASES)}")
    if a.one:
        print(json.dumps(measure(cases, a.device, a.repeats, a.scale, json.loads(a.tuning) if a.tuning else None,
                                 json.loads(a.tiled_tuning) if a.tiled_tuning else None)))
        return 0
    tuning_a = json.loads(a.tuning_a) if a.tuning_a else None
    tuning_b = json.loads(a.tuning_b) if a.tuning_b else None
    runs = {"A": [], "B": []}
    for r in range(a.rounds):
        for name, tree, tuning in (("A", a.a, tuning_a), ("B", a.b, tuning_b)):
            runs[name].append(run_tree(tree, a, tuning))
            print(f"round {r + 1} {name}: " + ", ".join(f"{c} {runs[name][-1][c]['ms']:.3f} ms"
                                                       for c in cases if c in runs[name][-1]), flush=True)
    summary = {}
    print(f"\n{'case':<16}{'A ms':>10}{'B ms':>10}{'B / A':>8}   (median over {a.rounds} rounds; "
          f"A = {a.a}, B = {a.b})")
    for c in cases:
        med = {k: float(np.median([run[c]["ms"] for run in v])) for k, v in runs.items()}
        summary[c] = dict(med, ratio=med["B"] / med["A"])
        print(f"{c:<16}{med['A']:>10.3f}{med['B']:>10.3f}{med['B'] / med['A']:>8.3f}")
    for c in ("spread_w4m", "spread_flat", "interp_w4m"):
        if c in cases:
            print(f"{c} kernels: A {runs['A'][0][c]['kernels']}, B {runs['B'][0][c]['kernels']}")
    variants = []
    spread_cases = [c for c in cases if c.startswith("spread_")]
    for tuning in (json.loads(a.variants_b) if a.variants_b and spread_cases else []):
        one = argparse.Namespace(**{**vars(a), "cases": ",".join(spread_cases)})
        try:
            got = run_tree(a.b, one, {**(tuning_b or {}), **tuning})
        except SystemExit as exc:
            got = {"failed": str(exc)}
        variants.append({"tuning": tuning, **got})
        print(f"B {json.dumps(tuning)}: " + ", ".join(f"{c} {got[c]['ms']:.3f} ms (min {got[c]['min_ms']:.3f})"
                                                     for c in spread_cases if c in got) + got.get("failed", ""),
              flush=True)
    tiled_cases = [c for c in cases if c.startswith("tiled")]
    for tuning in (json.loads(a.tiled_variants_b) if a.tiled_variants_b and tiled_cases else []):
        one = argparse.Namespace(**{**vars(a), "cases": ",".join(tiled_cases)})
        try:
            got = run_tree(a.b, one, None, tuning)
        except SystemExit as exc:
            got = {"failed": str(exc)}
        variants.append({"tiled_tuning": tuning, **got})
        print(f"B tiled {json.dumps(tuning)}: " + ", ".join(f"{c} {got[c]['ms']:.3f} ms (min {got[c]['min_ms']:.3f})"
                                                           for c in tiled_cases if c in got) + got.get("failed", ""),
              flush=True)
    for c in ("image_rms", "vis_rms"):
        if c in runs["A"][0]:
            print(f"{c}: A {runs['A'][0][c]:.6g}, B {runs['B'][0][c]:.6g}")
    out = {"a": a.a, "b": a.b, "tuning_a": tuning_a, "tuning_b": tuning_b, "device": a.device, "summary": summary, "runs": runs, "variants_b": variants}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
