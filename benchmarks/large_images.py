"""Large images on one device (issue 29): time, peak host and device memory, ducc0 beside.

Cases (``--case``; MeerKAT-like tracks at 1.4 GHz as benchmarks/wgridding.py makes them, the
pixel such that the longest baseline is just sampled, so the field grows with the image):

    4k     4096^2,   4 M visibilities (3.1 degrees)      the issue's baseline: not slower
    8k     8192^2,  64 M                 (6.2 degrees)   not slower
    16k    16384^2, 16 M                 (12 degrees)    reused vis2dirty <= 3 s
    dsa    17500^2, 4 x 10^8             (13 degrees)    DSA-2000's call
    32k    32768^2,  4 M                 (25 degrees)    made at all

or ``--npix`` / ``--num-vis`` (and ``--freq``) for another size.  One case a run, in parts
(``--parts``, each well inside 10 minutes on an H100; run a part per command where a
command's time is limited):

    call     one ``clgrid.vis2dirty`` call (operator built, points planned, imaged)
    reused   a `clgrid.WGridder` built once (setup time), then vis2dirty and dirty2vis
             on it, median of ``--repeats``
    ducc0    ducc0.wgridder's vis2dirty and dirty2vis with ``--nthreads``, in a child
             process (the same data, made again from the same seed) stopped after
             ``--ducc0-timeout`` seconds; where it finishes, the relative difference
             between its image and clgrid's
    oracle   errors against ducc0 at epsilon = 1e-12 in double (small cases only)

``--facets`` runs the clgrid parts once per setting ("auto": clgrid's choice; "1x1": one
grid; "4x4": ...).  Memory: peak host memory of each part (the process's VmHWM, reset
before the part, minus its resident size then; and tracemalloc's peak of the host's
numpy work), clgrid's own device buffers at their peak (every pyopencl Buffer clgrid
made, live bytes; pyvkfft's plans not counted) and, where nvidia-smi exists, the GPU's
used memory at its peak less before the part.  The JSON (``--json``) holds every figure.

    python benchmarks/large_images.py --case 16k --device nvidia --nthreads 16 --json out/large_16k.json
    python benchmarks/large_images.py --case 32k --parts call --device nvidia --json out/large_32k_call.json
    python benchmarks/large_images.py --npix 1024 --num-vis 200000 --facets auto,2x2 --device pocl --nthreads 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc

import numpy as np

from clgrid.tools.buffers import BufferTracker

CASES = {"4k": (4096, 4_000_000), "8k": (8192, 64_000_000), "16k": (16384, 16_000_000),
         "dsa": (17500, 400_000_000), "32k": (32768, 4_000_000)}
C = 299792458.0


# -- the data --------------------------------------------------------------------------
def tracks(num_vis: int, freq: float, seed: int = 1, single: bool = True, declination: float = -0.5):
    """uvw (num_vis, 3) metres of MeerKAT tracks over 8 hours (benchmarks/wgridding.py's,
    made a piece of the hour angles at a time), one channel at ``freq``, and random
    visibilities (num_vis, 1), also made a piece at a time."""
    from clgrid.tools import datasets

    layout = datasets.load_layout("meerkat")
    nbl = datasets.baselines(layout)[0].size
    ntime = max(1, -(-num_vis // nbl))
    ha = np.linspace(-np.pi / 3, np.pi / 3, ntime)
    uvw = np.empty((nbl, ntime, 3))
    step = max(1, (1 << 24) // nbl)
    for a in range(0, ntime, step):
        uvw[:, a:a + step] = datasets.simulate_uvw(layout, declination=declination, hour_angles=ha[a:a + step])
    uvw = uvw.reshape(-1, 3)[:num_vis]
    rng = np.random.default_rng(seed)
    real = np.float32 if single else np.float64
    vis = np.empty((num_vis, 1), np.complex64 if single else np.complex128)
    for a in range(0, num_vis, 1 << 24):
        b = min(num_vis, a + (1 << 24))
        vis[a:b, 0].real = rng.standard_normal(b - a, dtype=real)
        vis[a:b, 0].imag = rng.standard_normal(b - a, dtype=real)
    return uvw, np.array([freq]), vis


def pixel_size(uvw, freq) -> float:
    """The longest baseline just sampled (0.9 of Nyquist), as benchmarks/wgridding.py."""
    return 0.9 / (2 * np.abs(uvw[:, :2]).max() * freq[0] / C)


# -- memory --------------------------------------------------------------------------
class GpuMemory:
    """The GPU's used memory (nvidia-smi), sampled every 0.2 s while running: its peak less
    its value at start, or None without nvidia-smi."""

    def __init__(self, index: int = 0):
        self.exe = shutil.which("nvidia-smi")
        self.index = index

    def _used(self):
        out = subprocess.run([self.exe, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i",
                              str(self.index)], capture_output=True, text=True, timeout=10)
        return int(out.stdout.strip().splitlines()[0]) * 2 ** 20

    def __enter__(self):
        self.base = self.peak = self._used() if self.exe else None
        self._stop = threading.Event()
        if self.exe:
            def poll():
                while not self._stop.wait(0.2):
                    try:
                        self.peak = max(self.peak, self._used())
                    except (subprocess.SubprocessError, ValueError, IndexError):
                        pass
            self._thread = threading.Thread(target=poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.exe:
            self._thread.join()
            self.peak = max(self.peak, self._used())
        return False

    @property
    def extra(self):
        return None if self.base is None else self.peak - self.base


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


class HostPeak:
    """The process's peak resident memory over a block less its resident memory at the
    start (VmHWM, reset through /proc/self/clear_refs), and tracemalloc's peak."""

    def __enter__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.reset = True
        except OSError:
            self.reset = False
        self.before = _status("VmRSS")
        tracemalloc.start()
        tracemalloc.reset_peak()
        return self

    def __exit__(self, *exc):
        self.numpy_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        self.peak = _status("VmHWM")
        self.extra = self.peak - self.before if self.reset else None
        return False


