"""Draw the benchmark pages' plots from the raw results in docs/results/ into
docs/benchmarks/img/.  ``python docs/scripts/plots.py`` (needs matplotlib, the ``plots``
extra).  Each function names the JSON it reads and the page that shows its plot; a plot
whose results are missing is skipped with a message.  ``clgrid bench --plots DIR`` draws
the throughput plots of a bench run itself (the PNGs in docs/)."""

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent
RESULTS = DOCS / "results"
IMG = DOCS / "benchmarks" / "img"


def load(name):
    return json.loads((RESULTS / name).read_text())


def save(fig, name):
    IMG.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(IMG / name, dpi=90)
    plt.close(fig)
    print("wrote", IMG / name)


def bars(ax, groups, series, values, colours, log=False, unit=""):
    """Grouped bars: values[s][g] for series s and group g, each labelled with its value."""
    width = 0.8 / len(series)
    for i, (name, colour) in enumerate(zip(series, colours)):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ys = values[i]
        drawn = ax.bar(xs, [y if y is not None else 0 for y in ys], width, label=name, color=colour)
        for rect, y in zip(drawn, ys):
            if y is not None:
                ax.annotate(f"{y:.3g}{unit}", (rect.get_x() + rect.get_width() / 2, rect.get_height()),
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def cufinufft_h100():
    """kernels.md: the 2-D spread and interpolation against cuFINUFFT (wgridding_stages_2d_h100.json)."""
    d = load("wgridding_stages_2d_h100.json")
    c = d["cufinufft"]
    best1 = min((c[f"type1_method{m}_setpts_execute_s"], m) for m in (1, 2, 3))
    best2 = min((c[f"type2_method{m}_setpts_execute_s"], m) for m in (1, 2) if f"type2_method{m}_setpts_execute_s" in c)
    values = [[d["spread_s"] * 1e3, d["interp_s"] * 1e3],
              [best1[0] * 1e3, best2[0] * 1e3],
              [c[f"type1_method{best1[1]}_execute_s"] * 1e3, c[f"type2_method{best2[1]}_execute_s"] * 1e3]]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    bars(ax, ["spread (type 1)", "interpolate (type 2)"],
         ["clgrid (plan made once)", "cuFINUFFT setpts + execute", "cuFINUFFT execute alone"], values,
         ["#1f77b4", "#ff7f0e", "#ffbb78"], unit=" ms")
    ax.set_ylabel("ms, device time (median of 7)")
    ax.set_title(f"H100, {d['num_vis'] / 1e6:.1f} M points, width {d['support']}, 2-D, single", fontsize=10)
    save(fig, "cufinufft_h100.png")


def moving_window_h100():
    """kernels.md: the moving window against atomic on the LOFAR-like set (moving_window_h100.json)."""
    d = load("moving_window_h100.json")
    k = [s["kernel"] for s in d["sweep"]]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(k, [s["moving_window"]["gpa_per_s"] / 1e9 for s in d["sweep"]], "o-", label="moving_window")
    ax.plot(k, [s["atomic"]["gpa_per_s"] / 1e9 for s in d["sweep"]], "s-", label="atomic (same process)")
    ax.axhline(2000, color="grey", ls=":", label="issue 5's target")
    ax.set_xscale("log", base=2)
    ax.set_xticks(k, [f"{x}²" for x in k])
    ax.set_xlabel("kernel")
    ax.set_ylabel("G grid-point additions / s")
    ax.set_title("H100, LOFAR-like set, 4 polarisations, single", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save(fig, "moving_window_h100.png")


def degrid_h100():
    """kernels.md: gather degridding against kernel width (degrid_h100.json, the "kernel" sweep)."""
    d = load("degrid_h100.json")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for sort, precision, style in [(True, "single", "o-"), (False, "single", "o--"), (True, "double", "s-"),
                                   (False, "double", "s--")]:
        rows = sorted((r for r in d["results"] if r["sweep"] == "kernel" and r["sort"] == sort
                       and r["precision"] == precision), key=lambda r: r["support"])
        ax.plot([2 * r["support"] + 1 for r in rows], [r["vis_per_s"] / 1e6 for r in rows], style,
                label=f"gather{' + sort' if sort else ''}, {precision}")
    ax.axhline(500, color="grey", ls=":", label="issue 6's target at 32²")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("kernel width (cells)")
    ax.set_ylabel("M visibilities / s")
    ax.set_title("H100, 1 M uniform points, 8192² grid", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    save(fig, "degrid_h100.png")


def imaging_h100():
    """imaging.md: vis2dirty / dirty2vis against ducc0 on the H100 machine (wgridding_h100_s6.json)."""
    d = load("wgridding_h100_s6.json")
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    values = [[d["ducc0_vis2dirty_s"], d["ducc0_dirty2vis_s"]],
              [d["clgrid_vis2dirty_call_s"], d["clgrid_dirty2vis_call_s"]],
              [d["clgrid_vis2dirty_reused_s"], d["clgrid_dirty2vis_reused_s"]]]
    bars(ax, ["vis2dirty", "dirty2vis"], [f"ducc0, {d['nthreads']} threads", "clgrid, one call",
                                          "clgrid, operator reused"], values, ["#7f7f7f", "#1f77b4", "#aec7e8"],
         log=True, unit=" s")
    ax.set_ylabel("s, wall clock (median of 5)")
    ax.set_title(f"H100, {d['num_vis'] / 1e6:.1f} M MeerKAT-track visibilities, {d['npix']}², "
                 f"epsilon {d['epsilon']:g}, w", fontsize=10)
    save(fig, "imaging_h100.png")


def imaging_cpu():
    """imaging.md: the same on 2 shared CPU cores, the sixth session's three runs (wgridding_pocl_1M_s6*.json)."""
    runs = [("quiet", "wgridding_pocl_1M_s6_quiet.json"), ("busy", "wgridding_pocl_1M_s6.json"),
            ("phases as views", "wgridding_pocl_1M_s6_views.json")]
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), sharey=True)
    for ax, op in zip(axes, ["vis2dirty", "dirty2vis"]):
        data = [load(f) for _, f in runs]
        values = [[r[f"ducc0_{op}_s"] for r in data], [r[f"clgrid_{op}_call_s"] for r in data],
                  [r[f"clgrid_{op}_reused_s"] for r in data]]
        bars(ax, [name for name, _ in runs], ["ducc0, 2 threads", "clgrid, one call", "clgrid, reused"], values,
             ["#7f7f7f", "#1f77b4", "#aec7e8"], unit=" s")
        ax.set_title(f"{op}, 1 M visibilities, 2048², PoCL", fontsize=10)
    axes[0].set_ylabel("s, wall clock")
    save(fig, "imaging_cpu.png")


def image_errors():
    """imaging.md: image error against epsilon, from the table on that page (benchmarks/image_errors.py
    prints it; no JSON is kept)."""
    text = (DOCS / "benchmarks" / "imaging.md").read_text()
    rows = re.findall(r"^\| (double|single) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \| "
                      r"([0-9.e+-]+) \|$", text, flags=re.M)
    if not rows:
        print("image_errors: no table found in imaging.md", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for precision, marker in (("double", "o"), ("single", "s")):
        sel = [r for r in rows if r[0] == precision]
        eps = [float(r[1]) for r in sel]
        ax.plot(eps, [float(r[2]) for r in sel], marker + "-", label=f"clgrid.vis2dirty, {precision}")
        ax.plot(eps, [float(r[4]) for r in sel], marker + "--", label=f"ducc0, {precision}")
    lim = [1e-13, 3e-2]
    ax.plot(lim, lim, color="grey", ls=":", label="error = epsilon")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("epsilon requested")
    ax.set_ylabel("relative L2 error of the whole image")
    ax.set_title("against a direct Fourier transform, 128² image with w", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    save(fig, "image_errors.png")


def dask_scaling():
    """dask.md: reused-operator time against workers, rows split and planes split (run C), with ducc0."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for name, label, marker in [("dask_scaling_h100host.json", "rows split (before)", "s--"),
                                ("dask_scaling_slabs_c_h100host.json", "planes split (run C)", "o-")]:
        d = load(name)
        ax.plot([r["workers"] for r in d["dask"]], [r["reused"]["median_s"] for r in d["dask"]], marker,
                label=label)
        ax.axhline(d["ducc0_s"], color="grey", ls=":", lw=1)
    ax.text(1.05, load("dask_scaling_slabs_c_h100host.json")["ducc0_s"] * 1.04, "ducc0, 16 threads (each run)",
            fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8], ["1 × 16", "2 × 8", "4 × 4", "8 × 2"])
    ax.set_xlabel("workers × threads on the same 16 cores")
    ax.set_ylabel("s, operator reused (median)")
    ax.set_title("clgrid.dask.vis2dirty, 4 M visibilities, 4096², PoCL", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save(fig, "dask_scaling.png")


def cpu_compare():
    """cpu.md: the kernels at equal width beside ducc0 and FINUFFT on 2 cores (compare_pocl_1M.json)."""
    d = load("compare_pocl_1M.json")
    rows = [r for r in d["comparison"]["kernel"] if "summary" in r]
    rates = [r["info"]["additions"] / r["summary"]["kernel"]["median"] / 1e9 if "additions" in r.get("info", {})
             else None for r in rows]
    if any(v is None for v in rates):     # the peers state their own additions under another key
        n = next(r["info"]["additions"] for r in rows if "additions" in r.get("info", {}))
        rates = [n / r["summary"]["kernel"]["median"] / 1e9 for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    colours = ["#1f77b4" if r["peer"].startswith("clgrid") else "#7f7f7f" for r in rows]
    drawn = ax.barh([r["peer"] for r in rows], rates, color=colours)
    for rect, v in zip(drawn, rates):
        ax.annotate(f"{v:.2f}", (rect.get_width(), rect.get_y() + rect.get_height() / 2), va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("G grid-point additions / s (kernel only, median of 5)")
    ax.set_title("width 7, 1 M MeerKAT-track visibilities with w, 2 shared cores", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    save(fig, "cpu_compare.png")


def test_durations():
    """tests.md: each test's time with cold program caches, whole suite and fast loop
    (test_durations_pocl_cold.json, made from pytest's --junitxml by this script's ``--junit``)."""
    d = load("test_durations_pocl_cold.json")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for key, label in (("whole", "whole suite"), ("fast", "fast loop, -m \"not slow\"")):
        if key not in d:
            continue
        times = sorted(d[key]["tests"].values(), reverse=True)
        cumulative = [sum(times[:i + 1]) for i in range(len(times))]
        ax.plot(range(1, len(times) + 1), cumulative,
                label=f"{label}: {len(times)} tests, {d[key]['wall_s']:.0f} s wall")
    ax.axhline(300, color="grey", ls=":", label="5 minutes")
    ax.set_xlabel("tests, slowest first")
    ax.set_ylabel("cumulative s")
    ax.set_title("PoCL, 2 cores, cold caches", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save(fig, "test_durations.png")


def junit_to_json(out, **runs):
    """Write test_durations_pocl_cold.json from junit files: name=(xml path, wall seconds, notes)."""
    data = {}
    for key, (path, wall, notes) in runs.items():
        root = ET.parse(path).getroot()
        tests = {f"{tc.get('classname').replace('.', '/')}.py::{tc.get('name')}": round(float(tc.get("time")), 3)
                 for tc in root.iter("testcase")}
        data[key] = {"wall_s": wall, "notes": notes, "tests": tests}
    Path(out).write_text(json.dumps(data, indent=1) + "\n")


PLOTS = [cufinufft_h100, moving_window_h100, degrid_h100, imaging_h100, imaging_cpu, image_errors, dask_scaling,
         cpu_compare, test_durations]

if __name__ == "__main__":
    for plot in PLOTS:
        try:
            plot()
        except FileNotFoundError as missing:
            print(f"{plot.__name__}: skipped, {missing.filename} is missing", file=sys.stderr)
