"""`clgrid image` against WSClean on the same Measurement Set with the same options: wall time
and peak memory of each whole command, runs interleaved, medians.

    python benchmarks/imager.py                       # the CPU cases, WSClean where installed
    python benchmarks/imager.py --case gpu --device nvidia --json out/imager_gpu.json

Each case writes its MS once (`clgrid.tools.simulated_ms.write_ms`: MeerKAT tracks, three point
sources) under ``--workdir`` and runs every peer ``--repeats`` times, the order of the peers
rotated from one round to the next:

- ``clgrid``: ``python -m clgrid.tools.cli image MS -o NAME --size N N --scale S --device D`` (uniform
  weighting, Stokes I, w-correction: the defaults, as WSClean's);
- ``clgrid-jN``: the same with ``--parallel-reading N`` (``clgrid-j1``: the MS read in the one
  process, what clgrid image did before reader processes; by default several read a large
  MS on a machine of 4 cores or more);
- ``wsclean``: ``wsclean -size N N -scale S -name NAME MS`` (WSClean 3.1's defaults: its
  w-stacking gridder, uniform weighting, Stokes I, CORRECTED_DATA where present);
- ``wsclean-wgridder``: the same with ``-use-wgridder`` (ducc0's w-gridder inside WSClean);
- ``ducc0``: clgrid image's own pipeline (reading, weighting on the host threads, FITS)
  with ducc0.wgridder on every core in place of `clgrid.WGridder`: the stand-in for
  WSClean where it is not installed (the GPU machine), and a measure of what the device
  changes.

``--ntime``, ``--nchan`` and ``--size`` shrink a case (a dry run of the GPU case on a
laptop; the MS is then written under a name that says so); ``--budget-s`` is the time the
whole script may take: a round is not started when the rounds so far say it would not
end in time (at least one round runs), and the report says how many ran.

A peer that is not installed is left out and said so.  Each run goes through a small wrapper
that measures its wall time and its peak resident memory (the child's ``ru_maxrss``, as
``/usr/bin/time -v`` reports it).  clgrid's own stage times (read, weights and planning,
imaging) are parsed from its output.  Images are compared after the runs: clgrid's against
each peer's, the largest difference over the peak.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from report import report  # noqa: E402

# The cases: the MS (write_ms's keywords) and the image.  "compact": pixels of a third of
# the beam at 1.4 GHz, a field WSClean's w-stacking covers with 8 w-layers (its fast case);
# "wide": a 3.3x larger field at 1.3 GHz (69 w-layers for WSClean); "gpu": 64.5 M
# visibilities (2016 baselines x 1000 integrations x 32 channels) into 4096^2; "large": the
# same array and image, 8.1 M visibilities (250 integrations x 16 channels).
CASES = {
    "compact": dict(ms=dict(ntime=40, nchan=2, freq=(1.40e9, 1.41e9), dec=-0.5, hours=6.0),
                    size=2048, scale="1.5asec", sources=(0.05, 0.2, 0.3)),
    "wide": dict(ms=dict(ntime=40, nchan=2, freq=(1.30e9, 1.31e9), dec=-0.5, hours=6.0),
                 size=2048, scale="5asec", sources=(0.2, 0.9, 1.2)),
    "large": dict(ms=dict(ntime=250, nchan=16, freq=(1.30e9, 1.40e9), dec=-0.5, hours=8.0),
                  size=4096, scale="1.2asec", sources=(0.05, 0.3, 0.6)),
    "gpu": dict(ms=dict(ntime=1000, nchan=32, freq=(1.30e9, 1.40e9), dec=-0.5, hours=8.0),
                size=4096, scale="1.2asec", sources=(0.05, 0.3, 0.6)),
}

# runs a command and prints {"wall": s, "maxrss_kb": peak of the child}
_WRAPPER = ("import json, resource, subprocess, sys, time\n"
            "t = time.perf_counter()\n"
            "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)\n"
            "wall = time.perf_counter() - t\n"
            "print(json.dumps({'wall': wall, 'rc': done.returncode, 'maxrss_kb': "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, 'output': done.stdout[-20000:]}))\n")


def write_case_ms(path: str, case: dict) -> None:
    from clgrid.tools.simulated_ms import PointSource, write_ms

    degrees = [math.radians(d) for d in case["sources"]]
    sources = [PointSource(degrees[0] * 0.6, degrees[0] * 0.8, 1.0),
               PointSource(-degrees[1], degrees[1] * 0.3, 0.5, q=0.05),
               PointSource(degrees[2] * 0.7, -degrees[2] * 0.7, 0.8, v=0.02)]
    started = time.perf_counter()
    made = write_ms(path, sources, **case["ms"])
    print(f"wrote {path}: {made.nrow} rows x {len(made.freqs)} channels x {len(made.correlations)} correlations "
          f"in {time.perf_counter() - started:.1f} s", file=sys.stderr)


def commands(peer: str, ms: str, name: str, case: dict, device: str | None) -> list | None:
    size, scale = str(case["size"]), case["scale"]
    clgrid_args = ["image", ms, "-o", name, "--size", size, size, "--scale", scale, "--overwrite", "--quiet"]
    if device:
        clgrid_args += ["--device", device]
    if peer == "clgrid":
        return [sys.executable, "-m", "clgrid.tools.cli", *clgrid_args]
    if peer.startswith("clgrid-j") and peer[8:].isdigit():
        return [sys.executable, "-m", "clgrid.tools.cli", *clgrid_args, "--parallel-reading", peer[8:]]
    if peer == "ducc0":
        try:
            import ducc0  # noqa: F401
        except ImportError:
            return None
        # the stand-in for WSClean computes its weights on the host, as WSClean does (and never
        # loads an OpenCL runtime)
        return [sys.executable, os.path.abspath(__file__), "--as-ducc0", *clgrid_args, "--weights-on", "host"]
    if shutil.which("wsclean") is None:
        return None
    extra = ["-use-wgridder"] if peer == "wsclean-wgridder" else []
    return ["wsclean", "-quiet", *extra, "-size", size, size, "-scale", scale, "-name", name, ms]


def measure(command: list) -> dict:
    done = subprocess.run([sys.executable, "-c", _WRAPPER, *command], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"wrapper failed: {done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result['rc']}:\n{result['output']}")
    return result


def clgrid_stages(output: str) -> dict:
    """The stage times clgrid image prints."""
    import re

    stages = {}
    for key, pattern in (("opened", r"opened in ([0-9.]+) s"), ("read", r"read in ([0-9.]+) s"),
                         ("weights", r"weights in ([0-9.]+) s"), ("device_wait", r"waited ([0-9.]+) s for"),
                         ("planned", r"planned in ([0-9.]+) s"), ("imaged", r"imaged in ([0-9.]+) s"),
                         ("written", r"wrote \S+ in ([0-9.]+) s"), ("reader_peak_mib", r"peak ([0-9]+) MiB each"),
                         ("run", r"file\(s\) in ([0-9.]+) s")):
        found = re.findall(pattern, output)
        if found:
            stages[key] = sum(float(v) for v in found)
    return stages


def compare_images(ours: str, theirs: str) -> float | None:
    try:
        from astropy.io import fits
    except ImportError:
        return None
    if not (os.path.exists(ours) and os.path.exists(theirs)):
        return None
    a = fits.getdata(ours).astype(np.float64)
    b = fits.getdata(theirs).astype(np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def environment(device: str | None) -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = ""
    wsclean = None
    if shutil.which("wsclean"):
        out = subprocess.run(["wsclean", "--version"], capture_output=True, text=True).stdout
        wsclean = next((line.strip() for line in out.splitlines() if "version" in line.lower()), out.strip())
    try:
        from clgrid.device.runtime import get_queue, select_device

        chosen = select_device(device) if device else get_queue(None).device
        device_name = f"{chosen.platform.name}: {chosen.name.strip()}"
    except Exception as exc:                          # the report still says what ran
        device_name = f"unknown ({exc})"
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
            "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "device": device_name,
            "wsclean": wsclean, "load_average": [round(v, 2) for v in os.getloadavg()],
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}


def shrunk(label: str, case: dict, ntime=None, nchan=None, size=None) -> tuple:
    """The case with ``--ntime``, ``--nchan``, ``--size`` applied, and its MS's file name
    (the case's own unless the MS changes)."""
    ms = dict(case["ms"], **{k: v for k, v in (("ntime", ntime), ("nchan", nchan)) if v})
    name = label if ms == case["ms"] else f"{label}-t{ms['ntime']}-c{ms['nchan']}"
    return dict(case, ms=ms, size=size or case["size"]), f"{name}.ms"


def run_case(label: str, case: dict, workdir: str, peers: list, repeats: int, device: str | None,
             ms_name: str | None = None, deadline: float = math.inf) -> dict:
    ms = os.path.join(workdir, ms_name or f"{label}.ms")
    if not os.path.exists(ms):
        write_case_ms(ms, case)
    available = {p: commands(p, ms, os.path.join(workdir, f"{label}-{p}"), case, device) for p in peers}
    missing = [p for p, c in available.items() if c is None]
    for p in missing:
        print(f"{label}: {p} is not installed here; left out", file=sys.stderr)
    runs = [p for p in peers if available[p] is not None]
    times = {p: [] for p in runs}
    memory = {p: [] for p in runs}
    stages = {}
    longest_round = 0.0
    rounds = 0
    for r in range(repeats):
        if r and time.monotonic() + longest_round > deadline:
            print(f"{label}: {r} of {repeats} rounds: another would pass --budget-s", file=sys.stderr)
            break
        started = time.monotonic()
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        for p in order:
            result = measure(available[p])
            times[p].append(result["wall"])
            memory[p].append(result["maxrss_kb"] / 1024)
            if p.startswith("clgrid"):
                stages.setdefault(p, []).append(clgrid_stages(result["output"]))
            print(f"{label} round {r + 1}/{repeats}: {p} {result['wall']:.2f} s, "
                  f"{result['maxrss_kb'] / 1024:.0f} MiB", file=sys.stderr)
        longest_round = max(longest_round, time.monotonic() - started)
        rounds += 1
    summary = {}
    for p in runs:
        summary[p] = {"median_s": statistics.median(times[p]), "min_s": min(times[p]), "max_s": max(times[p]),
                      "peak_mib_median": statistics.median(memory[p]), "peak_mib_max": max(memory[p]),
                      "runs_s": [round(t, 3) for t in times[p]]}
    for p, found in stages.items():
        keys = dict.fromkeys(k for s in found for k in s)         # a stage some runs print (device_wait)
        summary[p]["stages_median_s"] = {k: statistics.median(s.get(k, 0.0) for s in found) for k in keys}
    if "clgrid" in summary:
        for p in runs:
            if p != "clgrid":
                summary[p]["clgrid_speedup"] = summary[p]["median_s"] / summary["clgrid"]["median_s"]
                summary[p]["clgrid_memory_ratio"] = summary["clgrid"]["peak_mib_median"] / summary[p]["peak_mib_median"]
                difference = compare_images(os.path.join(workdir, f"{label}-clgrid-dirty.fits"),
                                            os.path.join(workdir, f"{label}-{p}-dirty.fits"))
                if difference is not None:
                    summary[p]["image_difference_over_peak"] = difference
    return {"ms": {**case["ms"], "freq": list(case["ms"]["freq"]), "stations": 64, "layout": "meerkat"},
            "image": {"size": case["size"], "scale": case["scale"], "weight": "uniform", "pol": "I"},
            "rounds": rounds,
            "left_out": missing, "peers": summary}


def table(results: dict) -> str:
    lines = ["| case | peer | median s (min-max) | peak MiB | clgrid faster | clgrid memory | image diff / peak |",
             "|---|---|---|---|---|---|---|"]
    for label, result in results.items():
        for peer, s in result["peers"].items():
            lines.append(f"| {label} | {peer} | {s['median_s']:.2f} ({s['min_s']:.2f}-{s['max_s']:.2f}) | "
                         f"{s['peak_mib_median']:.0f} | "
                         f"{s.get('clgrid_speedup', float('nan')):.2f}x | {s.get('clgrid_memory_ratio', float('nan')):.2f}x | "
                         f"{s.get('image_difference_over_peak', float('nan')):.1e} |")
    return "\n".join(lines)


def as_ducc0(argv: list) -> int:
    """``clgrid image`` with ducc0.wgridder on every core in place of `clgrid.WGridder`."""
    from types import SimpleNamespace

    import ducc0

    import clgrid
    from clgrid.tools import cli

    threads = os.cpu_count() or 1

    class Ducc0Gridder:
        def __init__(self, uvw, freq, npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding=False, mask=None,
                     flip_v=False, divide_by_n=True, precision="double", device=None, **ignored):
            self.args = dict(uvw=uvw, freq=freq, mask=mask, npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x,
                             pixsize_y=pixsize_y, epsilon=epsilon, do_wgridding=do_wgridding, flip_v=flip_v,
                             divide_by_n=divide_by_n, nthreads=threads)
            self.planes = range(1)
            self.geometry = SimpleNamespace(kernel=SimpleNamespace(support=0), nu=0, nv=0, num_planes=0)
            self.devices = [SimpleNamespace(name=f"ducc0 {ducc0.__version__} on {threads} threads")]

        def vis2dirty(self, vis, wgt=None, progress=None):
            image = ducc0.wgridder.vis2dirty(vis=vis, wgt=wgt, **self.args)
            if progress is not None:
                progress(1)
            return image

    clgrid.WGridder = Ducc0Gridder
    return cli.main(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--as-ducc0":
        return as_ducc0(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=[*CASES, "cpu", "all"], default="cpu",
                        help="cpu: compact, wide and large (default); gpu: 64.5 M visibilities into 4096^2")
    parser.add_argument("--peers", default="clgrid,wsclean,wsclean-wgridder,ducc0",
                        help="comma-separated, among clgrid, clgrid-jN (N readers), wsclean, wsclean-wgridder, ducc0")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", help="clgrid's device (default: the default device)")
    parser.add_argument("--workdir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "clgrid-imager-bench"))
    parser.add_argument("--json", help="also write the report here")
    parser.add_argument("--ntime", type=int, help="integrations of each case's MS (default: the case's)")
    parser.add_argument("--nchan", type=int, help="channels of each case's MS (default: the case's)")
    parser.add_argument("--size", type=int, help="image side in pixels (default: the case's)")
    parser.add_argument("--budget-s", type=float, default=math.inf,
                        help="seconds the whole script may take (rounds are cut to fit; default: no limit)")
    args = parser.parse_args(argv)
    for name in ("ntime", "nchan", "size", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.size is not None and (args.size < 16 or args.size % 2):
        parser.error(f"--size must be even and at least 16, got {args.size}")
    if not args.budget_s > 0:
        parser.error(f"--budget-s must be positive, got {args.budget_s}")
    deadline = time.monotonic() + args.budget_s
    labels = {"cpu": ["compact", "wide", "large"], "all": list(CASES)}.get(args.case, [args.case])
    os.makedirs(args.workdir, exist_ok=True)
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    load_before = [round(v, 2) for v in os.getloadavg()]
    results = {}
    for label in labels:
        case, ms_name = shrunk(label, CASES[label], args.ntime, args.nchan, args.size)
        results[label] = run_case(label, case, args.workdir, peers, args.repeats, args.device, ms_name, deadline)
    print(table(results), file=sys.stderr)
    report({"environment": {**environment(args.device), "load_average_before": load_before}, "cases": results},
           args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
