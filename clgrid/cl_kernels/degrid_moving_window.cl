{# Moving-window degridder: seed 004's moving window run backwards, as in seed 001.
    A work-group per segment of a track (consecutive time steps of one baseline and
    channel, clgrid/strategies/track_chunks.py) and per tile of the window; one launch
    per window width.  Work-item (x, y) of the window owns the grid points u' = x,
    v' = y (mod window); the window is at least as wide as every
    footprint in the segment, so the work-item holds at most one point of any
    footprint.  It keeps that point's grid values in registers while the track moves,
    reloading them only when its point changes, and contributes grid * conj(weight).
    Per-visibility partial sums are reduced in local memory, a batch of BATCH
    visibilities at a time; where the window needs several groups, each adds its sums
    to the (zeroed) visibilities atomically.
    Template variables: double, atomic, npol, oversample, grid_size, vis_per_batch. #}
{% include "common.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define BATCH {{ vis_per_batch }}
#define VALUES (BATCH * NPOL)
{% include "plan.cl" %}
{% include "kernel_taps.cl" %}
{% include "reduce.cl" %}

/* The point = `point` (mod window) in [lo, lo + window).  A track moves by about a cell
   per step, so the loops run once or not at all: no modulo per visibility. */
inline int follow(int point, int lo, int window)
{
    while (point < lo)
        point += window;
    while (point >= lo + window)
        point -= window;
    return point;
}

/* The same, from scratch: once per segment. */
inline int place(int residue, int lo, int window)
{
    return lo + ((residue - lo) % window + window) % window;
}

__kernel void degrid_moving_window(
    __global const int4 *restrict plan,          /* [num_vis], track by track, in time order */
    __global const complex_t *restrict kernels,  /* tables by offset */
    __global const int *restrict kernel_start,   /* [plane] */
    __global const int *restrict support,        /* [plane] */
    __global const complex_t *restrict grid,     /* [NPOL][GRID_SIZE][GRID_SIZE] */
    __global complex_t *restrict vis,            /* [num_vis][NPOL], plan order, zeroed */
    __global const int4 *restrict segments,      /* first visibility, count, widest support, - */
    const int first_segment,                     /* this launch's: segment first_segment + group z */
    const int window,                            /* >= 2 * support + 1 along the segment */
    __local complex_t *partials)                 /* [VALUES][local size] */
{
    const int4 segment = segments[first_segment + get_group_id(2)];
    const int x = get_global_id(0), y = get_global_id(1);
    const int owner = x < window && y < window;
    const int lanes = get_local_size(0) * get_local_size(1);
    const int lane = get_local_id(1) * get_local_size(0) + get_local_id(0);
    const int shared = get_num_groups(0) * get_num_groups(1) > 1;  /* other tiles add to the same vis */
    const size_t pol_stride = (size_t)GRID_SIZE * GRID_SIZE;

    const planned_vis start = decode_plan(plan[segment.x]);
    const int s0 = support[start.plane];
    int u = place(x, start.grid_u - s0, window), v = place(y, start.grid_v - s0, window);
    int held_u = -1, held_v = -1;                 /* the point whose grid values are held */
    complex_t held[NPOL];

    for (int done = 0; done < segment.y; done += BATCH) {
        for (int r = 0; r < BATCH; ++r) {
            complex_t part[NPOL];
            for (int pol = 0; pol < NPOL; ++pol)
                part[pol] = (complex_t)(0);
            if (owner && done + r < segment.y) {
                const planned_vis p = decode_plan(plan[segment.x + done + r]);
                const int s = support[p.plane];
                u = follow(u, p.grid_u - s, window);
                v = follow(v, p.grid_v - s, window);
                const int k = u - p.grid_u, j = v - p.grid_v;
                if (k <= s && j <= s) {
                    if (u != held_u || v != held_v) {
                        for (int pol = 0; pol < NPOL; ++pol)
                            held[pol] = grid[pol * pol_stride + (size_t)v * GRID_SIZE + u];
                        held_u = u;
                        held_v = v;
                    }
                    const complex_t c = kernels[tap_index(taps_of(p, s, kernel_start[p.plane]), j, k)];
                    const complex_t weight = p.conjugate ? (complex_t)(c.x, -c.y) : c;
                    for (int pol = 0; pol < NPOL; ++pol)
                        part[pol] = cmul_conj(held[pol], weight);
                }
            }
            for (int pol = 0; pol < NPOL; ++pol)
                partials[(r * NPOL + pol) * lanes + lane] = part[pol];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        fold_partials(partials, lanes, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int m = lane; m < VALUES && done + m / NPOL < segment.y; m += lanes) {
            const size_t out = (size_t)(segment.x + done) * NPOL + m;
            const complex_t sum = folded_sum(partials, lanes, m);
            if (shared)
                atomic_add_complex((__global grid_real_t *)vis, out, sum);
            else
                vis[out] = sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
