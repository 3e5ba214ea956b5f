"""Draw docs/design/img/dataflow.svg: how data flows through clgrid's
packages, from uvw and visibilities to a grid or an image.  Edit the boxes and arrows
below and rerun: ``python docs/scripts/dataflow.py``."""

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "design" / "img"

# name: (x, y, width, height, title, text, colour); y grows upwards, units of the canvas
BOXES = {
    "coords": (0.2, 5.6, 2.4, 1.0, "uvw, freqs, flags", "numpy or device arrays", "#eeeeee"),
    "values_in": (0.2, 2.6, 2.4, 1.0, "vis, weights", "each call", "#eeeeee"),
    "planning": (3.3, 5.6, 2.9, 1.0, "planning", "clgrid.planning: a Plan (cells, offsets, w-plane, drops), float64", "#dbe9f6"),
    "sources": (3.3, 4.1, 2.9, 1.0, "kernel sources", "clgrid.sources: W-projection tables, linear interpolation, analytic ES kernel", "#e2f0d9"),
    "values": (3.3, 2.6, 2.9, 1.0, "values in plan order", "clgrid.planning.values: weights, flags, checks", "#dbe9f6"),
    "device": (3.3, 1.1, 2.9, 1.0, "device", "clgrid.device: tuning table, templates rendered and built, transfers", "#fbe5d6"),
    "strategy": (6.9, 3.6, 2.9, 1.6, "strategy", "clgrid.strategies: arranges a plan once, launches its kernels (atomic, tiled, moving window, rows, fpga, gather)", "#fff2cc"),
    "operators": (10.5, 5.6, 2.9, 1.0, "operators", "clgrid.operators: Gridder, Degridder, result checks", "#e4dfec"),
    "grid": (10.5, 4.1, 2.9, 1.0, "uv-grid or visibilities", "device or host array, and a report", "#eeeeee"),
    "imaging": (10.5, 2.2, 2.9, 1.4, "imaging", "clgrid.imaging: WGridder, vis2dirty / dirty2vis: w-planes spread, FFT, w phase, crop", "#e4dfec"),
    "dask": (10.5, 0.9, 2.9, 0.9, "clgrid.dask", "the same over Dask workers", "#e4dfec"),
}
ARROWS = [("coords", "planning"), ("planning", "strategy"), ("sources", "strategy"), ("values_in", "values"),
          ("values", "strategy"), ("device", "strategy"), ("strategy", "grid"), ("operators", "grid"),
          ("grid", "imaging"), ("imaging", "dask")]


def anchor(box, towards):
    x, y, w, h = box[:4]
    cx, cy = x + w / 2, y + h / 2
    tx, ty = towards
    if abs(tx - cx) > 1.5 * abs(ty - cy):
        return (x + w, cy) if tx > cx else (x, cy)
    return (cx, y + h) if ty > cy else (cx, y)


def main():
    fig, ax = plt.subplots(figsize=(13.8, 6.9))
    ax.set_xlim(0, 13.6)
    ax.set_ylim(0.7, 6.8)
    ax.axis("off")
    for x, y, w, h, title, text, colour in BOXES.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                    facecolor=colour, edgecolor="#555555"))
        ax.text(x + w / 2, y + h - 0.2, title, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(x + w / 2, y + h - 0.42, "\n".join(textwrap.wrap(text, 38)), ha="center", va="top",
                fontsize=8.5, color="#333333")
    for a, b in ARROWS:
        ba, bb = BOXES[a], BOXES[b]
        start = anchor(ba, (bb[0] + bb[2] / 2, bb[1] + bb[3] / 2))
        end = anchor(bb, (ba[0] + ba[2] / 2, ba[1] + ba[3] / 2))
        ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color="#555555", lw=1.3))
    OUT.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT / "dataflow.svg", bbox_inches="tight")


if __name__ == "__main__":
    main()
