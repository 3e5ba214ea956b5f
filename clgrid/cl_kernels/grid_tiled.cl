{# Tiled gridder (seed 003 §3.3-3.5, seed 000 Part I): the bucket-sorted visibilities
   (tile_sort.cl) are added tile by tile into a copy of the tile held by one
   work-group, and a tile is flushed to the grid with float atomics only when the
   work-group moves on to another tile.  Two ways to share a tile's cells among the
   work-items (`mapping`):

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

   Work-groups are persistent and pull chunks of the sorted entries through a global
   counter, caching one batch of visibilities in local memory at a time (seed 000
   §3.1-3.2), so dense tiles are shared out like any others.  The central box (seed
   003 §3.4) is this kernel launched a second time, over the central tiles' buckets.
   The weights come from the kernel source `source` (its per-tile names): tables in the
   u_rows layout (source_table.cl; KernelStack.u_rows, seed 000 §4.1), so neighbouring
   work-items read consecutive values, or the analytic kernel (source_analytic.cl), its
   one-dimensional tap values evaluated once per visibility into local memory.
   In deterministic mode the tile's sums are 64-bit fixed point (tile_sum_t).
   Template variables: double, atomic, deterministic, npol, oversample, grid_size, mapping, regsz,
   shmsz, footprint_unroll, wg_u, wg_v, source (and those of tile_grid.cl, tile_sort.cl and the
   source). #}
{% include "common.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define WG_U {{ wg_u }}
#define WG_V {{ wg_v }}
#define WG (WG_U * WG_V)
{% if mapping == "rows" %}
#define REGSZ {{ regsz }}
#define SHMSZ {{ shmsz }}
{% endif %}
{% include "plan.cl" %}
{% include "tile_grid.cl" %}
{% include "tile_sort.cl" %}
{% include source %}
#define BATCH WG   /* visibilities cached in local memory at a time: one per work-item */

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

inline tile_visibility prepare_visibility(SOURCE_PARAMS tile_grid g, int4 packed, int2 vis_bucket,
                                          __global const complex_t *restrict vis)
{
    const planned_vis p = decode_plan(packed);
    const int s = source_support(SOURCE_PASS p, vis_bucket.x);
    const int2 origin = tile_origin(g, vis_bucket.y);
    tile_visibility t;
    t.bucket = vis_bucket.y;
    t.origin_u = origin.x;
    t.origin_v = origin.y;
    t.k0 = origin.x - p.grid_u + s;
    t.j0 = origin.y - p.grid_v + s;
    t.width = 2 * s + 1;
    t.taps = tile_taps_of(SOURCE_PASS p, s, t.width, origin.x, vis_bucket.x);
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
        const complex_t v = vis[(size_t)vis_bucket.x * NPOL + pol];
        t.re[pol] = (complex_t)(v.x, -sign * v.y);
        t.im[pol] = (complex_t)(v.y, sign * v.x);
    }
    return t;
}

inline complex_t add_weighted(complex_t sum, complex_t re, complex_t im, complex_t c)
{
    return (complex_t)(mad(re.x, c.x, mad(re.y, c.y, sum.x)), mad(im.x, c.x, mad(im.y, c.y, sum.y)));
}

{% if deterministic %}
/* Deterministic mode: the tile's cells are fixed-point integers too (common.cl), each
   product rounded as it is added, so a tile's sums do not depend on the order of its
   entries (the device sort places them in whatever order its atomics run). */
typedef long2 tile_sum_t;
#define ACCUMULATE(sum, re, im, c) ((sum) + convert_long2_sat_rte(add_weighted((complex_t)(0, 0), re, im, c)))
inline void flush_cell(__global grid_real_t *grid, size_t cell, tile_sum_t value)
{
    atom_add(grid + 2 * cell, value.x);
    atom_add(grid + 2 * cell + 1, value.y);
}
{% else %}
typedef complex_t tile_sum_t;
#define ACCUMULATE(sum, re, im, c) add_weighted(sum, re, im, c)
#define flush_cell atomic_add_complex
{% endif %}

/* Kernel value of tap (jj, column) = (j, k) + support of entry e, in the column whose index
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
#define FOOTPRINT_UNROLL {{ footprint_unroll }}

/* Whether footprint b's cells in the tile fall to the same work-items as a's do, so that
   b can follow a without a barrier: same tile, same columns, rows in step (consecutive
   time steps of a baseline often land on the same cell). */
inline bool same_work_items(tile_visibility a, __local const tile_visibility *b)
{
    return a.bucket == b->bucket && a.cu0 == b->cu0 && a.covered_u == b->covered_u
           && (a.cv0 - b->cv0) % a.rows_per_pass == 0;
}

{# Every cell of the tile, shared out among the work-items: caller(cell, row, column). #}
{% macro owned_cells() %}
    for (int i = lid; i < TILE_U * TILE_V; i += WG) {
        {{ caller("TILE_CELL(i, pol)", "i / TILE_U", "i % TILE_U") }}
    }
{% endmacro %}
{% endif %}

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
                __global grid_real_t *grid)                           /* [NPOL][GRID_SIZE][GRID_SIZE] complex */
{
    __local tile_visibility batch[BATCH];
    TILE_LOCAL
    __local int chunk_first;
{% if mapping == "footprint" %}
    __local tile_sum_t tile[NPOL * TILE_U * TILE_V];
{% else %}
{% if shmsz %}
    __local tile_sum_t shm[SHMSZ * NPOL * WG_V * TILE_U];
{% endif %}
{% if regsz %}
    tile_sum_t reg[REGSZ][NPOL];
{% endif %}
{% endif %}
    const tile_grid g = make_tile_grid(box);
    const int begin = offsets[first_bucket], end = offsets[end_bucket];
    const int x = get_local_id(0), y = get_local_id(1);
    const int lid = y * WG_U + x;
    const size_t pol_stride = (size_t)GRID_SIZE * GRID_SIZE;
{% call(cell, row, column) owned_cells() %}
        #pragma unroll
        for (int pol = 0; pol < NPOL; ++pol)
            {{ cell }} = 0;
{% endcall %}
    int bucket = -1;
    int2 origin = (int2)(0, 0);

{# A flushed cell that is not zero was touched by a footprint, so it lies on the grid. #}
{% macro flush_tile() %}
{% call(cell, row, column) owned_cells() %}
        #pragma unroll
        for (int pol = 0; pol < NPOL; ++pol)
            if ({{ cell }}.x != 0 || {{ cell }}.y != 0) {
                flush_cell(grid, pol * pol_stride + (size_t)(origin.y + {{ row }}) * GRID_SIZE
                                   + origin.x + {{ column }}, {{ cell }});
                {{ cell }} = 0;
            }
{% endcall %}
{% endmacro %}
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
                batch[lid] = prepare_visibility(SOURCE_PASS g, entries[{{ "at + lid" if sort_copies_plan else "entry_vis_bucket[at + lid].x" }}],
                                                entry_vis_bucket[at + lid], vis);
                TILE_STAGE(lid, batch[lid].taps)
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = 0; e < n; ++e) {
                const tile_visibility t = batch[e];
                if (t.bucket != bucket) {
{{ flush_tile() }}
                    bucket = t.bucket;
                    origin = (int2)(t.origin_u, t.origin_v);
{% if mapping == "footprint" %}
                    barrier(CLK_LOCAL_MEM_FENCE);   /* the tile is zero again before anyone adds */
{% endif %}
                }
{% if mapping == "rows" %}
                if (IN_FOOTPRINT(t, t.k0, x)) {
                    const int column = tile_column(t.taps, x);
{% call(cell, row, column) owned_cells() %}
        if (IN_FOOTPRINT(t, t.j0, {{ row }})) {
            const complex_t c = TAP(t, column, t.j0 + {{ row }});
            #pragma unroll
            for (int pol = 0; pol < NPOL; ++pol)
                {{ cell }} = ACCUMULATE({{ cell }}, t.re[pol], t.im[pol], c);
        }
{% endcall %}
                }
{% else %}
                /* work-item lid covers column cu0 + c of rows cv0 + r, cv0 + r + rows_per_pass, ...,
                   FOOTPRINT_UNROLL rows at a time: their kernel loads are issued together */
                const int r = (int)((lid + 0.5f) * t.inv_covered_u);
                const int c = lid - r * t.covered_u;
                if (r < t.rows_per_pass) {
                    const int u = t.cu0 + c;
                    const int column = tile_column(t.taps, u);
                    for (int v = t.cv0 + r; v <= t.cv1; v += FOOTPRINT_UNROLL * t.rows_per_pass) {
                        complex_t k[FOOTPRINT_UNROLL];
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
            }
            barrier(CLK_LOCAL_MEM_FENCE);   /* the batch and chunk_first are rewritten next */
        }
    }
{{ flush_tile() }}
}
