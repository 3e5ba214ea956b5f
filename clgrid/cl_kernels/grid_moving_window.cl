{# Moving-window gridder, seed 004 §4-5 (Algorithm 2), adapted as in seed 000 §8 to
    nearest-cell rounding, offsets to the cell centre and a support per chunk.

    A chunk is a run of one baseline's visibilities with one support S and one sign of
    w (clgrid/strategies/moving_window.py).  Its window is the W x W subgrid, W = 2S+1,
    that a visibility's kernel covers.  The grid is cut into W x W subgrids; a
    work-item owns, in every subgrid, the points at its window positions (my_u, my_v):
    COARSEN_U x COARSEN_V of them, strided across the window so that neighbouring
    work-items own neighbouring grid points.  Whatever the window's position, exactly
    one grid point per owned position lies under the kernel.  The work-item sums
    vis * kernel there in registers and adds the sums to the grid (atomically: other
    work-groups may add to the same point) only when the point changes.

    A work-group takes one tile of WG_SIZE work-items' positions of one chunk's window
    (large kernels have many tiles), stages BATCH visibilities at a time in local
    memory and, once per visibility, turns its plan into window indices, so the
    inner loop has no modulo: the conditional add of seed 004 §5.

    Template variables: double, atomic, npol, oversample, grid_size, offset_range,
    work_group_size, coarsen_u, coarsen_v, batch, flush ("atomic", or "plain": a
    debug build without atomics, wrong where work-groups meet, for timing only),
    source (and the source's).

    The weights come from the kernel source `source` (its per-window names): the
    tables' offset rows (source_table.cl, KernelStack.offset_rows), or, for the texture
    path (clgrid/strategies/texture_moving_window.py), the kernel cube sampled at the
    visibility's continuous position (source_texture.cl, staged with the visibility); a
    chunk's support is then the interpolated footprint S, so the window and everything
    else stay as they are. #}
{% include "common.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define OFFSET_RANGE {{ offset_range }}
#define WG_SIZE {{ work_group_size }}
#define COARSEN_U {{ coarsen_u }}
#define COARSEN_V {{ coarsen_v }}
#define BATCH {{ batch }}
{% include "plan.cl" %}
{% include source %}

/* Add a point's sums to the grid and clear them; conjugate when the chunk's w < 0
   (its visibilities were staged conjugated: vis * conj(c) = conj(conj(vis) * c)). */
inline void flush_sums(__global grid_real_t *grid, int cell, complex_t *sums, int conjugate)
{
#pragma unroll
    for (int pol = 0; pol < NPOL; ++pol) {
        complex_t s = sums[pol];
        if (conjugate)
            s.y = -s.y;
        const size_t at = (size_t)pol * GRID_SIZE * GRID_SIZE + cell;
{% if flush == "atomic" %}
        atomic_add_complex(grid, at, s);
{% else %}
        grid[2 * at] += s.x;
        grid[2 * at + 1] += s.y;
{% endif %}
        sums[pol] = (complex_t)(0, 0);
    }
}

/* Where a visibility puts the window, once per visibility (seed 004 §5's precomputed
   indices).  With lo = grid - S its first covered cell and r = lo mod W, the position
   p of a work-item lands on e = p + (p < r ? W : 0) cells past the subgrid origin
   lo - r.  Returned:
     x: r_u | r_v << 16 | moved << 31 (moved: the window differs from the previous one)
     y: flat grid cell of the subgrid origin
     z, w: the source's window_taps (for the tables' offset rows: where the rows of this
           visibility's u offset start, and its v offset). */
inline int4 window_of(SOURCE_PARAMS planned_vis p, int moved, int support, int width)
{
    const int lo_u = p.grid_u - support, lo_v = p.grid_v - support;
    const int r_u = lo_u % width, r_v = lo_v % width;
    const int2 taps = window_taps(SOURCE_PASS p, support, width, r_u, r_v);
    return (int4)(as_int((uint)r_u | (uint)r_v << 16 | (uint)moved << 31),
                  (lo_v - r_v) * GRID_SIZE + lo_u - r_u, taps.x, taps.y);
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void grid_moving_window(__global const int4 *restrict plan,        /* [num_vis], chunk order */
                        __global const complex_t *restrict vis,    /* [num_vis][NPOL], weighted */
                        SOURCE_ARGS
                        __global const int4 *restrict chunks,      /* first, count, support, conjugate */
                        __global const int2 *restrict work,        /* [group]: chunk, tile */
                        __global grid_real_t *grid)                     /* [NPOL][GRID_SIZE][GRID_SIZE] complex */
{
    __local int4 windows[BATCH];
    __local complex_t staged[BATCH * NPOL];
    WINDOW_LOCAL

    const int2 job = work[get_group_id(0)];
    const int4 chunk = chunks[job.x];
    const int first = chunk.x, end = chunk.x + chunk.y, support = chunk.z, conjugate = chunk.w;
    const int width = 2 * support + 1;
    const int row_stride = (2 * OFFSET_RANGE + 1) * width;

    /* This work-item's window positions (myU, myV of Algorithm 2), coarsened. */
    const int unit_cols = (width + COARSEN_U - 1) / COARSEN_U;
    const int unit_rows = (width + COARSEN_V - 1) / COARSEN_V;
    const int unit = job.y * WG_SIZE + get_local_id(0);
    const int unit_u = unit % unit_cols, unit_v = unit / unit_cols;
    int my_u[COARSEN_U], my_v[COARSEN_V];
    bool active_u[COARSEN_U], active_v[COARSEN_V];
#pragma unroll
    for (int a = 0; a < COARSEN_U; ++a) {
        my_u[a] = unit_u + a * unit_cols;
        active_u[a] = my_u[a] < width;
    }
#pragma unroll
    for (int b = 0; b < COARSEN_V; ++b) {
        my_v[b] = unit_v + b * unit_rows;
        active_v[b] = unit_v < unit_rows && my_v[b] < width;
    }

    /* sumXX .. sumYY and prevGridU/V of Algorithm 2, per owned position. */
    complex_t sums[COARSEN_V][COARSEN_U][NPOL];
    int owned[COARSEN_V][COARSEN_U];
#pragma unroll
    for (int b = 0; b < COARSEN_V; ++b)
#pragma unroll
        for (int a = 0; a < COARSEN_U; ++a) {
            owned[b][a] = -1;
#pragma unroll
            for (int pol = 0; pol < NPOL; ++pol)
                sums[b][a][pol] = (complex_t)(0, 0);
        }

    for (int batch_first = first; batch_first < end; batch_first += BATCH) {
        const int n = min(BATCH, end - batch_first);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = get_local_id(0); t < n; t += WG_SIZE) {
            const int i = batch_first + t;
            const int moved = i == first || any(plan[i].xy != plan[i - 1].xy);
            windows[t] = window_of(SOURCE_PASS decode_plan(plan[i]), moved, support, width);
            WINDOW_STAGE(t, i)
#pragma unroll
            for (int pol = 0; pol < NPOL; ++pol) {
                complex_t v = vis[(size_t)i * NPOL + pol];
                if (conjugate)
                    v.y = -v.y;
                staged[t * NPOL + pol] = v;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int i = 0; i < n; ++i) {    /* FOR time, chan: one staged visibility */
            const int4 window = windows[i];
            const int r_u = window.x & 0xffff, r_v = (window.x >> 16) & 0x7fff;
            const window_point at = WINDOW_POINT(i);
            complex_t v[NPOL];
#pragma unroll
            for (int pol = 0; pol < NPOL; ++pol)
                v[pol] = staged[i * NPOL + pol];

            /* myConvU/V = (grid - my) mod W, as a conditional add. */
            int e_u[COARSEN_U], e_v[COARSEN_V], row[COARSEN_V];
#pragma unroll
            for (int a = 0; a < COARSEN_U; ++a)
                e_u[a] = my_u[a] + (my_u[a] < r_u ? width : 0);
#pragma unroll
            for (int b = 0; b < COARSEN_V; ++b) {
                e_v[b] = my_v[b] + (my_v[b] < r_v ? width : 0);
                row[b] = window_row(window, e_v[b], r_v, support, row_stride);
            }

            /* IF the grid point changed THEN atomicAdd the sums, start new ones. */
            if (window.x < 0) {
#pragma unroll
                for (int b = 0; b < COARSEN_V; ++b)
#pragma unroll
                    for (int a = 0; a < COARSEN_U; ++a) {
                        const int cell = window.y + e_v[b] * GRID_SIZE + e_u[a];
                        if (active_u[a] && active_v[b] && cell != owned[b][a]) {
                            if (owned[b][a] >= 0)
                                flush_sums(grid, owned[b][a], sums[b][a], conjugate);
                            owned[b][a] = cell;
                        }
                    }
            }

            /* sum += vis * weight, for every polarisation. */
#pragma unroll
            for (int b = 0; b < COARSEN_V; ++b)
#pragma unroll
                for (int a = 0; a < COARSEN_U; ++a)
                    if (active_u[a] && active_v[b]) {
                        /* unconjugated: a chunk with w < 0 has its visibilities and sums conjugated */
                        const complex_t c = window_weight(SOURCE_STORE, at, row[b], e_u[a], r_u, support);
#pragma unroll
                        for (int pol = 0; pol < NPOL; ++pol)
                            sums[b][a][pol] += cmul(v[pol], c);
                    }
        }
    }

#pragma unroll
    for (int b = 0; b < COARSEN_V; ++b)
#pragma unroll
        for (int a = 0; a < COARSEN_U; ++a)
            if (owned[b][a] >= 0)
                flush_sums(grid, owned[b][a], sums[b][a], conjugate);
}
