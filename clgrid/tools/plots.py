"""Plots of benchmark results (matplotlib, the ``plots`` extra).

Two figures, after the seeds: throughput against kernel size, one line per device
and method (seed 004 Figure 4), and throughput against the number of visibilities
(seed 001's sweeps).  Input is the ``results`` list of a ``clgrid bench --json`` file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

__all__ = ["load_results", "plot_kernel_sweep", "plot_visibility_sweep", "plot_file"]


def load_results(path) -> list[dict]:
    return [r for r in json.loads(Path(path).read_text())["results"] if not r.get("failed")]


def _lines(results, x_of, y_key):
    lines = defaultdict(list)
    for r in results:
        label = f"{r['device']} · {r['method']} · {r['precision']} · {r['workload']['npol']} pol"
        lines[label].append((x_of(r), r[y_key]))
    return {k: sorted(v) for k, v in lines.items()}


def _figure(lines, xlabel, ylabel, scale, path, logx=False):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in sorted(lines.items()):
        xs, ys = zip(*points)
        ax.plot(xs, [y / scale for y in ys], marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def _at_most_common(results, key):
    """The results whose ``key(result)`` is the most common value: one slice of a 2-D sweep."""
    values = [key(r) for r in results]
    if not values:
        return results
    common = max(set(values), key=values.count)
    return [r for r, v in zip(results, values) if v == common]


def plot_kernel_sweep(results, path) -> str:
    """GGPA/s against kernel width (seed 004 Figure 4, middle), at the most common data size."""
    results = _at_most_common(results, lambda r: r["workload"]["num_vis"])
    lines = _lines(results, lambda r: 2 * r["workload"]["supports"][1] + 1, "gpa_per_s")
    return _figure(lines, "kernel width (cells)", "G grid-point additions / s", 1e9, path)


def plot_visibility_sweep(results, path) -> str:
    """Visibilities per second against the number of visibilities (seed 001), at the most
    common kernel size."""
    results = _at_most_common(results, lambda r: r["workload"]["supports"][1])
    lines = _lines(results, lambda r: r["workload"]["num_vis"], "vis_per_s")
    return _figure(lines, "visibilities", "M visibilities / s", 1e6, path, logx=True)


def plot_file(json_path, out_dir) -> list[str]:
    """Both figures for one ``clgrid bench --json`` file, as PNGs in ``out_dir``."""
    results = load_results(json_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(json_path).stem
    return [plot_kernel_sweep(results, out / f"{stem}-kernel.png"),
            plot_visibility_sweep(results, out / f"{stem}-visibilities.png")]