def measured(fn, buffers, gpu_index=0):
    """fn()'s result, seconds, and memory figures."""
    buffers.reset()
    with GpuMemory(gpu_index) as gpu, HostPeak() as host:
        t = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t
    return out, seconds, dict(host_peak_gib=host.peak / 2 ** 30,
                              host_extra_gib=None if host.extra is None else host.extra / 2 ** 30,
                              host_numpy_peak_gib=host.numpy_peak / 2 ** 30,
                              device_buffers_peak_gib=buffers.peak / 2 ** 30,
                              gpu_used_extra_gib=None if gpu.extra is None else gpu.extra / 2 ** 30)


# -- the parts -----------------------------------------------------------------------
def parse_facets(text: str):
    if text == "auto":
        return None
    fx, fy = text.lower().split("x")
    return int(fx), int(fy)


def describe(op) -> dict:
    g = op.geometry
    out = dict(grid=[g.nu, g.nv], planes=g.num_planes, support=g.kernel.support, sigma=g.kernel.sigma)
    if getattr(op, "faceted", None) is not None:
        facets = op.faceted.facets
        out["facets"] = len(facets)
        out["facet_pixels"] = [[f.npix_x, f.npix_y] for f in facets]
        if op.faceted.keep:
            out["facet_planes"] = [o.geometry.num_planes for _, o in op.faceted.operators()]
            out["facet_grids"] = [[o.geometry.nu, o.geometry.nv] for _, o in op.faceted.operators()]
    return out


def run_clgrid(a, uvw, freq, vis, pix, res, buffers):
    precision = "single" if a.single else "double"
    rd = np.float32 if a.single else np.float64
    common = dict(epsilon=a.epsilon, do_wgridding=not a.no_w, device=a.device, nthreads=a.nthreads)
    outputs, dirty = {}, None
    for setting in a.facets.split(","):
        try:
            dirty = _run_setting(a, uvw, freq, vis, pix, res, buffers, setting, common, precision, rd, outputs)
        except Exception as exc:            # a setting the device cannot hold (one grid of 32k^2): said, the rest run
            res[f"clgrid_{setting}_refused"] = f"{type(exc).__name__}: {exc}"
            print(f"clgrid_{setting}: {type(exc).__name__}: {exc}", flush=True)
    return outputs, dirty


