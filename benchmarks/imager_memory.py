"""Where `clgrid image`'s peak resident memory goes: the process at each step, and at the
peak the numpy arrays alive by the clgrid subpackage that made them.

    python benchmarks/imager_memory.py MS --size 2048 --scale 1.5asec --device pocl

Runs `clgrid.imager.run` in this process with `tracemalloc` on (numpy reports its arrays to
it) and a thread sampling the resident set (VmRSS) every 5 ms.  Printed: the resident set
after importing clgrid, after opening the device (``--device``; its OpenCL runtime and every
ICD the loader opens), after each step `run` prints, and its peak; at the peak, the traced
arrays grouped by the deepest clgrid module on their allocation's stack (``imager`` is the
pipeline, ``imaging`` the operator's host side), and what is not traced: the OpenCL
runtime's own memory and, on a CPU device, the operator's device buffers (host memory).
tracemalloc slows the run: read the memory, not the times.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
import tracemalloc


def resident_mib(key: str = "VmRSS") -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return float("nan")


def mapped(top: int = 8) -> list:
    """The largest resident mappings of this process by file (shared libraries), MiB."""
    sizes, name = collections.Counter(), "[anon]"
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                name = parts[5].rsplit("/", 1)[-1] if len(parts) > 5 else "[anon]"
            elif parts and parts[0] == "Rss:":
                sizes[name] += int(parts[1]) / 1024
    return [(k, round(v)) for k, v in sizes.most_common(top)]


def by_module(snapshot) -> dict:
    """MiB of the traced arrays by the deepest ``clgrid/<subpackage>`` frame of their stack."""
    groups = collections.Counter()
    for stat in snapshot.statistics("traceback"):
        owner = "other"
        for frame in reversed(stat.traceback):
            name = frame.filename.replace("\\", "/")
            if "/clgrid/" in name:
                parts = name.rsplit("/clgrid/", 1)[1].split("/")
                owner = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")
                break
        groups[owner] += stat.size / 2 ** 20
    return {k: round(v, 1) for k, v in groups.most_common()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ms")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--scale", required=True)
    parser.add_argument("--device", default=None)
    parser.add_argument("--weights-on", default="auto")
    parser.add_argument("--all-drivers", action="store_true",
                        help="open every OpenCL driver, as before `clgrid image --device` left some out")
    parser.add_argument("--name", default="/tmp/clgrid-imager-memory")
    args = parser.parse_args(argv)
    steps = [("start", resident_mib())]
    import clgrid  # noqa: F401
    from clgrid.device.runtime import get_queue, open_only_drivers_for
    from clgrid.imager import pipeline
    from clgrid.imager.units import parse_angle

    steps.append(("import clgrid", resident_mib()))
    if args.device and not args.all_drivers:         # as `clgrid image --device` does
        steps.append((f"{open_only_drivers_for(args.device)}", resident_mib()))
    get_queue(args.device)
    steps.append(("device opened", resident_mib()))
    tracemalloc.start(30)
    peak = {"rss": 0.0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            rss = resident_mib()
            if rss > peak["rss"] + 8:           # a snapshot where the peak moves up by 8 MiB or more
                peak.update(rss=rss, snapshot=tracemalloc.take_snapshot())
            peak["rss"] = max(peak["rss"], rss)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    options = pipeline.ImagingOptions(ms=args.ms, name=args.name, size=(args.size, args.size),
                                      scale=parse_angle(args.scale, "--scale"), overwrite=True, device=args.device,
                                      weights_on=args.weights_on)
    pipeline.run(options, say=lambda line: steps.append((line.strip()[:70], resident_mib())), quiet=True)
    done.set()
    sampler.join()
    steps.append(("end", resident_mib()))
    steps.append(("libraries at the end (MiB resident): " + ", ".join(f"{k} {v}" for k, v in mapped()), 0))
    traced = by_module(peak["snapshot"]) if "snapshot" in peak else {}
    result = {"steps_mib": [(s, round(m)) for s, m in steps], "peak_mib": round(max(peak["rss"], resident_mib("VmHWM"))),
              "traced_at_peak_mib": traced, "untraced_at_peak_mib": round(peak["rss"] - sum(traced.values()))}
    for step, mib in steps:
        print(f"{mib:7.0f} MiB  {step}", file=sys.stderr)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
