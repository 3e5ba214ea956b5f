#!/usr/bin/env python3
"""Accuracy and speed of texture interpolation against nearest-sample lookup (seed 004 §4.1, §7).

    python3 benchmarks/texture_study.py --device nvidia --out DIR          # a few minutes on a GPU
    python3 benchmarks/texture_study.py --device pocl --quick --out DIR    # ~1 min on 2 CPU cores

Sky: point sources of known flux at known pixel positions, spread over the inner half of
a wide field (15 degrees on a 256^2 grid) so that w-terms matter: phases w (n - 1) up to
a radian at the outer sources.  Visibilities are exact, V = sum S exp(-2 pi i (u l + v m
+ w (n - 1))), at uniformly random (u, v, w), w up to 300 wavelengths.

Accuracy: the dirty image (`clgrid.imaging.dirty_image`: FFT, norm, grid correction) of
the grid each method makes on the device, against the exact image of the same
visibilities, a direct Fourier transform including the w-term,
I(l, m) = sum V exp(+2 pi i (u l + v m + w (n - 1))) / M, on the central half of the
field: ||I - I_exact||_F / ||I_exact||_F, and the worst flux error at the sources.
Nearest lookup (method "atomic") with oversample 2/4/8/16 and 8/32/128 w-planes against
texture interpolation (method "texture", both samplers) with smaller tables.

Speed: device time (OpenCL profiling, gridding kernel only, median of --repeats after a
warm-up) on more visibilities (--speed-vis) with the same kernel stacks, in million
visibilities and giga grid-point additions per second.  Table last; JSON to
DIR/texture_study.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout runs without installing
import clgrid  # noqa: E402
from clgrid.strategies import spelling  # noqa: E402
from clgrid.tools.bench import device_times, environment  # noqa: E402
from clgrid.imaging import dirty_image  # noqa: E402
from clgrid.device.runtime import get_queue  # noqa: E402
from clgrid.tools.texture_precision import interpolation_precision  # noqa: E402

GRID, CELL, W_MAX, MAX_SUPPORT = 256, 1e-3, 300.0, 24
HALF = GRID // 4                       # the exact image covers the central half of the field
SOURCES = [(0, 0, 1.0), (-40, 25, 0.7), (52, -48, 0.5), (-60, -58, 0.3), (30, 61, 0.9), (-12, -37, 0.4)]


def sky():
    """(l, m, flux) of the point sources, on pixel centres."""
    return [(x * CELL, y * CELL, s) for x, y, s in SOURCES]


def n_minus_1(l, m):
    return np.sqrt(1.0 - l * l - m * m) - 1.0


def visibilities(rng, count):
    du = 1.0 / (GRID * CELL)
    uv_max = 0.9 * (GRID // 2 - MAX_SUPPORT - 1) * du
    uvw = np.column_stack([rng.uniform(-uv_max, uv_max, (count, 2)), rng.uniform(-W_MAX, W_MAX, count)])
    vis = np.zeros(count, np.complex128)
    for l, m, s in sky():
        # the data convention of clgrid.io and ducc0 (docs/user-guide/conventions.md): -w (n - 1)
        vis += s * np.exp(-2j * np.pi * (uvw[:, 0] * l + uvw[:, 1] * m - uvw[:, 2] * n_minus_1(l, m)))
    return uvw, vis


def exact_image(uvw, vis):
    """Direct Fourier transform with the w-term on the central (2 HALF)^2 pixels, [m, l]."""
    pix = np.arange(-HALF, HALF) * CELL
    l, m = np.meshgrid(pix, pix)
    out = np.empty(l.size)
    coords = np.column_stack([l.ravel(), m.ravel(), -n_minus_1(l, m).ravel()])
    for start in range(0, l.size, 512):
        block = coords[start:start + 512]
        out[start:start + 512] = (np.exp(2j * np.pi * (uvw @ block.T)).T @ vis).real / uvw.shape[0]
    return out.reshape(l.shape)


def stack(oversample, planes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # supports capped at MAX_SUPPORT at the largest w
        return clgrid.KernelStack.w_projection(grid_size=GRID, cell_size=CELL, w_max=W_MAX, num_planes=planes,
                                               oversample=oversample, max_support=MAX_SUPPORT)


def configurations(quick):
    nearest = [(os, p) for p in ((8, 32) if quick else (8, 32, 128)) for os in ((2, 4, 8) if quick else (2, 4, 8, 16))]
    texture = [(os, p) for p in ((4, 8) if quick else (4, 8, 16, 32)) for os in (2, 4)]
    rows = [dict(method="atomic", sampler="nearest", oversample=os, planes=p) for os, p in nearest]
    for os, p in texture:
        rows += [dict(method="texture", sampler=s, oversample=os, planes=p) for s in ("image", "software")]
    return rows


def measure(row, queue, accuracy_data, exact, speed_data, repeats):
    kernels = stack(row["oversample"], row["planes"])
    tuning = {"sampler": row["sampler"]} if row["method"] == "texture" else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gridder = clgrid.Gridder(GRID, CELL, kernels, **spelling("grid", row["method"]), device=queue,
                                 tuning=tuning, on_dropped="raise")
    if row["method"] == "texture" and gridder.strategy.tuning["sampler"] != row["sampler"]:
        return dict(row, failed="; ".join(str(w.message) for w in caught))
    uvw, vis = accuracy_data
    grid, report = gridder.grid(uvw, vis[:, None], return_report=True)
    image = dirty_image(grid, kernels, report["norm"])[0]
    c = GRID // 2
    centre = image[c - HALF:c + HALF, c - HALF:c + HALF]
    flux = max(abs(image[c + y, c + x] - s) / s for x, y, s in SOURCES)
    prepared = gridder.prepare(speed_data[0], speed_data[1][:, None])
    seconds = float(np.median(device_times(gridder, prepared, repeats)))
    return dict(row, table_values=int(sum(p.size for p in kernels.planes)), max_support=kernels.max_support,
                image_error=float(np.linalg.norm(centre - exact) / np.linalg.norm(exact)),
                flux_error=float(flux), seconds=seconds, mvis_per_s=prepared.plan.num_kept / seconds / 1e6,
                ggpa_per_s=prepared.grid_point_additions / seconds / 1e9)


def table(rows, precision) -> str:
    lines = [f"{'method':8s} {'sampler':9s} {'os':>3s} {'planes':>6s} {'table':>9s} {'image err':>10s} "
             f"{'flux err':>9s} {'ms':>8s} {'Mvis/s':>8s} {'GGPA/s':>7s}"]
    for r in rows:
        head = f"{r['method']:8s} {r['sampler']:9s} {r['oversample']:3d} {r['planes']:6d}"
        if "failed" in r:
            lines.append(f"{head}  failed: {r['failed'][:80]}")
            continue
        lines.append(f"{head} {r['table_values']:9d} {r['image_error']:10.2e} {r['flux_error']:9.2e} "
                     f"{r['seconds'] * 1e3:8.2f} {r['mvis_per_s']:8.1f} {r['ggpa_per_s']:7.2f}")
    lines.append("interpolation precision of the image sampler (relative Frobenius, float64 reference): "
                 + json.dumps({k: precision[k] for k in ("grid", "degrid")}))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="OpenCL device (default: clgrid's choice)")
    parser.add_argument("--out", default=".", help="folder for texture_study.json")
    parser.add_argument("--quick", action="store_true", help="fewer tables and visibilities (CPU runs)")
    parser.add_argument("--accuracy-vis", type=int, default=None, help="visibilities imaged (20000; quick 4000)")
    parser.add_argument("--speed-vis", type=int, default=None, help="visibilities timed (2 M; quick 20000)")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per row (5; quick 2)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    accuracy_vis = args.accuracy_vis or (4000 if args.quick else 20000)
    speed_vis = args.speed_vis or (20000 if args.quick else 2_000_000)
    repeats = args.repeats or (2 if args.quick else 5)
    queue = get_queue(args.device)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    accuracy_data = visibilities(rng, accuracy_vis)
    speed_data = visibilities(rng, speed_vis)
    exact = exact_image(*accuracy_data)
    print(f"[{time.perf_counter() - started:6.1f} s] exact image of {accuracy_vis} visibilities", file=sys.stderr)
    rows = []
    for row in configurations(args.quick):
        rows.append(measure(row, queue, accuracy_data, exact, speed_data, repeats))
        print(f"[{time.perf_counter() - started:6.1f} s] {row}", file=sys.stderr)
    precision = interpolation_precision(queue)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = dict(grid_size=GRID, cell_size=CELL, w_max=W_MAX, max_support=MAX_SUPPORT, half_width=HALF,
                  sources=SOURCES, accuracy_vis=accuracy_vis, speed_vis=speed_vis, repeats=repeats,
                  seed=args.seed, device=queue.device.name.strip())
    (out / "texture_study.json").write_text(json.dumps(
        {"environment": environment(), "config": config, "rows": rows, "interpolation_precision": precision},
        indent=1, default=float))
    print(table(rows, precision))
    return 0


if __name__ == "__main__":
    sys.exit(main())
