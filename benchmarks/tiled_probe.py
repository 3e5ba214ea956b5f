"""Where the tiled gridder's tile stage spends its time: the rendered kernel, edited.

    python3 benchmarks/tiled_probe.py --device nvidia --scale 0.25 --out DIR

Each mapping ("rows" 16 x 16 tiles, "footprint" 32 x 32) runs on the SKA-like set
(clgrid/benchsets.py, ``--scale`` of its baselines) as it is and with grid_tiled.cl
edited after rendering: "l1" makes every kernel read fall in the first 2048 values
(all cache hits: what the tile stage costs without kernel traffic), "noflush" turns
the tile flushes into no-ops (what the atomic flushes cost).  The grids of the edited
kernels are wrong on purpose; only their times mean something.  Median of 3 runs
after a warm-up, per stage, to DIR/tiled_probe.json.

The bandwidth part reads buffers of 8 MB to 1 GB over and over with a plain coalesced
kernel: the device's read bandwidth from L2 (buffers that fit in it) and from memory.
Every grid-point addition of one polarisation reads one complex kernel value, so the
L2 figure over its size bounds the tile and window launches unless reads hit L1.

    python3 benchmarks/tiled_probe.py --device nvidia --parts bandwidth --out DIR
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid.strategies.base as strategy_base  # noqa: E402
from clgrid.tools import benchsets  # noqa: E402
from clgrid.device import runtime  # noqa: E402
from tiled import planned, time_method  # noqa: E402

TAP = "kernels[(column) + (int)abs((t).off_v0 + (jj) * OVERSAMPLE) * (t).width]"
FLUSH = "{\n    atomic_add_real(grid + 2 * cell, value.x);"
EDITS = {
    "l1": (TAP, "kernels[((column) + (int)abs((t).off_v0 + (jj) * OVERSAMPLE) * (t).width) & 2047]"),
    "noflush": (FLUSH, "{\n    if (value.x != 1.5e-38f) return;\n    atomic_add_real(grid + 2 * cell, value.x);"),
}
MAPPINGS = {
    "rows": dict(mapping="rows", tile_u=16, tile_v=16, regsz=8, shmsz=0, central_radius=-1),
    "footprint": dict(mapping="footprint", tile_u=32, tile_v=32, footprint_wg=32, central_radius=-1),
}


def edited_render(render, edits):
    """``render`` with the named ``edits`` applied to grid_tiled.cl."""
    def render_edited(template, **params):
        source = render(template, **params)
        if template == "grid_tiled.cl":
            for name in edits:
                old, new = EDITS[name]
                if old not in source:
                    raise RuntimeError(f"edit {name!r} no longer matches grid_tiled.cl")
                source = source.replace(old, new)
        return source
    return render_edited


READ_KERNEL = """
__kernel void read_passes(__global const float2 *restrict a, const int n, const int passes,
                          __global float *out)
{
    float2 sum = (float2)(0, 0);
    for (int p = 0; p < passes; ++p)   /* each pass starts elsewhere: no two alike */
        for (int i = get_global_id(0); i < n; i += get_global_size(0))
            sum += a[(i + p * 4096) % n];
    out[get_global_id(0)] = sum.x + sum.y;
}
"""


def read_bandwidth(queue, sizes_mb=(8, 16, 32, 64, 256, 1024), repeats=3):
    """Bytes per second read from a buffer of each size, 2 GB in all per run (median)."""
    kernel = cl.Kernel(cl.Program(queue.context, READ_KERNEL).build(), "read_passes")
    items = 2048 * queue.device.max_compute_units
    out = cl.Buffer(queue.context, cl.mem_flags.WRITE_ONLY, 4 * items)
    rates = {}
    for mb in sizes_mb:
        n = mb * 2 ** 20 // 8
        buffer = cl.Buffer(queue.context, cl.mem_flags.READ_ONLY, 8 * n)
        cl.enqueue_fill_buffer(queue, buffer, np.float32(1), 0, 8 * n)
        passes = max(1, 2048 // mb)
        seconds = []
        for _ in range(repeats + 1):
            event = kernel(queue, (items,), (256,), buffer, np.int32(n), np.int32(passes), out)
            event.wait()
            seconds.append((event.profile.end - event.profile.start) * 1e-9)
        rates[mb] = 8 * n * passes / float(np.median(seconds[1:]))
        print(f"read {mb:5d} MB x {passes:4d}: {rates[mb] / 1e12:6.2f} TB/s", flush=True)
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--scale", type=float, default=0.25, help="fraction of the SKA-like set's baselines")
    ap.add_argument("--grid-size", type=int, default=18000)
    ap.add_argument("--out", default=".")
    ap.add_argument("--parts", nargs="+", choices=("edits", "bandwidth"), default=("edits", "bandwidth"))
    args = ap.parse_args()
    queue = runtime.get_queue(args.device)
    report = dict(device=queue.device.name, scale=args.scale)
    if "bandwidth" in args.parts:
        report["read_bytes_per_s_by_mb"] = read_bandwidth(queue)
    if "edits" in args.parts:
        report.update(edited_kernels(queue, args.scale, args.grid_size))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "tiled_probe.json").write_text(json.dumps(report, indent=1))


def edited_kernels(queue, scale, grid_size) -> dict:
    """Each mapping as is and with EDITS applied; the stage times of each."""
    workload = benchsets.ska_like(scale=scale, grid_size=grid_size)
    plan = planned(workload)
    render = strategy_base.render
    results = []
    for mapping, tuning in MAPPINGS.items():
        for edits in ((), ("l1",), ("noflush",), ("l1", "noflush")):
            strategy_base.render = edited_render(render, edits)
            gridder, result = time_method(workload, queue, "tiled", tuning, 3)
            del gridder
            stages = {k: v * 1e3 for k, v in result["median_s"].items()}
            results.append(dict(mapping=mapping, edits=list(edits), median_ms=stages,
                                tile_gpa_per_s=plan.grid_point_additions / result["median_s"]["tiles"]))
            print(f"{mapping:9s} {'+'.join(edits) or 'as is':11s} tiles {stages['tiles']:8.3f} ms "
                  f"({results[-1]['tile_gpa_per_s'] / 1e9:6.1f} GGPA/s)  total {stages['total']:8.3f} ms", flush=True)
    strategy_base.render = render
    return dict(visibilities=plan.num_kept, results=results)


if __name__ == "__main__":
    main()
