"""Where a vis2dirty / dirty2vis call spends its time: the operator's set-up (planning,
correction, programs) and, per call, the device time of each stage summed over the
w-planes (spread or interpolation, FFT, per-plane image work), from profiling events.

    python benchmarks/wgridding_stages.py --device nvidia --num-vis 4000000 --npix 4096 --single
    python benchmarks/wgridding_stages.py --device pocl --num-vis 200000 --npix 1024 --single --repeats 2

With --sweep '[{...}, ...]', only the spread and interpolation device times for each of
those [wgridding] tunings (each on top of --tuning), one operator at a time.

With --cufinufft, also cuFINUFFT's spreading and interpolation (setpts + execute,
gpu_spreadinterponly, the same points on the same grid, each gpu_method) beside
clgrid's 2-D spread and interpolation kernels at the same kernel width (needs cufinufft
and cupy, GPU machine only).
"""

import argparse
import json
import time

import numpy as np

import clgrid
from clgrid.device.transfer import download, upload
from clgrid.imaging.wgridding import WGridder

from wgridding import tracks
from report import report


def median_time(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def event_seconds(events):
    return sum((e.profile.end - e.profile.start) * 1e-9 for e in events if e is not None)


def stage_times(op, repeats):
    """Device seconds of spread / FFT / accumulate summed over the planes (median of repeats)."""
    g, q = op.geometry, op.queue
    planes = [p for p in range(g.num_planes) if op.engine._active(p)]
    out = {"spread_s": [], "interp_s": [], "fft_s": []}
    for _ in range(repeats):
        spread, interp, fft = [], [], []
        for p in planes:
            spread.append(op.engine._launch_spread(p))
            interp.append(op.engine._launch_interp(p))
        q.finish()
        if op.engine.device_fft is not None:
            t = time.perf_counter()
            for p in planes:
                op.engine.device_fft.backward(op.engine._grid)
            q.finish()
            fft.append(time.perf_counter() - t)
        out["spread_s"].append(event_seconds(spread))
        out["interp_s"].append(event_seconds(interp))
        out["fft_s"].append(sum(fft))
    return {k: float(np.median(v)) for k, v in out.items()} | {"active_planes": len(planes)}


def call_parts(op, vis, dirty, repeats):
    """Wall time of the parts of a reused call: values up and gathered, the planes on the
    device (device FFT only), the image down; the same for dirty2vis."""
    e = op.engine
    out = {"values_in_s": median_time(lambda: (e._upload_values(vis, None), e._data_launch(e._gather, False)),
                                      repeats)}
    if op.engine.device_fft is not None:
        out["vis2dirty_planes_s"] = median_time(lambda: e._vis2dirty_device(None), repeats)

        def planes():
            e._dirty2vis_device(dirty)
            op.queue.finish()

        out["dirty2vis_planes_s"] = median_time(planes, repeats)
    out_vis = np.empty(op.shape, e.complex)

    def values_out():
        e._data_launch(e._scatter, False)
        for part in e._parts:
            download(op.queue, part.vis_full, out_vis[part.rows], e.staging)

    out["values_out_s"] = median_time(values_out, repeats)
    return out


def cufinufft_times(op, uvw, freq, repeats):
    """cuFINUFFT spread (type 1) and interpolation (type 2), spreadinterponly, on op's grid."""
    import cupy as cp
    import cufinufft

    g = op.geometry
    u = uvw[:, 0] * freq[0] / 299792458.0
    v = uvw[:, 1] * freq[0] / 299792458.0
    x = cp.asarray(np.mod(2 * np.pi * u * g.pixsize_x + np.pi, 2 * np.pi) - np.pi, dtype=cp.float32)
    y = cp.asarray(np.mod(2 * np.pi * v * g.pixsize_y + np.pi, 2 * np.pi) - np.pi, dtype=cp.float32)
    c = cp.asarray((np.random.default_rng(0).normal(size=len(u)) + 0j).astype(np.complex64))
    eps = 10 ** -(g.kernel.support - 1) * 10     # width ceil(-log10(eps/10)) = support
    rows = {}
    for method in (1, 2, 3):
        for kind in (1, 2):
            if kind == 2 and method == 3:
                continue
            try:
                plan = cufinufft.Plan(kind, (g.nu, g.nv), eps=eps, dtype="complex64", gpu_method=method,
                                      gpu_spreadinterponly=1)
                grid = cp.asarray(np.ones((g.nu, g.nv), np.complex64))

                def call():
                    plan.setpts(x, y)
                    plan.execute(c) if kind == 1 else plan.execute(grid)
                    cp.cuda.runtime.deviceSynchronize()

                def exec_only():
                    plan.execute(c) if kind == 1 else plan.execute(grid)
                    cp.cuda.runtime.deviceSynchronize()

                call()
                rows[f"type{kind}_method{method}_setpts_execute_s"] = median_time(call, repeats)
                rows[f"type{kind}_method{method}_execute_s"] = median_time(exec_only, repeats)
            except Exception as exc:        # a method the build lacks: say so, go on
                rows[f"type{kind}_method{method}"] = repr(exc)
    return rows


def sweep(uvw, freq, kw, tunings, repeats):
    """Spread and interpolation device times (all planes) for each tuning."""
    rows = []
    for tuning in tunings:
        op = WGridder(uvw, freq, **(kw | {"tuning": kw["tuning"] | tuning}))
        row = {"tuning": tuning} | stage_times(op, repeats)
        print(f"{json.dumps(tuning):90s} spread {row['spread_s'] * 1e3:8.3f} ms  interp {row['interp_s'] * 1e3:8.3f} ms",
              flush=True)
        rows.append(row)
        del op
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-vis", type=int, default=4_000_000)
    p.add_argument("--npix", type=int, default=4096)
    p.add_argument("--epsilon", type=float, default=1e-4)
    p.add_argument("--single", action="store_true")
    p.add_argument("--no-w", action="store_true")
    p.add_argument("--device", default=None)
    p.add_argument("--nthreads", type=int, default=0)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--spread", default=None, help="tuning [wgridding] spread: points, tiled or rows")
    p.add_argument("--tuning", default=None, help="more [wgridding] overrides as JSON, e.g. '{\"bin_u\": 64}'")
    p.add_argument("--sweep", default=None, help="a JSON list of [wgridding] tunings to time the spread of")
    p.add_argument("--cufinufft", action="store_true")
    p.add_argument("--profile-setup", action="store_true", help="print where the operator's set-up goes (cProfile)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    uvw, freq = tracks(a.num_vis, 1.4e9)
    uv_max = np.abs(uvw[:, :2]).max() * freq[0] / 299792458.0
    pix = 0.9 / (2 * uv_max)
    cd, rd = (np.complex64, np.float32) if a.single else (np.complex128, np.float64)
    rng = np.random.default_rng(1)
    vis = (rng.normal(size=(len(uvw), 1)) + 1j * rng.normal(size=(len(uvw), 1))).astype(cd)
    dirty = rng.normal(size=(a.npix, a.npix)).astype(rd)
    kw = dict(npix_x=a.npix, npix_y=a.npix, pixsize_x=pix, pixsize_y=pix, epsilon=a.epsilon,
              do_wgridding=not a.no_w, precision="single" if a.single else "double", device=a.device,
              nthreads=a.nthreads, tuning=({"spread": a.spread} if a.spread else {}) | json.loads(a.tuning or "{}"))
    res = {"tuning": kw["tuning"], "num_vis": len(uvw), "npix": a.npix, "epsilon": a.epsilon, "single": a.single, "w": not a.no_w}
    if a.sweep:
        res["sweep"] = sweep(uvw, freq, kw, json.loads(a.sweep), a.repeats)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return
    setup = []
    for _ in range(max(2, a.repeats // 2)):
        t = time.perf_counter()
        op = WGridder(uvw, freq, **kw)
        op.queue.finish()
        setup.append(time.perf_counter() - t)
    res["setup_s"] = float(np.median(setup[1:]))
    if a.profile_setup:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(lambda: WGridder(uvw, freq, **kw).queue.finish())
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    g = op.geometry
    res["device"] = op.queue.device.name
    res["grid"] = [g.nu, g.nv]
    res["support"] = g.kernel.support
    res["planes"] = g.num_planes
    res["spread_mode"], res["fft_mode"] = op.engine.spread_mode, op.engine.fft_mode
    res["vis2dirty_reused_s"] = median_time(lambda: op.vis2dirty(vis), a.repeats)
    res["dirty2vis_reused_s"] = median_time(lambda: op.dirty2vis(dirty), a.repeats)
    res["vis2dirty_call_s"] = median_time(
        lambda: clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, **{k: v for k, v in kw.items() if k != "precision"}),
        max(1, a.repeats // 2))
    res["dirty2vis_call_s"] = median_time(
        lambda: clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=dirty,
                                 **{k: v for k, v in kw.items() if k not in ("precision", "npix_x", "npix_y")}),
        max(1, a.repeats // 2))
    res.update(stage_times(op, a.repeats))
    res.update(call_parts(op, vis, dirty, a.repeats))
    if a.cufinufft:
        res["cufinufft"] = cufinufft_times(op, uvw, freq, a.repeats)
    report(res, a.json)


if __name__ == "__main__":
    main()
