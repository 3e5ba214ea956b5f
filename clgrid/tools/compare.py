"""`clgrid bench --compare`: clgrid beside ducc0 and FINUFFT (and cuFINUFFT on a GPU) on the
data a user images, timed so that a skeptic can check every number.

The data: MeerKAT Earth-rotation tracks (64 dishes, 2016 baselines, 8 hours, declination
-0.5 rad) at 1.4 GHz with their w, pixels at 0.9 of the longest baseline's Nyquist size,
an image of ``npix`` pixels a side, single precision (complex64 visibilities).

Two comparisons, each with what it holds equal:

- **Kernel alone, at equal kernel width** W (W^2 grid-point additions per visibility):
  clgrid's gridding kernel (device time from OpenCL profiling events, for each
  ``method``; its W-projection stack has W-wide kernels on 32 w-planes), ducc0's "gridding
  proper" (its own timer, 2-D, at the epsilon for which it chooses width W), FINUFFT's
  spreader (``spreadinterponly``, at the epsilon for which it chooses W).  Rates are
  G grid-point additions per second, ``visibilities * W^2 / seconds``.
- **Whole call at equal full-image accuracy**: ``clgrid.vis2dirty``, ducc0's
  ``vis2dirty`` (both with w-gridding unless ``w=False``) and, in 2-D only, FINUFFT's
  type-1 transform, each at the largest epsilon (of a ladder of half decades) whose
  image meets ``accuracy``.  The image error is measured on a small case of the same
  geometry (the same image and pixels, every visibility of a few time steps of the same
  tracks) against a direct Fourier transform, on a lattice of pixels spanning the whole
  image, edges and corners included: ``||I - I_dft|| / ||I_dft||``.

Every row names what it times.  *kernel*: the spreading alone; *setup*: what the call
does before it (clgrid: planning, ordering and values on the device; ducc0: its index
and scans; FINUFFT: plan and ``setpts``); *call*: a reused operator's call (what a major
cycle pays); *whole*: one call from host arrays to a host grid or image.  The variants
run interleaved, each once per round after a warm-up round, so that a shared machine's
drifting load falls on all alike; min, median and max over the rounds are kept.  Peers'
versions and threads, the device, and the load average before and after go with the
result.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import peers
from .. import reference
from .benchsets import fixed_support_stack
from .datasets import baselines, load_layout, simulate_uvw
from ..operators.gridder import Gridder, kernel_seconds
from ..planning.host import SPEED_OF_LIGHT
from ..reference import relative_error
from ..device.runtime import device_facts, get_queue
from ..strategies import GRIDDING_METHODS
from ..imaging.wgridding import WGridder

__all__ = ["Tracks", "meerkat_tracks", "lattice", "dft_image", "image_error", "Row", "Comparison",
           "compare", "format_comparison", "write_json", "nearest_methods", "default_methods", "LADDER"]

# clgrid's gridders timed by default: every work distribution with nearest kernel samples
# on a CPU; on a GPU not the one-work-item FPGA pipeline nor the CPU's row bands (a few
# hundred work-items: minutes for what the others do in milliseconds).
CPU_METHODS = ("rows", "fpga", "moving_window", "tiled", "atomic")
GPU_METHODS = ("tiled", "moving_window", "atomic")
# Epsilon ladder, as multiples of the target accuracy, largest (cheapest) first.
LADDER = tuple(10 ** (1 - k / 2) for k in range(9))
FREQUENCY_HZ = 1.4e9
SMALL_CASE_VISIBILITIES = 4000
LATTICE_SIDE = 64
OVERSAMPLE, NUM_PLANES = 8, 32
ERROR_SUBSET = 20000


@dataclass(frozen=True)
class Tracks:
    """Visibilities on tracks: uvw in metres ``(nbaseline, ntime, 3)``, one channel at
    ``freq`` Hz, ``vis`` ``(nbaseline, ntime, 1)`` complex64, imaged on ``npix``^2 pixels of
    ``pixsize`` radians."""

    uvw: np.ndarray
    freq: float
    vis: np.ndarray
    npix: int
    pixsize: float

    @property
    def num_vis(self) -> int:
        return int(np.prod(self.vis.shape[:-1]))

    @property
    def rows(self):
        """``(uvw (nrow, 3) metres, freq (1,), vis (nrow, 1))``: ducc0's and vis2dirty's shapes."""
        return self.uvw.reshape(-1, 3), np.array([self.freq]), self.vis.reshape(-1, 1)

    @property
    def wavelengths(self) -> np.ndarray:
        """uvw in wavelengths, shaped by track (the Gridder's moving window needs tracks)."""
        return self.uvw * (self.freq / SPEED_OF_LIGHT)

    def time_steps(self, count: int) -> "Tracks":
        """``count`` time steps spread over the tracks, every baseline of each: a small case
        of the same geometry (same image, pixels and ranges of u, v and w)."""
        steps = np.unique(np.linspace(0, self.uvw.shape[1] - 1, max(1, count)).round().astype(int))
        return Tracks(self.uvw[:, steps], self.freq, self.vis[:, steps], self.npix, self.pixsize)

    def describe(self) -> dict:
        uvw_wl = self.wavelengths
        return {"dataset": "MeerKAT tracks, 8 h, declination -0.5 rad", "num_vis": self.num_vis,
                "baselines": int(self.uvw.shape[0]), "time_steps": int(self.uvw.shape[1]),
                "frequency_hz": self.freq, "npix": self.npix, "pixsize_rad": self.pixsize,
                "field_deg": math.degrees(self.npix * self.pixsize),
                "max_uv_wavelengths": float(np.abs(uvw_wl[..., :2]).max()),
                "max_abs_w_wavelengths": float(np.abs(uvw_wl[..., 2]).max()), "precision": "single"}


def meerkat_tracks(num_vis: int, npix: int, seed: int = 1) -> Tracks:
    """At least ``num_vis`` visibilities (whole time steps of all 2016 baselines) over 8 hours
    of MeerKAT at 1.4 GHz, pixels at 0.9 of the longest baseline's Nyquist size."""
    layout = load_layout("meerkat")
    ntime = max(1, -(-num_vis // baselines(layout)[0].size))
    uvw = simulate_uvw(layout, declination=-0.5, hour_angles=np.linspace(-np.pi / 3, np.pi / 3, ntime))
    uv_max = np.abs(uvw[..., :2]).max() * FREQUENCY_HZ / SPEED_OF_LIGHT
    rng = np.random.default_rng(seed)
    shape = uvw.shape[:-1] + (1,)
    vis = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return Tracks(uvw, FREQUENCY_HZ, vis, int(npix), 0.9 / (2 * uv_max))


def lattice(npix: int, side: int = LATTICE_SIDE) -> np.ndarray:
    """Pixel indices of a ``side`` x ``side`` lattice over a whole ``npix`` axis, both ends in."""
    return np.unique(np.linspace(0, npix - 1, min(side, npix)).round().astype(int))


def dft_image(tracks: Tracks, do_wgridding: bool, pixels: np.ndarray) -> np.ndarray:
    """The exact dirty image on ``pixels`` x ``pixels`` (ducc0's convention, float64):
    ``Re sum vis exp(+2 pi i (u x + v y - w (n - 1))) / n``, without the w term and ``/ n``
    in 2-D."""
    uvw_m, freq, vis = tracks.rows
    u, v, w = (uvw_m * (freq[0] / SPEED_OF_LIGHT)).T
    x = (pixels - tracks.npix // 2) * tracks.pixsize
    xx, yy = np.meshgrid(x, x, indexing="ij")
    n = np.sqrt(1.0 - xx ** 2 - yy ** 2) if do_wgridding else np.ones_like(xx)
    image = np.zeros(xx.size)
    values = vis[:, 0].astype(np.complex128)
    for start in range(0, u.size, 512):
        s = slice(start, start + 512)
        phase = (np.outer(xx.ravel(), u[s]) + np.outer(yy.ravel(), v[s])
                 - (np.outer((n - 1).ravel(), w[s]) if do_wgridding else 0.0))
        image += (np.exp(2j * np.pi * phase) @ values[s]).real
    return image.reshape(xx.shape) / n


def image_error(image: np.ndarray, exact: np.ndarray, pixels: np.ndarray) -> float:
    """``||I - I_dft|| / ||I_dft||`` on the lattice."""
    return float(np.linalg.norm(image[np.ix_(pixels, pixels)] - exact) / np.linalg.norm(exact))


@dataclass
class Row:
    """One timed variant: which peer, what each named time covers, and the seconds of every
    round (``seconds[name]``); ``info`` holds width, epsilon, errors, threads, version."""

    section: str            # "kernel" or "whole"
    peer: str
    timed: dict             # name -> what it covers
    info: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)

    def stats(self, name: str) -> dict:
        values = self.seconds.get(name) or [float("nan")]
        return {"min": float(np.min(values)), "median": float(np.median(values)), "max": float(np.max(values))}

    def to_json(self) -> dict:
        return dict(asdict(self), summary={name: self.stats(name) for name in self.seconds})


@dataclass
class Variant:
    """A row and how to run it once: ``run()`` returns that round's seconds by name."""

    row: Row
    run: object


@dataclass
class Comparison:
    """What `compare` measured, ready for JSON (`to_json`) and for print (`format_comparison`)."""

    settings: dict
    data: dict
    peers: dict
    kernel: list
    whole: list
    notes: list
    load_average: dict

    def to_json(self) -> dict:
        return {"settings": self.settings, "data": self.data, "peers": self.peers,
                "kernel": [r.to_json() for r in self.kernel], "whole": [r.to_json() for r in self.whole],
                "notes": self.notes, "load_average": self.load_average, "ratios": self.ratios()}

    def ratios(self) -> dict:
        """Each clgrid kernel's rate over ducc0's gridding-proper rate, in the same run."""
        rate = {r.peer: r.info.get("additions", 0) / r.stats("kernel")["median"] for r in self.kernel}
        ducc0 = rate.get("ducc0")
        return {f"{peer} / ducc0 gridding proper": value / ducc0 for peer, value in rate.items()
                if ducc0 and peer.startswith("clgrid")}


def default_methods(facts) -> tuple:
    """The gridders `compare` times when none are named: `CPU_METHODS` or `GPU_METHODS`."""
    return GPU_METHODS if "GPU" in facts.type else CPU_METHODS


def nearest_methods() -> list:
    """clgrid's gridders that read the nearest kernel sample: those the kernel rows can time."""
    return [m for m, strategy in GRIDDING_METHODS.items() if strategy.interpolation == "nearest"]


def _clgrid_kernel(tracks: Tracks, method: str, width: int, queue) -> Variant:
    """clgrid's gridder ``method`` with a W-wide kernel on every w-plane."""
    uvw = tracks.wavelengths
    stack = fixed_support_stack(width // 2, OVERSAMPLE, NUM_PLANES, 1.01 * float(np.abs(uvw[..., 2]).max()))
    gridder = Gridder(tracks.npix, tracks.pixsize, stack, method=method, device=queue, on_dropped="raise")
    facts = device_facts(queue.device)
    row = Row("kernel", f"clgrid {method}", {
        "kernel": "gridding kernels' device time (OpenCL profiling events)",
        "setup": "Gridder.plan(uvw) + prepare(plan, vis): planning, the strategy's order, values on the device",
        "whole": "Gridder.grid(uvw, vis): one call, host arrays in, host grid out (no FFT)"},
        {"width": width, "additions": tracks.num_vis * width ** 2, "device": facts.name,
         "platform": facts.platform, "compute_units": facts.compute_units, "tuning": dict(gridder.strategy.tuning)})
    per_track = int(np.prod(uvw.shape[1:-1]))
    sub = slice(0, max(1, ERROR_SUBSET // per_track))
    row.info["error_vs_reference"] = relative_error(
        gridder.grid(uvw[sub], tracks.vis[sub]),
        reference.grid(uvw[sub], tracks.vis[sub], tracks.npix, tracks.pixsize, stack))

    def run():
        start = time.perf_counter()
        prepared = gridder.prepare(gridder.plan(uvw), tracks.vis)
        queue.finish()
        ready = time.perf_counter()
        events = gridder.execute(prepared)
        events[-1].wait()
        kernel = kernel_seconds(events[1:])
        start_whole = time.perf_counter()
        gridder.grid(uvw, tracks.vis)
        return {"setup": ready - start, "kernel": kernel, "whole": time.perf_counter() - start_whole}

    return Variant(row, run)


def _epsilon_for_width(width_at, width: int) -> tuple:
    """The largest epsilon (half decades from 1e-1 down) at which a library chooses ``width``
    (``width_at(epsilon)``), else the one whose width comes closest: ``(epsilon, its width)``."""
    best = None
    for epsilon in (10 ** (-k / 2) for k in range(2, 15)):
        chosen = width_at(epsilon)
        if best is None or abs(chosen - width) < abs(best[1] - width):
            best = (epsilon, chosen)
        if chosen >= width:
            break
    return best


def _ducc0_kernel(tracks: Tracks, width: int, nthreads: int) -> Variant:
    """ducc0's 2-D gridding at the epsilon for which it chooses ``width`` on this data (its
    choice weighs the number of visibilities too)."""
    uvw, freq, vis = tracks.rows
    epsilon, chosen = _epsilon_for_width(lambda e: peers.ducc0_vis2dirty(uvw, freq, vis, tracks.npix, tracks.pixsize,
                                                                         e, False, nthreads)[2], width)
    row = Row("kernel", "ducc0", {
        "kernel": 'its "gridding proper" timer (verbosity=1)',
        "setup": "its timers " + ", ".join(peers.DUCC0_SETUP_TIMERS),
        "whole": "vis2dirty, 2-D, one call (wall clock: gridding, FFT, correction)"},
        {"width": chosen, "additions": tracks.num_vis * chosen ** 2, "epsilon": epsilon,
         "version": peers.version("ducc0"), "threads": nthreads})
    return Variant(row, lambda: peers.ducc0_vis2dirty(uvw, freq, vis, tracks.npix, tracks.pixsize, epsilon,
                                                      False, nthreads)[1])


def _finufft_kernel(tracks: Tracks, width: int, nthreads: int, gpu: bool = False) -> Variant:
    """FINUFFT's (or cuFINUFFT's) spreader at the epsilon for which it chooses ``width``, onto
    the grid clgrid's rows use."""
    epsilon, chosen = _epsilon_for_width(peers.finufft_width, width)
    uvw, freq, vis = tracks.rows
    fine = tracks.npix          # the grid clgrid's kernel rows grid onto
    name = "cufinufft" if gpu else "finufft"
    row = Row("kernel", name, {
        "kernel": ("execute with gpu_spreadinterponly=1 (CUDA events; points and values already on the GPU)"
                   if gpu else 'its "t1 fancy spread" timer (spread_debug=1): execute with spreadinterponly=1, '
                               'the sorted points spread by subproblems and added to the grid'),
        "setup": "Plan + setpts (its sort of the points)",
        "whole": "Plan + setpts + execute (wall clock)"},
        {"width": chosen, "additions": tracks.num_vis * chosen ** 2, "epsilon": epsilon,
         "fine_grid": fine, "version": peers.version(name), "threads": None if gpu else nthreads})
    if gpu:
        row.info["width_rule"] = "FINUFFT's CPU choice for this epsilon (cuFINUFFT's is not read back)"
        return Variant(row, lambda: peers.cufinufft_spread(uvw, freq, vis, fine, tracks.pixsize, epsilon)[1])
    return Variant(row, lambda: peers.finufft_spread(uvw, freq, vis, fine, tracks.pixsize, epsilon, nthreads)[1])


def _cheapest_epsilon(image_of, small: Tracks, exact: np.ndarray, pixels: np.ndarray, accuracy: float):
    """The largest epsilon of the ladder whose image of ``small`` meets ``accuracy``:
    ``(epsilon or None, its error, [(epsilon, error or why it failed)])``."""
    tried = []
    for factor in LADDER:
        epsilon = accuracy * factor
        try:
            error = image_error(image_of(small, epsilon), exact, pixels)
        except (ValueError, RuntimeError) as exc:   # an epsilon the library refuses: smaller ones too
            tried.append((epsilon, f"{type(exc).__name__}: {exc}"[:200]))
            break
        tried.append((epsilon, error))
        if error <= accuracy:
            return epsilon, error, tried
    errors = [e for _, e in tried if isinstance(e, float)]
    return None, min(errors) if errors else None, tried


@dataclass
class WholePeer:
    """A whole-call peer: its row, its image of a case at an epsilon (for the accuracy
    ladder) and one timed call of the full data at an epsilon (seconds by name)."""

    row: Row
    image: object       # (Tracks, epsilon) -> image (npix, npix)
    timed_call: object  # epsilon -> {name: seconds}


def _clgrid_whole(tracks: Tracks, do_wgridding: bool, queue, nthreads: int) -> WholePeer:
    def operator(case, epsilon):
        uvw, freq, _ = case.rows
        return WGridder(uvw, freq, case.npix, case.npix, case.pixsize, case.pixsize, epsilon, do_wgridding,
                        precision="single", device=queue, nthreads=nthreads)

    def timed_call(epsilon):
        start = time.perf_counter()
        op = operator(tracks, epsilon)
        ready = time.perf_counter()
        op.vis2dirty(tracks.rows[2])
        done = time.perf_counter()
        return {"setup": ready - start, "call": done - ready, "whole": done - start}

    row = Row("whole", "clgrid vis2dirty", {
        "setup": "WGridder(...): planning, kernel tables, program, FFT plan",
        "call": "WGridder.vis2dirty(vis): the reused operator's call (a major cycle's cost)",
        "whole": "setup + call: clgrid.vis2dirty, one call"},
        {"version": peers.version("clgrid"), "device": device_facts(queue.device).name, "threads": nthreads})
    return WholePeer(row, lambda case, epsilon: operator(case, epsilon).vis2dirty(case.rows[2]), timed_call)


def _ducc0_whole(tracks: Tracks, do_wgridding: bool, nthreads: int) -> WholePeer:
    def call(case, epsilon):
        uvw, freq, vis = case.rows
        return peers.ducc0_vis2dirty(uvw, freq, vis, case.npix, case.pixsize, epsilon, do_wgridding, nthreads)

    row = Row("whole", "ducc0", {
        "kernel": 'its "gridding proper" timer (verbosity=1)',
        "setup": "its timers " + ", ".join(peers.DUCC0_SETUP_TIMERS),
        "whole": "vis2dirty, one call (wall clock)"},
        {"version": peers.version("ducc0"), "threads": nthreads})
    return WholePeer(row, lambda case, epsilon: call(case, epsilon)[0], lambda epsilon: call(tracks, epsilon)[1])


def _finufft_whole(tracks: Tracks, nthreads: int, gpu: bool) -> WholePeer:
    def call(case, epsilon):
        uvw, freq, vis = case.rows
        if gpu:
            return peers.cufinufft_type1(uvw, freq, vis, case.npix, case.pixsize, epsilon)
        return peers.finufft_type1(uvw, freq, vis, case.npix, case.pixsize, epsilon, nthreads)

    name = "cufinufft" if gpu else "finufft"
    row = Row("whole", name, {
        "setup": "Plan + setpts", "call": "execute: spreading, FFT, deconvolution (2-D: no w term)",
        "whole": "setup + call" + (" (CUDA events; points and values already on the GPU)" if gpu else "")},
        {"version": peers.version(name), "threads": None if gpu else nthreads})
    return WholePeer(row, lambda case, epsilon: call(case, epsilon)[0], lambda epsilon: call(tracks, epsilon)[1])


def _whole_rows(tracks, small, do_wgridding, accuracy, queue, nthreads, gpu, notes) -> list:
    """The whole-call variants at equal accuracy, each at its cheapest epsilon."""
    candidates = [_clgrid_whole(tracks, do_wgridding, queue, nthreads)]
    if _usable("ducc0"):
        candidates.append(_ducc0_whole(tracks, do_wgridding, nthreads))
    for name, on_gpu in (("finufft", False), ("cufinufft", True)):
        if _usable(name) and (gpu or not on_gpu):
            if do_wgridding:
                notes.append(f"{name}: no whole-call row with w (a type-1 transform has no w term); "
                             f"run with --no-w for its 2-D row")
            else:
                candidates.append(_finufft_whole(tracks, nthreads, on_gpu))
    pixels = lattice(tracks.npix)
    exact = dft_image(small, do_wgridding, pixels)
    variants = []
    for peer in candidates:
        epsilon, error, tried = _cheapest_epsilon(peer.image, small, exact, pixels, accuracy)
        peer.row.info.update(epsilon=epsilon, image_error=error, ladder=tried)
        if epsilon is None:
            notes.append(f"{peer.row.peer} did not reach an image error of {accuracy:g} (best {error}): "
                         f"no timed row")
        else:
            variants.append(Variant(peer.row, lambda p=peer, e=epsilon: p.timed_call(e)))
    return variants


def _usable(name: str) -> bool:
    found = peers.version(name)
    return bool(found) and not found.startswith("unusable")


def _interleaved(variants, repeats: int) -> None:
    """A warm-up round (builds, FFT plans, caches), then ``repeats`` rounds of every variant,
    the order rotated each round; each round's seconds go into its row."""
    for variant in variants:
        variant.run()
    for r in range(repeats):
        k = r % len(variants)
        for variant in variants[k:] + variants[:k]:
            for name, seconds in variant.run().items():
                variant.row.seconds.setdefault(name, []).append(float(seconds))


def compare(num_vis: int = 1_000_000, npix: int = 2048, width: int = 7, accuracy: float = 1e-4,
            methods=None, device=None, repeats: int = 5, do_wgridding: bool = True,
            nthreads: int | None = None, small_visibilities: int = SMALL_CASE_VISIBILITIES) -> Comparison:
    """Run both comparisons (module docstring) and return every row with its rounds.

    ``width`` (odd, clgrid's kernels are 2s + 1 wide) for the kernel rows; ``accuracy`` for
    the whole calls; ``methods`` clgrid's gridders (default: `default_methods` of the device); ``nthreads`` the CPU peers' threads
    (default: every core); ``small_visibilities`` about how many visibilities the small
    case holds.
    """
    if width < 3 or width % 2 == 0:
        raise ValueError(f"width must be odd and >= 3 (clgrid's kernels are 2 * support + 1 wide), got {width}")
    if not 0 < accuracy < 1:
        raise ValueError(f"accuracy must be in (0, 1), got {accuracy}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    queue = get_queue(device)
    methods = default_methods(device_facts(queue.device)) if methods is None else methods
    for method in methods:
        if method not in nearest_methods():
            raise ValueError(f"methods: {method!r} is not a gridding method with nearest kernel samples; "
                             f"choose from {nearest_methods()}")
    load_before = os.getloadavg()
    nthreads = nthreads or os.cpu_count() or 1
    gpu = "GPU" in device_facts(queue.device).type
    tracks = meerkat_tracks(num_vis, npix)
    small = tracks.time_steps(max(1, round(small_visibilities / tracks.uvw.shape[0])))
    notes = []
    kernel = [_clgrid_kernel(tracks, m, width, queue) for m in methods]
    if _usable("ducc0"):
        kernel.append(_ducc0_kernel(tracks, width, nthreads))
    if _usable("finufft"):
        kernel.append(_finufft_kernel(tracks, width, nthreads))
    if gpu and _usable("cufinufft"):
        kernel.append(_finufft_kernel(tracks, width, nthreads, gpu=True))
    for name in ("ducc0", "finufft") + (("cufinufft",) if gpu else ()):
        if not _usable(name):
            notes.append(f"{name}: {peers.version(name) or 'not installed'}; no {name} rows")
    whole = _whole_rows(tracks, small, do_wgridding, accuracy, queue, nthreads, gpu, notes)
    _interleaved(kernel + whole, repeats)
    facts = device_facts(queue.device)
    settings = {"width": width, "accuracy": accuracy, "methods": list(methods), "repeats": repeats,
                "w": do_wgridding, "oversample": OVERSAMPLE, "num_planes": NUM_PLANES,
                "error_measure": f"||I - I_dft|| / ||I_dft|| on a {len(lattice(npix))}^2 lattice over the whole "
                                 f"image, small case of {small.num_vis} visibilities "
                                 f"({small.uvw.shape[1]} time steps of every baseline)",
                "ladder": [f"accuracy x {f:.3g}" for f in LADDER]}
    peer_facts = {"clgrid": {"device": facts.name, "platform": facts.platform, "compute_units": facts.compute_units},
                  **{name: {"version": peers.version(name), "threads": None if name == "cufinufft" else nthreads}
                     for name in ("ducc0", "finufft", "cufinufft")}}
    return Comparison(settings, dict(tracks.describe(), small_case=small.describe()), peer_facts,
                      [v.row for v in kernel], [v.row for v in whole], notes,
                      {"before": list(load_before), "after": list(os.getloadavg())})


def write_json(path, result: Comparison, environment: dict, settings: dict) -> None:
    """The comparison, the environment (`clgrid.tools.bench.environment`) and the command's settings,
    through a temporary file and a rename (never half a file)."""
    path = Path(path)
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps({"environment": environment, "command_settings": settings,
                                "comparison": result.to_json()}, indent=1, default=float))
    os.replace(part, path)


def _ms(stats: dict) -> str:
    return f"{stats['median'] * 1e3:9.2f} ({stats['min'] * 1e3:.2f}-{stats['max'] * 1e3:.2f})"


def format_comparison(result: Comparison) -> str:
    """The comparison as text tables: kernel rows with rates, whole-call rows with epsilons."""
    d, s = result.data, result.settings
    lines = [f"{d['num_vis']:,d} {d['dataset']} visibilities at {d['frequency_hz'] / 1e9:g} GHz, "
             f"{d['npix']}^2 image of {d['field_deg']:.2f} deg, single precision; median (min-max) of "
             f"{s['repeats']} interleaved rounds after a warm-up; load average before "
             f"{result.load_average['before'][0]:.2f}, after {result.load_average['after'][0]:.2f}",
             "", f"Kernel alone at equal width {s['width']} ({s['width']}^2 additions per visibility); "
                 f"clgrid's W-projection stack has {s['num_planes']} w-planes:",
             f"  {'peer':24s} {'width':>5s} {'kernel ms (min-max)':>26s} {'GGPA/s':>7s} "
             f"{'setup ms (min-max)':>26s} {'whole ms (min-max)':>26s}  notes"]
    for row in result.kernel:
        kernel = row.stats("kernel")
        rate = row.info["additions"] / kernel["median"] / 1e9
        extra = (f"error vs reference {row.info['error_vs_reference']:.1e}" if "error_vs_reference" in row.info
                 else f"epsilon {row.info['epsilon']:.2g}, {row.info['threads'] or 'GPU'} threads")
        lines.append(f"  {row.peer:24s} {row.info['width']:>5d} {_ms(kernel):>26s} {rate:7.3f} "
                     f"{_ms(row.stats('setup')):>26s} {_ms(row.stats('whole')):>26s}  {extra}")
    for name, ratio in result.ratios().items():
        lines.append(f"  rate of {name}: {ratio:.2f}")
    lines += _legend(result.kernel)
    lines += ["", f"Whole call at equal full-image accuracy <= {s['accuracy']:g} "
                  f"({'with w' if s['w'] else '2-D'}; {s['error_measure']}):",
              f"  {'peer':24s} {'epsilon':>8s} {'image err':>9s} {'whole ms (min-max)':>26s} "
              f"{'setup ms (min-max)':>26s} {'call or kernel ms':>26s}"]
    for row in result.whole:
        inner = row.stats("call" if "call" in row.seconds else "kernel")
        lines.append(f"  {row.peer:24s} {row.info['epsilon']:8.2g} {row.info['image_error']:9.1e} "
                     f"{_ms(row.stats('whole')):>26s} {_ms(row.stats('setup')):>26s} {_ms(inner):>26s}")
    lines += _legend(result.whole)
    lines += [f"  note: {note}" for note in result.notes]
    return "\n".join(lines)


def _legend(rows) -> list:
    """What each named time of each peer covers (clgrid's gridders share one description)."""
    lines, seen = [], set()
    for row in rows:
        peer = "clgrid" if row.section == "kernel" and row.peer.startswith("clgrid") else row.peer
        if peer not in seen:
            seen.add(peer)
            lines.append(f"  {peer}: " + "; ".join(f"{name} = {what}" for name, what in row.timed.items()))
    return lines
