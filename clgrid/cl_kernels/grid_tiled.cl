{# Tiled gridder (seed 003 §3.3-3.5, seed 000 Part I): the points of one tile of the
   grid added into a copy of the tile held by one work-group, each entry's kernel values made
   once (from tables, or by the source into local memory: TILE_STAGE), and the tile flushed to
   the grid with float atomics only when the work-group moves on to another tile.

   Three ways to share a tile's cells among the work-items (`mapping`):
   "rows"       work-item (x, y) owns column x and rows y, y + WG_V, y + 2 WG_V, ...:
                the first REGSZ of them in private registers, the next SHMSZ in local
                memory (seed 003 Listing 6; interleaved rather than blocked rows so that
                every row of a small footprint keeps a different work-item busy).  No
                synchronisation between visibilities, but a work-item whose cells a
                footprint misses idles: small kernels leave most of the tile idle.
   "footprint"  the tile lives in local memory and, for each visibility, the work-items
                spread over just the cells its footprint covers in the tile (rows of the
                covered rectangle side by side, ROWS_PER_PASS = WG / width at a time),
                with a barrier between visibilities unless the next one's cells fall to
                the same work-items.  Not in the seeds: it keeps the
                work-items busy whatever the support, and lets tiles grow (fewer sort
                entries) without more idle work.
   "cells"      the tile lives in local memory and each work-item owns the same cells
                (tap j, tap k) of every footprint, of a MAX_WIDTH x MAX_WIDTH box (the widest
                footprint), fixed before the first entry, with a barrier between visibilities
                (cuFINUFFT's subproblems with the roles of points and cells swapped: the
                imaging operator's bins mapping, grid_bins.cl).

   The entries: the bucket-sorted visibilities (tile_sort.cl; a visibility in each tile its
   footprint touches, or in the one window that holds it), pulled by persistent work-groups
   in chunks through a global counter, one batch cached in local memory at a time (seed 000
   §3.1-3.2), so dense tiles are shared out like any others.  The central box (seed 003
   §3.4) and the windows are this kernel launched again over their buckets.  (The imaging
   operator's bins, grid_bins.cl, are the same idea over the w-stacking plan; they stay a
   template of their own: docs/design/strategies.md says why.)
   The plan (`plan`: plan.cl or plan_stacked.cl) and the kernel source (`source`) come in
   through includes defining the same names (source_table.cl's header): tables in the
   u_rows layout (source_table.cl; KernelStack.u_rows, seed 000 §4.1), so neighbouring
   work-items read consecutive values, or the analytic kernels (source_analytic.cl,
   source_stacked.cl), their one-dimensional tap values evaluated once per visibility into
   local memory.  A tile's columns (u here) run along the grid's rows: the W-projection
   grid is [pol][v][u], the stacked one [u][v] (plan_stacked.cl); `periodic`: footprints
   wrap around the grid's edges (the stacked grid).
   In deterministic mode the tile's sums are 64-bit fixed point (tile_sum_t).
   Template variables: double, atomic, deterministic, npol, oversample, grid_size, mapping, regsz,
   shmsz, footprint_unroll, max_width, wg_u, wg_v, batch (0: WG), periodic, plan, source (and those
   of tile_sort.cl and the source). #}
{% include "common.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
{% if periodic %}
#define GRID_U {{ grid_size[1] }}   /* cells along a grid row (the stacked grid's v) */
#define GRID_V {{ grid_size[0] }}   /* rows */
{% else %}
#define GRID_SIZE {{ grid_size }}
#define GRID_U GRID_SIZE
#define GRID_V GRID_SIZE
{% endif %}
#define WG_U {{ wg_u }}
#define WG_V {{ wg_v }}
#define WG (WG_U * WG_V)
{% if mapping == "rows" %}
#define REGSZ {{ regsz }}
#define SHMSZ {{ shmsz }}
{% endif %}
{% include plan %}
{% include "tile_sort.cl" %}
{% include source %}
/* visibilities cached in local memory at a time: one per work-item, or fewer where local memory is short */
#define BATCH {{ batch or "WG" }}

/* One sorted entry (a visibility in one tile), prepared once for the whole work-group. */
typedef struct {
    int bucket;
    int origin_u, origin_v;   /* first cell of the tile */
    int k0;                   /* tap k + support of the tile's first column */
    int j0;                   /* tap j + support of the tile's first row */
    int width;                /* 2 * support + 1: taps per side, and the length of a u_rows row */
    tile_taps taps;           /* where the source finds the taps of the tile's columns */
{% if mapping == "footprint" %}
    int cu0, cv0, cv1;        /* the footprint in the tile: columns cu0.., rows cv0..cv1 */
    int covered_u;            /* columns it covers */
    int rows_per_pass;        /* WG / covered_u: rows the work-group covers side by side */
    float inv_covered_u;      /* 1 / covered_u, to split a work-item number into (row, column) */
{% endif %}
    complex_t re[NPOL], im[NPOL];   /* grid += (re . c, im . c) for kernel value c, conjugation folded in */
} tile_visibility;

/* Entry (visibility i, in tile `bucket` whose first cell is `origin`), its value weighted for
   stacking plane `plane`. */
inline tile_visibility prepare_visibility(SOURCE_PARAMS int4 packed, int i, int bucket, int2 origin,
                                          __global const complex_t *restrict vis, int plane)
{
    const planned_vis p = decode_plan(packed);
    const int4 f = source_footprint(SOURCE_PASS p, i);   /* first cell (u, v), width, support */
    tile_visibility t;
    t.bucket = bucket;
    t.origin_u = origin.x;
    t.origin_v = origin.y;
    t.k0 = origin.x - f.x;
    t.j0 = origin.y - f.y;
    t.width = f.z;
    t.taps = tile_taps_of(SOURCE_PASS p, f.w, t.width, origin.x, i);
{% if mapping == "footprint" %}
    t.cu0 = max(0, -t.k0);
    t.cv0 = max(0, -t.j0);
    t.cv1 = min(TILE_V, t.width - t.j0) - 1;
    t.covered_u = min(TILE_U, t.width - t.k0) - t.cu0;
    t.rows_per_pass = WG / t.covered_u;
    t.inv_covered_u = 1.0f / t.covered_u;
{% endif %}
    const real_t sign = p.conjugate ? -1 : 1;
    for (int pol = 0; pol < NPOL; ++pol) {
        const complex_t v = vis[(size_t)i * NPOL + pol];
        t.re[pol] = (complex_t)(v.x, -sign * v.y);
        t.im[pol] = (complex_t)(v.y, sign * v.x);
    }
    return t;
}

{% if deterministic %}
/* Deterministic mode: the tile's cells are fixed-point integers too (common.cl), each
   product rounded as it is added, so a tile's sums do not depend on the order of its
   entries (the device sort places them in whatever order its atomics run). */
typedef long2 tile_sum_t;
#define ACCUMULATE(sum, re, im, c) ((sum) + convert_long2_sat_rte(tile_mad((complex_t)(0, 0), re, im, c)))
inline void flush_cell(__global grid_real_t *grid, size_t cell, tile_sum_t value)
{
    atom_add(grid + 2 * cell, value.x);
    atom_add(grid + 2 * cell + 1, value.y);
}
{% else %}
typedef complex_t tile_sum_t;
#define ACCUMULATE(sum, re, im, c) tile_mad(sum, re, im, c)
#define flush_cell atomic_add_complex
{% endif %}

/* Kernel weight of tap (jj, column) = (j, k) + support of entry e, in the column whose index
   (tile_column) is `column`.  Used within the loop over the batch's entries `e` only. */
#define TAP(t, column, jj) tile_weight(TILE_STORE(e), (t).taps, (t).width, column, jj)

{% if mapping == "rows" %}
/* A work-item's r-th row in local memory, laid out so that neighbouring work-items use neighbouring banks. */
#define SHM_CELL(r, pol) shm[(((r) * NPOL + (pol)) * WG_V + y) * TILE_U + x]
/* Whether the tile's row or column i holds a tap of the footprint (k0 or j0 as `first`). */
#define IN_FOOTPRINT(t, first, i) ((uint)((first) + (i)) < (uint)(t).width)

{# The rows a work-item owns: caller(cell, row, column) with `cell` the accumulator of
   polarisation `pol` (a name the caller's code defines), `row` and `column` its place in the tile. #}
{% macro owned_cells() %}
{% if regsz %}
    #pragma unroll
    for (int r = 0; r < REGSZ; ++r) {
        {{ caller("reg[r][pol]", "r * WG_V + y", "x") }}
    }
{% endif %}
{% if shmsz %}
    #pragma unroll
    for (int r = 0; r < SHMSZ; ++r) {
        {{ caller("SHM_CELL(r, pol)", "(REGSZ + r) * WG_V + y", "x") }}
    }
{% endif %}
{% endmacro %}
{% else %}
#define TILE_CELL(i, pol) tile[(pol) * TILE_U * TILE_V + (i)]
{% if mapping == "cells" %}
#define MAX_WIDTH {{ max_width }}   /* taps per side of the widest footprint */
#define CELLS_PER_ITEM ((MAX_WIDTH * MAX_WIDTH + WG - 1) / WG)
{% else %}
#define FOOTPRINT_UNROLL {{ footprint_unroll }}

/* Whether footprint b's cells in the tile fall to the same work-items as a's do, so that
   b can follow a without a barrier: same tile, same columns, rows in step (consecutive
   time steps of a baseline often land on the same cell). */
inline bool same_work_items(tile_visibility a, __local const tile_visibility *b)
{
    return a.bucket == b->bucket && a.cu0 == b->cu0 && a.covered_u == b->covered_u
           && (a.cv0 - b->cv0) % a.rows_per_pass == 0;
}
{% endif %}

{# Every cell of the tile, shared out among the work-items: caller(cell, row, column). #}
{% macro owned_cells() %}
    for (int i = lid; i < TILE_U * TILE_V; i += WG) {
        {{ caller("TILE_CELL(i, pol)", "i / TILE_U", "i % TILE_U") }}
    }
{% endmacro %}
{% endif %}

{% if periodic %}
/* Cell (u, v) of polarisation pol, footprints wrapping around the grid's edges (a tile
   reaches past an edge by less than the grid). */
#define GRID_CELL(pol, u, v) ((pol) * pol_stride + (size_t)((v) < GRID_V ? (v) : (v) - GRID_V) * GRID_U \
                              + ((u) < GRID_U ? (u) : (u) - GRID_U))
{% else %}
#define GRID_CELL(pol, u, v) ((pol) * pol_stride + (size_t)(v) * GRID_U + (u))
{% endif %}


{# The work-group's local memory and private accumulators. #}
{% macro tile_storage() %}
    __local tile_visibility batch[BATCH];
    TILE_LOCAL
    __local int chunk_first;
{% if mapping != "rows" %}
    __local tile_sum_t tile[NPOL * TILE_U * TILE_V];
{% else %}
{% if shmsz %}
    __local tile_sum_t shm[SHMSZ * NPOL * WG_V * TILE_U];
{% endif %}
{% if regsz %}
    tile_sum_t reg[REGSZ][NPOL];
{% endif %}
{% endif %}
{% endmacro %}

{# The work-item's place, and its accumulators zeroed. #}
{% macro tile_init() %}
    const int x = get_local_id(0), y = get_local_id(1);
    const int lid = y * WG_U + x;
    const size_t pol_stride = (size_t)GRID_U * GRID_V;
{% if mapping == "cells" %}
    /* this work-item's cells of every footprint: tap (cell_j, cell_k), none past the box, at
       cell_off from tap (0, 0) in the tile */
    int cell_j[CELLS_PER_ITEM], cell_k[CELLS_PER_ITEM], cell_off[CELLS_PER_ITEM];
    for (int i = 0; i < CELLS_PER_ITEM; ++i) {
        const int c = lid + i * WG;
        cell_j[i] = c < MAX_WIDTH * MAX_WIDTH ? c / MAX_WIDTH : MAX_WIDTH;
        cell_k[i] = c - (c / MAX_WIDTH) * MAX_WIDTH;
        cell_off[i] = cell_j[i] * TILE_U + cell_k[i];
    }
{% endif %}
{% call(cell, row, column) owned_cells() %}
        #pragma unroll
        for (int pol = 0; pol < NPOL; ++pol)
            {{ cell }} = 0;
{% endcall %}
{% endmacro %}

{# Add entry t (batch[e] of n) to the tile. #}
{% macro accumulate() %}
{% if mapping == "rows" %}
                if (IN_FOOTPRINT(t, t.k0, x)) {
                    const int column = tile_column(t.taps, x);
{% call(cell, row, column) owned_cells() %}
        if (IN_FOOTPRINT(t, t.j0, {{ row }})) {
            const tile_weight_t c = TAP(t, column, t.j0 + {{ row }});
            #pragma unroll
            for (int pol = 0; pol < NPOL; ++pol)
                {{ cell }} = ACCUMULATE({{ cell }}, t.re[pol], t.im[pol], c);
        }
{% endcall %}
                }
{% elif mapping == "cells" %}
                #pragma unroll
                for (int i = 0; i < CELLS_PER_ITEM; ++i) {
                    const int row = cell_j[i] - t.j0, column = cell_k[i] - t.k0;   /* the tap's place in the tile */
                    if (cell_j[i] < t.width && cell_k[i] < t.width && (uint)row < TILE_V && (uint)column < TILE_U) {
                        const tile_weight_t c = TAP(t, tile_column(t.taps, column), cell_j[i]);
                        #pragma unroll
                        for (int pol = 0; pol < NPOL; ++pol)
                            TILE_CELL(row * TILE_U + column, pol) = ACCUMULATE(TILE_CELL(row * TILE_U + column, pol),
                                                                                 t.re[pol], t.im[pol], c);
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE);   /* the next footprint's cells may be other work-items' */
{% else %}
                /* work-item lid covers column cu0 + c of rows cv0 + r, cv0 + r + rows_per_pass, ...,
                   FOOTPRINT_UNROLL rows at a time: their kernel loads are issued together */
                const int r = (int)((lid + 0.5f) * t.inv_covered_u);
                const int c = lid - r * t.covered_u;
                if (r < t.rows_per_pass) {
                    const int u = t.cu0 + c;
                    const int column = tile_column(t.taps, u);
                    for (int v = t.cv0 + r; v <= t.cv1; v += FOOTPRINT_UNROLL * t.rows_per_pass) {
                        tile_weight_t k[FOOTPRINT_UNROLL];
                        #pragma unroll
                        for (int m = 0; m < FOOTPRINT_UNROLL; ++m) {
                            const int row = v + m * t.rows_per_pass;
                            if (row <= t.cv1)
                                k[m] = TAP(t, column, t.j0 + row);
                        }
                        #pragma unroll
                        for (int m = 0; m < FOOTPRINT_UNROLL; ++m) {
                            const int row = v + m * t.rows_per_pass;
                            if (row <= t.cv1) {
                                #pragma unroll
                                for (int pol = 0; pol < NPOL; ++pol)
                                    TILE_CELL(row * TILE_U + u, pol) = ACCUMULATE(TILE_CELL(row * TILE_U + u, pol),
                                                                                    t.re[pol], t.im[pol], k[m]);
                            }
                        }
                    }
                }
                /* the next footprint may give these cells to other work-items (or the tile is flushed) */
                if (e + 1 < n && !same_work_items(t, batch + e + 1))
                    barrier(CLK_LOCAL_MEM_FENCE);
{% endif %}
{% endmacro %}

{# The tile's cells to the grid at `origin`.  A flushed cell that is not zero was touched by
   a footprint, so it lies on the grid (or, periodic, one grid past its edge). #}
{% macro flush_tile() %}
{% call(cell, row, column) owned_cells() %}
        #pragma unroll
        for (int pol = 0; pol < NPOL; ++pol)
            if ({{ cell }}.x != 0 || {{ cell }}.y != 0) {
                flush_cell(grid, GRID_CELL(pol, origin.x + {{ column }}, origin.y + {{ row }}), {{ cell }});
                {{ cell }} = 0;
            }
{% endcall %}
{% endmacro %}

__kernel __attribute__((reqd_work_group_size(WG_U, WG_V, 1)))
void grid_tiles(__global const int4 *restrict entries,   /* the sorted plans, or (!sort_copies_plan) the plan */
                __global const int2 *restrict entry_vis_bucket,
                __global const complex_t *restrict vis,          /* [num_vis][NPOL], weighted */
                SOURCE_ARGS
                __global const int *restrict box,
                __global const int *restrict offsets,            /* bucket starts, from the prefix sum */
                const int first_bucket, const int end_bucket,    /* grid the buckets [first, end) */
                const int chunk,                                 /* entries taken from the counter at a time */
                __global int *taken,                             /* the counter, zeroed by the host */
                __global grid_real_t *grid)                      /* [NPOL][GRID_SIZE][GRID_SIZE] complex */
{
{{ tile_storage() }}
    const tile_grid g = make_tile_grid(box);
    const int begin = offsets[first_bucket], end = offsets[end_bucket];
{{ tile_init() }}
    int bucket = -1;
    int2 origin = (int2)(0, 0);
    for (;;) {
        if (lid == 0)
            chunk_first = begin + atomic_add(taken, chunk);
        barrier(CLK_LOCAL_MEM_FENCE);
        const int first = chunk_first;
        if (first >= end)
            break;
        const int last = min(first + chunk, end);
        for (int at = first; at < last; at += BATCH) {
            const int n = min(BATCH, last - at);
            if (lid < n) {
                const int2 vis_bucket = entry_vis_bucket[at + lid];
                batch[lid] = prepare_visibility(SOURCE_PASS entries[{{ "at + lid" if sort_copies_plan else "vis_bucket.x" }}],
                                                vis_bucket.x, vis_bucket.y, tile_origin(g, vis_bucket.y), vis, 0);
                TILE_STAGE(lid, batch[lid].taps)
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = 0; e < n; ++e) {
                const tile_visibility t = batch[e];
                if (t.bucket != bucket) {
{{ flush_tile() }}
                    bucket = t.bucket;
                    origin = (int2)(t.origin_u, t.origin_v);
{% if mapping != "rows" %}
                    barrier(CLK_LOCAL_MEM_FENCE);   /* the tile is zero again before anyone adds */
{% endif %}
                }
{{ accumulate() }}
            }
            barrier(CLK_LOCAL_MEM_FENCE);   /* the batch and chunk_first are rewritten next */
        }
    }
{{ flush_tile() }}
}
