{# Bins (clgrid/strategies/bins.py), for the w-stacking kernel source (source_stacked.cl).
    Template variables: double, atomic, use_w, plan and source (plan_stacked.cl and
    source_stacked.cl, read only through the names source_table.cl's header lists), the
    source's, bin_u, bin_v,
    keys_per_plane, wg, subproblem (points per work-group at most) and batch (points in
    local memory at a time). #}
{% include "common.cl" %}
{% include plan %}
{% include source %}

/* For GPUs (tuning: [wgridding] spread = "bins", parameters in [bins]): cuFINUFFT's
   "subproblem" method (Shih et al. 2021, IPDPSW) with the kernel values by Horner's rule.
   The points whose first cell lies in one bin of BIN_U x BIN_V cells (clgrid.planning.stacking's
   "bins" layout: starts[g][bin] is where those of first plane g begin) and that have a
   tap on this plane are cut into subproblems of at most SUBPROBLEM points
   (subproblems[i] = (bin, piece), made by the operator), so that the dense bins of a
   real array's core are shared among many work-groups.  A work-group spreads its points
   into a tile of local memory (the bin and the W - 1 cells its footprints reach beyond
   it), then adds the tile's non-zero cells to the grid with global atomics: one global
   addition per tile cell instead of one per visibility and cell.
   Within the tile every work-item owns cells, not points: the work-group loads BATCH
   (<= WG, what local memory holds) points at a time into local memory, each work-item computing one point's 2W kernel
   values; then the whole work-group takes the points one by one, each work-item adding
   to its own cells of the footprint with plain loads and stores, and a barrier before
   the next point (whose cells may be other work-items').  No atomics, and 2W kernel
   evaluations per point.  (cuFINUFFT gives each thread a point and adds to shared memory
   with atomics; on the H100 that mapping, with Horner's rule per cell and NVIDIA's
   red.shared, took about three times as long as this one: docs/benchmarks/kernels.md.) */
#define BIN_U {{ bin_u }}
#define BIN_V {{ bin_v }}
#define TILE_U (BIN_U + SOURCE_WIDTH - 1)
#define TILE_V (BIN_V + SOURCE_WIDTH - 1)
#define KEYS_PER_PLANE {{ keys_per_plane }}
#define WG {{ wg }}
#define SUBPROBLEM {{ subproblem }}
#define BATCH {{ batch }}
#define CELLS_PER_ITEM ((SOURCE_WIDTH * SOURCE_WIDTH + WG - 1) / WG)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void spread_bins(__global const int4 *restrict first, SOURCE_ARGS
                 __global const complex_t *restrict vis, __global real_t *grid,
                 __global const int *restrict starts, __global const int2 *restrict subproblems,
                 const int first_job, const int nu, const int nv, const int plane)
{
    __local complex_t tile[TILE_U * TILE_V];
    const int lid = get_local_id(0);
    const int2 job = subproblems[first_job + get_group_id(0)];
    const int bin = job.x;
    const int bins_v = (nv + BIN_V - 1) / BIN_V;
{% if use_w %}
    const int g_lo = max(0, plane - SOURCE_WIDTH + 1);
{% else %}
    const int g_lo = plane;
{% endif %}
    for (int c = lid; c < TILE_U * TILE_V; c += WG)
        tile[c] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int u0 = (bin / bins_v) * BIN_U, v0 = (bin % bins_v) * BIN_V;
    /* the points of one batch (their kernel values staged by the source: TILE_LOCAL), and
       this work-item's cells of every footprint */
    __local complex_t batch_v[BATCH];              /* value, times its weight on this plane */
    TILE_LOCAL
    __local int2 batch_cell[BATCH];                /* first cell, in the tile */
    int cell_a[CELLS_PER_ITEM], cell_b[CELLS_PER_ITEM];
    for (int i = 0; i < CELLS_PER_ITEM; ++i) {
        const int c = min(lid + i * WG, SOURCE_WIDTH * SOURCE_WIDTH - 1);
        cell_a[i] = c / SOURCE_WIDTH;
        cell_b[i] = c - cell_a[i] * SOURCE_WIDTH;
    }
    /* this work-group's points: [skip, skip + SUBPROBLEM) of the bin's runs, plane by plane */
    int skip = job.y * SUBPROBLEM, left = SUBPROBLEM;
    for (int g = g_lo; g <= plane && left > 0; ++g) {
        const int run = starts[g * KEYS_PER_PLANE + bin], count = starts[g * KEYS_PER_PLANE + bin + 1] - run;
        if (skip >= count) {
            skip -= count;
            continue;
        }
        const int start = run + skip, end = run + min(count, skip + left);
        left -= end - start;
        skip = 0;
        for (int at = start; at < end; at += BATCH) {
            const int n = min(BATCH, end - at);
            if (lid < n) {
                const int k = at + lid;
                const planned_vis p = decode_plan(first[k]);
                /* first cell along a row (v), its row (u), width, support */
                const int4 f = source_footprint(SOURCE_PASS p, k);
                TILE_STAGE(lid, tile_taps_of(SOURCE_PASS p, f.w, f.z, v0, k));
                batch_v[lid] = vis[k] * source_plane_weight(SOURCE_PASS p, k, plane);
                batch_cell[lid] = (int2)(f.y - u0, f.x - v0);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = 0; e < n; ++e) {
                const int2 cell = batch_cell[e];
                const complex_t v = batch_v[e];
                #pragma unroll
                for (int i = 0; i < CELLS_PER_ITEM; ++i)
                    if (lid + i * WG < SOURCE_WIDTH * SOURCE_WIDTH)
                        tile[(cell.x + cell_a[i]) * TILE_V + cell.y + cell_b[i]]
                            += v * tile_weight(TILE_STORE(e), 0, SOURCE_WIDTH, cell_b[i], cell_a[i]);
                barrier(CLK_LOCAL_MEM_FENCE);   /* the next point's cells may be others' */
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int c = lid; c < TILE_U * TILE_V; c += WG) {
        const complex_t value = tile[c];
        if (value.x == 0 && value.y == 0)
            continue;
        int iu = u0 + c / TILE_V, iv = v0 + c % TILE_V;
        if (iu >= nu)
            iu -= nu;
        if (iv >= nv)
            iv -= nv;
        atomic_add_complex(grid, (size_t)iu * nv + iv, value);
    }
}


/* The work-groups of each plane (BinsGridding.arrange), on the device: pieces[p][b], how
   many pieces of at most SUBPROBLEM the points with a tap on plane p (first planes
   p - REACH + 1 .. p) whose first cell is in bin b make, from the table of where each
   (first plane, bin) run starts; entry num_planes * KEYS_PER_PLANE is 0, so that its
   exclusive scan ends with the total. */
__kernel void count_pieces(__global const int *restrict starts, const int num_planes, const int reach,
                           __global int *restrict pieces)
{
    const int i = get_global_id(0);
    const int n = num_planes * KEYS_PER_PLANE;
    if (i > n)
        return;
    if (i == n) {
        pieces[i] = 0;
        return;
    }
    const int p = i / KEYS_PER_PLANE, b = i - p * KEYS_PER_PLANE;
    int total = 0;
    for (int g = max(0, p - reach + 1); g <= p; ++g)
        total += starts[g * KEYS_PER_PLANE + b + 1] - starts[g * KEYS_PER_PLANE + b];
    pieces[i] = (total + SUBPROBLEM - 1) / SUBPROBLEM;
}

/* jobs[first_job[i] + k] = (bin, k) for each piece k of entry i (plane-major). */
__kernel void list_jobs(__global const int *restrict pieces, __global const int *restrict first_job, const int n,
                        __global int2 *restrict jobs)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int b = i % KEYS_PER_PLANE, first = first_job[i], count = pieces[i];
    for (int k = 0; k < count; ++k)
        jobs[first + k] = (int2)(b, k);
}