def _run_setting(a, uvw, freq, vis, pix, res, buffers, setting, common, precision, rd, outputs):
    """One ``--facets`` setting's parts; its outputs into ``outputs``; returns the dirty image
    dirty2vis was given (None without the reused part)."""
    import clgrid

    facets = parse_facets(setting)
    key = f"clgrid_{setting}"
    dirty = None
    if "call" in a.parts:
        clgrid.vis2dirty(uvw=uvw[:1000], freq=freq, vis=vis[:1000], npix_x=64, npix_y=64, pixsize_x=pix * a.npix
                         / 64, pixsize_y=pix * a.npix / 64, **common)          # programs built
        image, seconds, memory = measured(lambda: clgrid.vis2dirty(
            uvw=uvw, freq=freq, vis=vis, npix_x=a.npix, npix_y=a.npix, pixsize_x=pix, pixsize_y=pix,
            facets=facets, **common), buffers, a.gpu_index)
        res[f"{key}_vis2dirty_call_s"] = seconds
        res[f"{key}_vis2dirty_call_memory"] = memory
        outputs[f"{setting}_image"] = image
        print(f"{key} vis2dirty call {seconds:.2f} s {memory}", flush=True)
        del image
    if "reused" in a.parts:
        op, seconds, memory = measured(lambda: clgrid.WGridder(
            uvw, freq, a.npix, a.npix, pix, pix, precision=precision, facets=facets, **common), buffers,
            a.gpu_index)
        res[f"{key}_setup_s"] = seconds
        res[f"{key}_setup_memory"] = memory
        res[f"{key}_geometry"] = describe(op)
        print(f"{key} setup {seconds:.2f} s {res[f'{key}_geometry']}", flush=True)
        dirty = np.random.default_rng(2).standard_normal((a.npix, a.npix), dtype=rd)
        for side, arg in (("vis2dirty", vis), ("dirty2vis", dirty)):
            fn = getattr(op, side)
            out, first, memory = measured(lambda: fn(arg), buffers, a.gpu_index)
            times = [first]
            for _ in range(a.repeats - 1):
                t = time.perf_counter()
                out = fn(arg)
                times.append(time.perf_counter() - t)
            res[f"{key}_{side}_reused_s"] = float(np.median(times))
            res[f"{key}_{side}_reused_all_s"] = times
            res[f"{key}_{side}_reused_memory"] = memory
            outputs[f"{setting}_{side}"] = out
            print(f"{key} {side} reused {np.median(times):.3f} s (all {np.round(times, 3).tolist()}) {memory}",
                  flush=True)
        del op
    return dirty


