"""Tiled gridding (seed 003 §3.3-3.6, seed 000 Part I): tiles accumulated on chip, flushed once.

Every stage runs on the device and has its own method, so tests can check each one
and benchmarks can time each one (``stages`` holds the events of the last call):

1. bounding box of the cells the footprints touch: the active grid;
2. count, per tile, the visibilities whose footprint touches it (a visibility counts
   in every tile it touches), and those that tile_factor leaves untiled;
3. prefix sum of the counts: where each tile's bucket starts;
4. sort: put every visibility's packed plan, index and bucket into each of its buckets;
5. tiles: persistent work-groups pull chunks of the sorted entries through a global
   counter and accumulate each tile on chip (grid_tiled.cl): in registers and local
   memory rows owned by the work-items (``mapping = "rows"``, the seeds'), or in local
   memory with the work-items spread over each footprint (``"footprint"``);
6. central box: the same over the tiles around the grid centre, with its own chunk;
   windows: the same over overlapping tile-sized windows, each visibility of support up
   to window_support sorted into the one window that holds its whole footprint;
7. untiled: the atomic strategy's kernel for visibilities centred outside the tiled part.

The tiling is fixed relative to the grid (tile (0, 0) centred on the grid centre),
so the entries the sort can write follow from the plan alone (counted on the device
when the plan is arranged, once per plan).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import chain

import numpy as np
import pyopencl as cl
from ..device.codegen import launch
from ..device.counting_sort import CountingSort
from ..device.reduction import DeviceSum
from ..device.runtime import fill_zeros
from ..device.scan import ExclusiveScan
from ..device.tuning import TuningTableError
from .atomic import AtomicGridding
from .base import DevicePlan, Strategy

__all__ = ["TiledGridding", "TiledDevicePlan", "footprint_tile_range", "tiles_across", "tile_local_memory"]

INT32_MAX = 2 ** 31 - 1
EMPTY_BOX = np.array([INT32_MAX, -INT32_MAX - 1, INT32_MAX, -INT32_MAX - 1], np.int32)  # u_min, u_max, v_min, v_max
MAPPINGS = ("rows", "footprint", "cells")   # how a tile's work-items share its cells (grid_tiled.cl)
PARTS = ("tiles", "central box", "windows")   # bucket ranges, each gridded by its own launch


def first_tile_cell(grid_size: int, tile: int) -> int:
    """First cell of tile 0, the tile with the grid centre in its middle (seed 003 §3.3)."""
    return grid_size // 2 - tile // 2


def footprint_tile_range(centre, support, grid_size: int, tile: int):
    """First and last tile (along one axis) that footprints ``centre +- support`` touch."""
    origin = first_tile_cell(grid_size, tile)
    centre, support = np.asarray(centre, np.int64), np.asarray(support, np.int64)
    return (centre - support - origin) // tile, (centre + support - origin) // tile


def tiles_across(grid_size: int, tile: int, step: int | None = None) -> int:
    """Tiles (or windows, ``step`` cells apart) needed along one axis to cover the whole grid."""
    step = step or tile
    origin = first_tile_cell(grid_size, tile)
    return int((grid_size - 1 - origin) // step - (0 - origin) // step + 1)


def tile_local_memory(mapping: str, batch: int, npol: int, precision: str, deterministic: bool, evaluated: bool,
                      tile_cells: int, staged_reals: int) -> int:
    """Bytes of local memory grid_tiled.cl's kernel takes: ``batch`` prepared entries
    (tile_visibility, whose taps hold reals where the source is ``evaluated``) and the
    ``staged_reals`` kernel values the source stages for each, the ``tile_cells`` cells
    (of ``npol`` sums) the work-group keeps there, and the chunk's first entry."""
    real_size = 8 if precision == "double" else 4
    complex_size = 2 * real_size
    words = (15 if mapping == "footprint" else 9) - evaluated   # tile_visibility's ints (and float)
    header = words * 4
    if evaluated:   # tile_taps without off_v0, with d_u and d_v: the same size as after the ints
        header = -(-header // real_size) * real_size + 2 * real_size
    entry = -(-header // complex_size) * complex_size + 2 * npol * complex_size
    cell_size = 16 if deterministic else complex_size   # two longs a cell in fixed point
    return batch * (entry + staged_reals * real_size) + tile_cells * npol * cell_size + 4


@dataclass
class TiledDevicePlan(DevicePlan):
    """The plan plus the scratch buffers of the sort, sized once per upload."""

    box: cl.Buffer                # int4: u_min, u_max, v_min, v_max of the active grid
    tally: cl.Buffer              # int per bucket (+1): counts, then the next free slot
    offsets: cl.Buffer            # int per bucket (+1): where each bucket starts; last = all entries
    untiled_tally: cl.Buffer      # int: untiled visibilities counted, then placed
    entries: cl.Buffer            # int4 per entry: the packed plan (Plan.packed) of the visibility, if
                                  # sort_copies_plan (else unused: the tile kernel reads the plan)
    entry_vis_bucket: cl.Buffer   # int2 per entry: visibility index, bucket
    untiled_plan: cl.Buffer       # int4 per untiled visibility, for the atomic kernel
    untiled_vis: cl.Buffer        # complex per untiled visibility and polarisation
    taken: dict                   # one int counter per tile pass (PARTS)
    max_entries: int


class TiledGridding(Strategy):
    """Bucket-sorted tiles, accumulated in registers and local memory, flushed atomically."""

    name = "tiled"
    template = "grid_tiled.cl"
    kernel_layout = "u_rows"
    analytic_source = True
    work_group_parameters = ("tile_u", "tile_v", "regsz", "shmsz", "footprint_wg")

    def __init__(self, queue, grid_size, kernels, precision, tuning=None, binary=None):
        super().__init__(queue, grid_size, kernels, precision, tuning, binary)
        t = self.tuning
        if kernels.evaluated and not self.tiles_everything:
            raise TuningTableError(f"tiled: tile_factor = {t['tile_factor']} leaves visibilities to the atomic "
                                   f"kernel through copies that do not carry an analytic kernel's offsets; "
                                   f"use tile_factor = 1.0 with an analytic kernel source")
        self.max_tiles, self.windows_base, self.num_buckets = self.buckets(t, grid_size)
        if self.num_buckets >= INT32_MAX:
            raise TuningTableError(f"tiled: {self.num_buckets} tiles of {t['tile_u']}x{t['tile_v']} on a "
                                   f"{grid_size}^2 grid overflow 32-bit bucket numbers; use larger tiles")
        self.scan = ExclusiveScan(queue, wg=t["sort_wg"])
        self.stages: dict = {}

    @staticmethod
    def buckets(tuning: dict, grid_size: int) -> tuple:
        """``(max_tiles, windows_base, num_buckets)``: buckets are numbered tiles first, then
        the central box's tiles, then the windows."""
        t = tuning
        max_tiles = tiles_across(grid_size, t["tile_u"]) * tiles_across(grid_size, t["tile_v"])
        box_side = 2 * t["central_radius"] + 1
        windows_base = max_tiles + (box_side ** 2 if t["central_radius"] >= 0 else 0)
        num_buckets = windows_base
        if t["window_support"] >= 0:
            steps = [tile - 2 * t["window_support"] for tile in (t["tile_u"], t["tile_v"])]
            num_buckets += tiles_across(grid_size, t["tile_u"], steps[0]) * tiles_across(
                grid_size, t["tile_v"], steps[1])
        return max_tiles, windows_base, num_buckets

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        """``rows``: a work-item per column of a tile, each owning regsz + shmsz of its rows;
        ``footprint``, ``cells``: footprint_wg work-items sharing whatever the footprints cover."""
        if tuning["mapping"] in ("footprint", "cells"):
            return (tuning["footprint_wg"], 1)
        rows = tuning["regsz"] + tuning["shmsz"]
        if rows < 1 or tuning["tile_v"] % rows:
            raise TuningTableError(f"tiled: tile_v = {tuning['tile_v']} must be a multiple of "
                                   f"regsz + shmsz = {rows} (>= 1)")
        return (tuning["tile_u"], tuning["tile_v"] // rows)

    def check_tuning(self) -> None:
        t = self.tuning
        positive = ("tile_u", "tile_v", "chunk", "central_chunk", "groups_per_cu", "sort_run", "sort_wg",
                    "footprint_wg", "footprint_unroll")
        bad = [k for k in positive if t[k] < 1] + [k for k in ("regsz", "shmsz") if t[k] < 0]
        if bad:
            raise TuningTableError(f"tiled: {', '.join(f'{k} = {t[k]}' for k in bad)} out of range")
        if t["sort_wg"] & (t["sort_wg"] - 1):
            raise TuningTableError(f"tiled: sort_wg = {t['sort_wg']} must be a power of two")
        if not 0.0 <= t["tile_factor"] <= 1.0:
            raise TuningTableError(f"tiled: tile_factor = {t['tile_factor']} must be in [0, 1]")
        if t["window_support"] >= 0 and 2 * t["window_support"] >= min(t["tile_u"], t["tile_v"]):
            raise TuningTableError(f"tiled: window_support = {t['window_support']} leaves no room to step "
                                   f"windows of {t['tile_u']}x{t['tile_v']}: 2 * window_support must be < "
                                   f"tile_u and tile_v")
        if t["mapping"] not in MAPPINGS:
            raise TuningTableError(f"tiled: mapping = {t['mapping']!r}; choose one of {list(MAPPINGS)}")
        if t["mapping"] == "footprint" and t["footprint_wg"] < t["tile_u"]:
            raise TuningTableError(f"tiled: footprint_wg = {t['footprint_wg']} must be >= tile_u = "
                                   f"{t['tile_u']} (a work-item per column of the widest footprint row)")

    def local_memory(self, npol: int) -> int:
        """Bytes of local memory grid_tiles takes (`tile_local_memory`: known before the build,
        so an oversized tile is refused by name, not by the compiler; a test holds it to what
        the built kernel reports)."""
        t = self.tuning
        items = int(np.prod(self.local_size()))
        cells = t["shmsz"] * items if t["mapping"] == "rows" else t["tile_u"] * t["tile_v"]
        staged = 2 * self.kernels.template_parameters()["es_taps"] if self.kernels.evaluated else 0
        return tile_local_memory(t["mapping"], items, npol, self.precision, self.deterministic,
                                 self.kernels.evaluated, cells, staged)

    @classmethod
    def program_parameters(cls, tuning, precision, npol, grid_size, kernels) -> dict:
        wg_u, wg_v = cls.work_group_shape(tuning)
        max_tiles, windows_base, _ = cls.buckets(tuning, grid_size)
        return dict(super().program_parameters(tuning, precision, npol, grid_size, kernels), wg_u=wg_u,
                    wg_v=wg_v, max_tiles=max_tiles, windows_base=windows_base,
                    tile_factor_4096=round(tuning["tile_factor"] * 4096), periodic=False,
                    plan="plan.cl", batch=0, max_width=2 * kernels.max_support + 1)

    @cached_property
    def untiled_strategy(self) -> AtomicGridding:
        """The atomic strategy, with its own table entry, for what tile_factor leaves untiled."""
        strategy = AtomicGridding(self.queue, self.grid_size, self.kernels, self.precision)
        strategy.deterministic = self.deterministic
        return strategy

    @property
    def tiles_everything(self) -> bool:
        return self.tuning["tile_factor"] == 1.0

    # -- arrangement (once per plan) ---------------------------------------------

    @cached_property
    def plane_sort(self) -> CountingSort:
        """Orders plans by w-plane on the device (``plane_order``, seed 003 §3.6)."""
        return CountingSort(self.queue, "p.w & 0x7fffffff", self.kernels.num_planes)

    @cached_property
    def entry_count(self) -> DeviceSum:
        """Entries the sort writes when every visibility is tiled: the tiles each footprint
        touches, or one window for supports up to window_support (`footprint_tile_range`)."""
        t = self.tuning
        preamble = f"""
        long floor_div(long a, long b) {{ return a >= 0 ? a / b : -((-a + b - 1) / b); }}
        long tiles(long centre, long support, long tile) {{
            const long origin = {self.grid_size // 2} - tile / 2;
            return floor_div(centre + support - origin, tile) - floor_div(centre - support - origin, tile) + 1;
        }}
        long entries(int4 p, __global const int *supports) {{
            const long s = supports[p.w & 0x7fffffff];
            return s <= {t["window_support"]} ? 1 : tiles(p.x, s, {t["tile_u"]}) * tiles(p.y, s, {t["tile_v"]});
        }}"""
        return DeviceSum.of(self.queue.context, np.int64, "entries(packed[i], supports)",
                            "__global const int4 *packed, __global const int *supports", preamble)

    def max_entries(self, packed: cl.Buffer, num_vis: int) -> int:
        """Entries the sort writes when every visibility is tiled (counted on the device)."""
        return int(self.entry_count(self.queue, num_vis, packed, self.device_kernels.supports).get())

    def arrange(self, plan, npol: int) -> TiledDevicePlan:
        """The plan, by w-plane when ``plane_order``, and the sort's buffers, all on the device."""
        t = self.tuning
        n = plan.num_kept
        if t["plane_order"]:
            packed, source, _ = self.plane_sort(plan.packed.data, plan.sample.data, n)
        else:
            packed, source = plan.packed.data, plan.sample.data
        max_entries = self.max_entries(packed, n)
        if max_entries + t["groups_per_cu"] * self.facts.compute_units * max(t["chunk"], t["central_chunk"]) \
                >= INT32_MAX:
            raise ValueError(f"tiled: {max_entries} tile entries overflow 32-bit offsets; grid fewer "
                             f"visibilities per call or use larger tiles")
        untiled = 1 if self.tiles_everything else n
        complex_size = np.dtype(self.complex_dtype).itemsize

        def buffer(nbytes):
            return cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, max(int(nbytes), 4))

        return TiledDevicePlan(
            packed, None, n, source,
            box=buffer(16), tally=buffer(4 * (self.num_buckets + 1)), offsets=buffer(4 * (self.num_buckets + 1)),
            untiled_tally=buffer(4), entries=buffer(16 * max_entries if t["sort_copies_plan"] else 4),
            entry_vis_bucket=buffer(8 * max_entries),
            untiled_plan=buffer(16 * untiled), untiled_vis=buffer(complex_size * npol * untiled),
            taken={part: buffer(4) for part in PARTS}, max_entries=max_entries)

    # -- stages ---------------------------------------------------------------

    def enqueue_bounding_box(self, plan: TiledDevicePlan, npol: int, wait_for=None) -> list:
        wg = self.tuning["sort_wg"]
        groups = max(1, min(-(-plan.num_vis // wg), 8 * self.facts.compute_units))
        fill = cl.enqueue_fill_buffer(self.queue, plan.box, EMPTY_BOX, 0, 16, wait_for=wait_for)
        return [fill, self.kernel("tile_bounding_box", npol)(
            self.queue, (groups * wg,), (wg,), plan.packed, self.device_kernels.supports,
            np.int32(plan.num_vis), plan.box)]

    def _bucket(self, plan: TiledDevicePlan, npol: int, place: bool) -> cl.Event:
        items = -(-plan.num_vis // self.tuning["sort_run"])
        return launch(self.kernel("bucket_visibilities", npol),
                      self.queue, items, plan.packed, plan.vis, self.device_kernels.supports,
                      np.int32(plan.num_vis), plan.box, plan.tally, plan.untiled_tally, plan.entries,
                      plan.entry_vis_bucket, plan.untiled_plan, plan.untiled_vis, np.int32(place))

    def _zero(self, buffer, nbytes) -> cl.Event:
        return fill_zeros(self.queue, buffer, nbytes, np.int32)

    def enqueue_count(self, plan: TiledDevicePlan, npol: int) -> list:
        return [self._zero(plan.tally, 4 * (self.num_buckets + 1)), self._zero(plan.untiled_tally, 4),
                self._bucket(plan, npol, place=False)]

    def enqueue_prefix_sum(self, plan: TiledDevicePlan) -> list:
        return self.scan(plan.tally, plan.offsets, self.num_buckets + 1)

    def enqueue_sort(self, plan: TiledDevicePlan, npol: int) -> list:
        cursors = cl.enqueue_copy(self.queue, plan.tally, plan.offsets, byte_count=4 * (self.num_buckets + 1))
        return [cursors, self._zero(plan.untiled_tally, 4), self._bucket(plan, npol, place=True)]

    def enqueue_tiles(self, plan: TiledDevicePlan, npol: int, grid_buffer, part: str = "tiles") -> list:
        """Grid the buckets of one of PARTS: the tiles outside the central box, those inside it,
        or the windows."""
        t = self.tuning
        self.check_local_memory(self.local_memory(npol), f"{t['tile_u']}x{t['tile_v']} tiles, mapping "
                                f"{t['mapping']!r}, {npol} polarisations: use smaller tiles")
        first, end = {"tiles": (0, self.max_tiles), "central box": (self.max_tiles, self.windows_base),
                      "windows": (self.windows_base, self.num_buckets)}[part]
        local = self.local_size()
        groups = t["groups_per_cu"] * self.facts.compute_units
        return [self._zero(plan.taken[part], 4), self.kernel("grid_tiles", npol)(
            self.queue, (groups * local[0], local[1]), local,
            plan.entries if t["sort_copies_plan"] else plan.packed, plan.entry_vis_bucket, plan.vis,
            *self.kernel_arguments(plan), plan.box, plan.offsets, np.int32(first), np.int32(end),
            np.int32(t["central_chunk"] if part == "central box" else t["chunk"]), plan.taken[part], grid_buffer)]

    def enqueue_untiled(self, plan: TiledDevicePlan, npol: int, grid_buffer) -> list:
        """The atomic kernel over the visibilities the sort left untiled (waits to learn how many)."""
        count = np.zeros(1, np.int32)
        cl.enqueue_copy(self.queue, count, plan.untiled_tally).wait()
        if not count[0]:
            return []
        untiled = DevicePlan(plan.untiled_plan, plan.untiled_vis, int(count[0]), plan.untiled_plan)
        return self.untiled_strategy.grid(untiled, npol, grid_buffer)

    def grid(self, plan: TiledDevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue every stage; their events, by stage, are kept in ``stages``."""
        stages = {"bounding box": self.enqueue_bounding_box(plan, npol, wait_for),
                  "count": self.enqueue_count(plan, npol),
                  "prefix sum": self.enqueue_prefix_sum(plan),
                  "sort": self.enqueue_sort(plan, npol),
                  "tiles": self.enqueue_tiles(plan, npol, grid_buffer)}
        if self.tuning["central_radius"] >= 0:
            stages["central box"] = self.enqueue_tiles(plan, npol, grid_buffer, "central box")
        if self.tuning["window_support"] >= 0:
            stages["windows"] = self.enqueue_tiles(plan, npol, grid_buffer, "windows")
        if not self.tiles_everything:
            stages["untiled"] = self.enqueue_untiled(plan, npol, grid_buffer)
        self.stages = stages
        return list(chain.from_iterable(stages.values()))
