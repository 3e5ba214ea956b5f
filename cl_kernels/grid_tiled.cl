{# Tiled gridder (seed 003 §3.3-3.5, seed 000 Part I): the bucket-sorted visibilities
   (tile_sort.cl) are added tile by tile into a copy of the tile held by one
   work-group, work-item (x, y) owning column x and rows y, y + WG_V, y + 2 WG_V, ...:
   the first REGSZ of them in private registers, the next SHMSZ in local memory
   (seed 003 Listing 6; interleaved rather than blocked rows so that every row of a
   small footprint keeps a different work-item busy).  A tile is flushed to the grid
   with float atomics only when the work-group moves on to another tile.
   Work-groups are persistent and pull chunks of the sorted entries through a global
   counter, caching one batch of visibilities in local memory at a time (seed 000
   §3.1-3.2), so dense tiles are shared out like any others.  The central box (seed
   003 §3.4) is this kernel launched a second time, over the central tiles' buckets.
   Kernels are read in the u_rows layout (KernelStack.u_rows, seed 000 §4.1), so a
   row of work-items reads consecutive values.
   Template variables: double, atomic, npol, oversample, grid_size, regsz, shmsz, wg_v
   (and those of tile_grid.cl and tile_sort.cl). #}
{% include "common.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define REGSZ {{ regsz }}
#define SHMSZ {{ shmsz }}
#define WG_V {{ wg_v }}
{% include "plan.cl" %}
{% include "tile_grid.cl" %}
{% include "tile_sort.cl" %}
#define BATCH (TILE_U * WG_V)   /* visibilities cached in local memory at a time: one per work-item */

/* One sorted entry (a visibility in one tile), prepared once for the whole work-group. */
typedef struct {
    int bucket;
    int origin_u, origin_v;   /* first cell of the tile */
    int k0;                   /* tap k + support of the tile's first column */
    int j0;                   /* tap j + support of the tile's first row */
    int width;                /* 2 * support + 1: taps per side, and the length of a u_rows row */
    int row0;                 /* u_rows index of the tile's first column in quarter row 0 */
    int step;                 /* +1 or -1: index step from a column to the next (off_u < 0 reads backwards) */
    int off_v0;               /* off_v - support * OVERSAMPLE: quarter row of tap j is |off_v0 + (j + support) * OVERSAMPLE| */
    complex_t re[NPOL], im[NPOL];   /* grid += (re . c, im . c) for kernel value c, conjugation folded in */
} tile_visibility;

inline tile_visibility prepare_visibility(tile_grid g, int4 packed, int2 vis_bucket,
                                          __global const complex_t *restrict vis,
                                          __global const int *restrict kernel_start,
                                          __global const int *restrict kernel_side,
                                          __global const int *restrict support)
{
    const planned_vis p = decode_plan(packed);
    const int s = support[p.plane];
    const int2 origin = tile_origin(g, vis_bucket.y);
    tile_visibility t;
    t.bucket = vis_bucket.y;
    t.origin_u = origin.x;
    t.origin_v = origin.y;
    t.k0 = origin.x - p.grid_u + s;
    t.j0 = origin.y - p.grid_v + s;
    t.width = 2 * s + 1;
    t.step = p.off_u < 0 ? -1 : 1;
    t.row0 = kernel_start[p.plane] + (int)abs(p.off_u) * kernel_side[p.plane] * t.width + s
             + t.step * (origin.x - p.grid_u);
    t.off_v0 = p.off_v - s * OVERSAMPLE;
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

/* A work-item's r-th row in local memory, laid out so that neighbouring work-items use neighbouring banks. */
#define SHM_CELL(r, pol) shm[(((r) * NPOL + (pol)) * WG_V + y) * TILE_U + x]

/* Kernel value of tap (j + support = jj) in this work-item's column, if jj is in the support. */
#define TAP_IN_SUPPORT(t, jj) ((uint)(jj) < (uint)(t).width)
#define TAP(t, column, jj) kernels[(column) + (int)abs((t).off_v0 + (jj) * OVERSAMPLE) * (t).width]

{# The rows a work-item owns: caller(cell, row) with `cell` the accumulator of
   polarisation `pol` (a name the caller's code defines) and `row` the row in the tile. #}
{% macro owned_rows() %}
{% if regsz %}
    #pragma unroll
    for (int r = 0; r < REGSZ; ++r) {
        {{ caller("reg[r][pol]", "r * WG_V + y") }}
    }
{% endif %}
{% if shmsz %}
    #pragma unroll
    for (int r = 0; r < SHMSZ; ++r) {
        {{ caller("SHM_CELL(r, pol)", "(REGSZ + r) * WG_V + y") }}
    }
{% endif %}
{% endmacro %}

__kernel __attribute__((reqd_work_group_size(TILE_U, WG_V, 1)))
void grid_tiles(__global const int4 *restrict entries, __global const int2 *restrict entry_vis_bucket,
                __global const complex_t *restrict vis,          /* [num_vis][NPOL], weighted */
                __global const complex_t *restrict kernels,      /* KernelStack.u_rows() */
                __global const int *restrict kernel_start, __global const int *restrict kernel_side,
                __global const int *restrict support, __global const int *restrict box,
                __global const int *restrict offsets,            /* bucket starts, from the prefix sum */
                const int first_bucket, const int end_bucket,    /* grid the buckets [first, end) */
                const int chunk,                                 /* entries taken from the counter at a time */
                __global int *taken,                             /* the counter, zeroed by the host */
                __global real_t *grid)                           /* [NPOL][GRID_SIZE][GRID_SIZE] complex */
{
    __local tile_visibility batch[BATCH];
    __local int chunk_first;
{% if shmsz %}
    __local complex_t shm[SHMSZ * NPOL * WG_V * TILE_U];
{% endif %}
{% if regsz %}
    complex_t reg[REGSZ][NPOL];
{% endif %}
    const tile_grid g = make_tile_grid(box);
    const int begin = offsets[first_bucket], end = offsets[end_bucket];
    const int x = get_local_id(0), y = get_local_id(1);
    const int lid = y * TILE_U + x;
    const size_t pol_stride = (size_t)GRID_SIZE * GRID_SIZE;
{% call(cell, row) owned_rows() %}
        #pragma unroll
        for (int pol = 0; pol < NPOL; ++pol)
            {{ cell }} = 0;
{% endcall %}
    int bucket = -1;
    int2 origin = (int2)(0, 0);

{# A flushed cell that is not zero was touched by a footprint, so it lies on the grid. #}
{% macro flush_tile() %}
{% call(cell, row) owned_rows() %}
        #pragma unroll
        for (int pol = 0; pol < NPOL; ++pol)
            if ({{ cell }}.x != 0 || {{ cell }}.y != 0) {
                atomic_add_complex(grid, pol * pol_stride + (size_t)(origin.y + {{ row }}) * GRID_SIZE
                                   + origin.x + x, {{ cell }});
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
            if (lid < n)
                batch[lid] = prepare_visibility(g, entries[at + lid], entry_vis_bucket[at + lid], vis,
                                                kernel_start, kernel_side, support);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = 0; e < n; ++e) {
                const tile_visibility t = batch[e];
                if (t.bucket != bucket) {
{{ flush_tile() }}
                    bucket = t.bucket;
                    origin = (int2)(t.origin_u, t.origin_v);
                }
                if (TAP_IN_SUPPORT(t, t.k0 + x)) {
                    const int column = t.row0 + t.step * x;
{% call(cell, row) owned_rows() %}
        if (TAP_IN_SUPPORT(t, t.j0 + {{ row }})) {
            const complex_t c = TAP(t, column, t.j0 + {{ row }});
            #pragma unroll
            for (int pol = 0; pol < NPOL; ++pol)
                {{ cell }} = add_weighted({{ cell }}, t.re[pol], t.im[pol], c);
        }
{% endcall %}
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);   /* the batch and chunk_first are rewritten next */
        }
    }
{{ flush_tile() }}
}