def ducc0_child(a, workdir):
    """The ducc0 part in a child process: the data made again (same seeds), ducc0's
    outputs written to ``workdir`` as .npy; times on stdout as JSON."""
    code = (f"import sys, json, time, numpy as np; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r});"
            f"import large_images as L; import ducc0.wgridder as wg;"
            f"uvw, freq, vis = L.tracks({a.num_vis}, {a.freq}, single={a.single});"
            f"pix = L.pixel_size(uvw, freq); rd = np.float32 if {a.single} else np.float64;"
            f"kw = dict(uvw=uvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon={a.epsilon},"
            f" do_wgridding={not a.no_w}, nthreads={a.nthreads});"
            f"t = time.perf_counter(); img = wg.vis2dirty(vis=vis, npix_x={a.npix}, npix_y={a.npix}, **kw);"
            f"t1 = time.perf_counter() - t; np.save({os.path.join(workdir, 'image.npy')!r}, img); del img;"
            f"print(json.dumps(dict(ducc0_vis2dirty_s=t1)), flush=True);"
            f"dirty = np.random.default_rng(2).standard_normal(({a.npix}, {a.npix}), dtype=rd);"
            f"t = time.perf_counter(); v = wg.dirty2vis(dirty=dirty, **kw); t2 = time.perf_counter() - t;"
            f"np.save({os.path.join(workdir, 'vis.npy')!r}, v);"
            f"print(json.dumps(dict(ducc0_dirty2vis_s=t2)), flush=True)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=a.ducc0_timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    found = {}
    for line in out.splitlines():
        if line.startswith("{"):
            found.update(json.loads(line))
    if proc.returncode not in (0, None) and not timed_out:
        found["ducc0_error"] = err[-2000:]
    if timed_out:
        found["ducc0_timed_out_after_s"] = a.ducc0_timeout
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=sorted(CASES), default=None)
    p.add_argument("--npix", type=int, default=None)
    p.add_argument("--num-vis", type=int, default=None)
    p.add_argument("--freq", type=float, default=1.4e9)
    p.add_argument("--epsilon", type=float, default=1e-4)
    p.add_argument("--double", dest="single", action="store_false", help="complex128 (default complex64)")
    p.add_argument("--no-w", action="store_true", help="do_wgridding=False")
    p.add_argument("--device", default=None)
    p.add_argument("--gpu-index", type=int, default=0, help="nvidia-smi's index of the device")
    p.add_argument("--nthreads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--facets", default="auto", help='comma-separated: "auto", "1x1", "2x2", ...')
    p.add_argument("--parts", default="call,reused,ducc0", help="comma-separated: call, reused, ducc0, oracle")
    p.add_argument("--ducc0-timeout", type=float, default=420.0)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if a.case:
        npix, num_vis = CASES[a.case]
        a.npix, a.num_vis = a.npix or npix, a.num_vis or num_vis
    if not (a.npix and a.num_vis):
        p.error("give --case, or --npix and --num-vis")
    a.parts = set(a.parts.split(","))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from report import report

    buffers = BufferTracker().install()
    t = time.perf_counter()
    uvw, freq, vis = tracks(a.num_vis, a.freq, single=a.single)
    pix = pixel_size(uvw, freq)
    res = dict(case=a.case, npix=a.npix, num_vis=a.num_vis, field_deg=float(np.degrees(a.npix * pix)),
               epsilon=a.epsilon, single=a.single, w=not a.no_w, nthreads=a.nthreads, facets=a.facets,
               parts=sorted(a.parts), input_gib=(uvw.nbytes + vis.nbytes) / 2 ** 30,
               image_gib=a.npix ** 2 * (4 if a.single else 8) / 2 ** 30, data_s=time.perf_counter() - t,
               date=time.strftime("%Y-%m-%d %H:%M:%S"))
    try:
        res["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        pass
    import clgrid

    res["device"] = clgrid.device.runtime.get_queue(a.device).device.name.strip()
    print(f"{a.npix}^2, {a.num_vis} visibilities, field {res['field_deg']:.1f} deg, input {res['input_gib']:.2f} "
          f"GiB, data made in {res['data_s']:.1f} s, on {res['device']}", flush=True)
    outputs, dirty = run_clgrid(a, uvw, freq, vis, pix, res, buffers)

    def err(x, y):
        x, y = np.asarray(x), np.asarray(y)
        wide = np.complex128 if np.iscomplexobj(x) or np.iscomplexobj(y) else np.float64
        return float(np.linalg.norm(x.astype(wide) - y) / np.linalg.norm(y))

    if "ducc0" in a.parts:
        with tempfile.TemporaryDirectory() as workdir:
            res.update(ducc0_child(a, workdir))
            print({k: v for k, v in res.items() if k.startswith("ducc0")}, flush=True)
            first = a.facets.split(",")[0]
            for name, ours in ((f"{first}_image", "image.npy"), (f"{first}_vis2dirty", "image.npy"),
                               (f"{first}_dirty2vis", "vis.npy")):
                path = os.path.join(workdir, ours)
                if name in outputs and os.path.exists(path):
                    res[f"clgrid_{name}_vs_ducc0"] = err(outputs[name], np.load(path, mmap_mode="r"))
        for side in ("vis2dirty", "dirty2vis"):
            for setting in a.facets.split(","):
                ours = res.get(f"clgrid_{setting}_{side}_reused_s")
                if ours and res.get(f"ducc0_{side}_s"):
                    res[f"ratio_{setting}_{side}_reused"] = ours / res[f"ducc0_{side}_s"]
    if "oracle" in a.parts:
        import ducc0.wgridder as wg

        kw = dict(uvw=uvw, freq=freq, pixsize_x=pix, pixsize_y=pix, epsilon=1e-12, do_wgridding=not a.no_w,
                  nthreads=a.nthreads)
        true_img = wg.vis2dirty(vis=vis.astype(np.complex128), npix_x=a.npix, npix_y=a.npix, **kw)
        for name, value in outputs.items():
            if name.endswith("_image") or name.endswith("_vis2dirty"):
                res[f"clgrid_{name}_error"] = err(value, true_img)
        if dirty is not None:
            true_vis = wg.dirty2vis(dirty=dirty.astype(np.float64), **kw)
            for name, value in outputs.items():
                if name.endswith("_dirty2vis"):
                    res[f"clgrid_{name}_error"] = err(value, true_vis)
    report(res, a.json)


if __name__ == "__main__":
    main()
