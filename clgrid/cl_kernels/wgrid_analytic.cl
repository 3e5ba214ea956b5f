{# Spreading and interpolation with the analytic exponential-of-semicircle kernel, for the
    w-gridding operator (clgrid/wgridding.py).  One work-item per visibility: its 2W
    (3W with w) kernel values are computed once, in registers, then the W x W footprint is
    added atomically to one w-plane of the padded grid (spread) or gathered from it
    (interp).  The grid is periodic and indexed [u][v]: cell (iu, iv) at iu * NV + iv, and
    footprints wrap around its edges, which is exact for a discrete image (clgrid.sources.accuracy
    says why the kernel is what it is).
    Template variables: double, atomic, use_w (bool) and es_horner.cl's (the kernel, shared
    with the seeds' work distributions); for the "bins" spread bin_u, bin_v,
    keys_per_plane, wg, subproblem (points per work-group at most) and batch (points in
    local memory at a time). #}
{% include "common.cl" %}
{% include "es_horner.cl" %}
#define SUPPORT ES_WIDTH
{% if double %}
typedef double4 real4_t;
{% else %}
typedef float4 real4_t;
{% endif %}

/* The visibility's weight on w-plane `plane` (1 without w-gridding): tap plane - first. */
inline real_t plane_weight(const int4 first, const real4_t frac, const int plane)
{
{% if use_w %}
    return es_piece(plane - first.z, (real_t)2 * frac.z + (real_t)(SUPPORT - 1));
{% else %}
    return (real_t)1;
{% endif %}
}

__kernel void spread(__global const int4 *restrict first,     /* [n]: first cell u, v, first plane */
                     __global const real4_t *restrict frac,   /* [n]: offsets of the first taps */
                     __global const complex_t *restrict vis,  /* [n]: weighted, phase-shifted */
                     __global real_t *grid,                   /* [NU][NV] complex */
                     const int nu, const int nv, const int plane, const int start, const int count,
                     const real_t beta)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    const int k = start + i;
    const int4 f = first[k];
    const real4_t x = frac[k];
    real_t ku[SUPPORT], kv[SUPPORT];
    es_taps(ku, x.x);
    es_taps(kv, x.y);
    const complex_t v = vis[k] * plane_weight(f, x, plane);
    int iu = f.x;
    for (int a = 0; a < SUPPORT; ++a, ++iu) {
        if (iu >= nu)
            iu -= nu;
        const complex_t vu = v * ku[a];
        const size_t row = (size_t)iu * nv;
        int iv = f.y;
        for (int b = 0; b < SUPPORT; ++b, ++iv) {
            if (iv >= nv)
                iv -= nv;
            atomic_add_complex(grid, row + iv, vu * kv[b]);
        }
    }
}

__kernel void interp(__global const int4 *restrict first,
                     __global const real4_t *restrict frac,
                     __global const complex_t *restrict grid,  /* [NU][NV] */
                     __global complex_t *vis,                  /* [n]: this plane's share is added */
                     const int nu, const int nv, const int plane, const int start, const int count,
                     const real_t beta)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    const int k = start + i;
    const int4 f = first[k];
    const real4_t x = frac[k];
    real_t ku[SUPPORT], kv[SUPPORT];
    es_taps(ku, x.x);
    es_taps(kv, x.y);
    complex_t sum = (complex_t)(0, 0);
    int iu = f.x;
    for (int a = 0; a < SUPPORT; ++a, ++iu) {
        if (iu >= nu)
            iu -= nu;
        const size_t row = (size_t)iu * nv;
        complex_t rsum = (complex_t)(0, 0);
        int iv = f.y;
        for (int b = 0; b < SUPPORT; ++b, ++iv) {
            if (iv >= nv)
                iv -= nv;
            rsum += grid[row + iv] * kv[b];
        }
        sum += rsum * ku[a];
    }
    vis[k] += sum * plane_weight(f, x, plane);
}


{% if bin_u %}
/* -- The "bins" variant (tuning: [wgridding] spread = "bins"), for GPUs: cuFINUFFT's
   "subproblem" method (Shih et al. 2021, IPDPSW) with the kernel values by Horner's rule.
   The points whose first cell lies in one bin of BIN_U x BIN_V cells (wgrid_plan's
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
   red.shared, took 1.29 ms where this one takes 0.46 ms: clgrid/platforms/nvidia.toml.) */
#define BIN_U {{ bin_u }}
#define BIN_V {{ bin_v }}
#define TILE_U (BIN_U + SUPPORT - 1)
#define TILE_V (BIN_V + SUPPORT - 1)
#define KEYS_PER_PLANE {{ keys_per_plane }}
#define WG {{ wg }}
#define SUBPROBLEM {{ subproblem }}
#define BATCH {{ batch }}
#define CELLS_PER_ITEM ((SUPPORT * SUPPORT + WG - 1) / WG)
/* a point's kernel values in local memory at an odd stride: the work-items reading one
   point's W values, and those writing W values of consecutive points, hit distinct banks */
#define KSTRIDE (SUPPORT | 1)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void spread_bins(__global const int4 *restrict first, __global const real4_t *restrict frac,
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
    const int g_lo = max(0, plane - SUPPORT + 1);
{% else %}
    const int g_lo = plane;
{% endif %}
    for (int c = lid; c < TILE_U * TILE_V; c += WG)
        tile[c] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int u0 = (bin / bins_v) * BIN_U, v0 = (bin % bins_v) * BIN_V;
    /* the points of one batch, and this work-item's cells of every footprint */
    __local complex_t batch_v[BATCH];              /* value, times its weight on this plane */
    __local real_t batch_ku[BATCH][KSTRIDE], batch_kv[BATCH][KSTRIDE];
    __local int2 batch_cell[BATCH];                /* first cell, in the tile */
    int cell_a[CELLS_PER_ITEM], cell_b[CELLS_PER_ITEM];
    for (int i = 0; i < CELLS_PER_ITEM; ++i) {
        const int c = min(lid + i * WG, SUPPORT * SUPPORT - 1);
        cell_a[i] = c / SUPPORT;
        cell_b[i] = c - cell_a[i] * SUPPORT;
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
                const int4 f = first[k];
                const real4_t x = frac[k];
                real_t t[SUPPORT];
                es_taps(t, x.x);
                for (int j = 0; j < SUPPORT; ++j)
                    batch_ku[lid][j] = t[j];
                es_taps(t, x.y);
                for (int j = 0; j < SUPPORT; ++j)
                    batch_kv[lid][j] = t[j];
                batch_v[lid] = vis[k] * plane_weight(f, x, plane);
                batch_cell[lid] = (int2)(f.x - u0, f.y - v0);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = 0; e < n; ++e) {
                const int2 cell = batch_cell[e];
                const complex_t v = batch_v[e];
                #pragma unroll
                for (int i = 0; i < CELLS_PER_ITEM; ++i)
                    if (lid + i * WG < SUPPORT * SUPPORT)
                        tile[(cell.x + cell_a[i]) * TILE_V + cell.y + cell_b[i]]
                            += v * (batch_ku[e][cell_a[i]] * batch_kv[e][cell_b[i]]);
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
{% endif %}


/* -- The "rows" variant (tuning: [wgridding] spread = "rows"), for CPUs, where float
   atomics are compare-and-swap loops: every kernel value is computed once per operator
   into `tap`, and spreading is owner-computes, one work-item per grid row, no atomics.
   Visibilities are sorted by first plane, then first u cell; row_start[g][u] is where
   those with first plane g and first u cell u begin (row_start[g][nu] where they end). */
{% if use_w %}
#define TAPS (3 * SUPPORT)
{% else %}
#define TAPS (2 * SUPPORT)
{% endif %}

__kernel void compute_taps(__global const real4_t *restrict frac, __global real_t *restrict tap,
                           const int count)
{
    const int k = get_global_id(0);
    if (k >= count)
        return;
    const real4_t x = frac[k];
    real_t t[SUPPORT];
    __global real_t *out = tap + (size_t)k * TAPS;
    es_taps(t, x.x);
    for (int j = 0; j < SUPPORT; ++j)
        out[j] = t[j];
    es_taps(t, x.y);
    for (int j = 0; j < SUPPORT; ++j)
        out[SUPPORT + j] = t[j];
{% if use_w %}
    es_taps(t, x.z);
    for (int j = 0; j < SUPPORT; ++j)
        out[2 * SUPPORT + j] = t[j];
{% endif %}
}

__kernel void spread_rows(__global const int4 *restrict first,
                          __global const real_t *restrict tap,       /* [n][TAPS] */
                          __global const complex_t *restrict vis,
                          __global complex_t *grid,                  /* [NU][NV] */
                          __global const int *restrict row_start,    /* [planes][nu + 1] */
                          const int nu, const int nv, const int plane)
{
    const int iu = get_global_id(0);
    if (iu >= nu)
        return;
    __global complex_t *row = grid + (size_t)iu * nv;
{% if use_w %}
    const int g_lo = max(0, plane - SUPPORT + 1);
{% else %}
    const int g_lo = plane;
{% endif %}
    for (int g = g_lo; g <= plane; ++g) {
        __global const int *rs = row_start + (size_t)g * (nu + 1);
        for (int a = 0; a < SUPPORT; ++a) {
            const int u0 = iu - a < 0 ? iu - a + nu : iu - a;
            const int end = rs[u0 + 1];
            for (int k = rs[u0]; k < end; ++k) {
                __global const real_t *t = tap + (size_t)k * TAPS;
{% if use_w %}
                const complex_t v = vis[k] * (t[a] * t[2 * SUPPORT + plane - g]);
{% else %}
                const complex_t v = vis[k] * t[a];
{% endif %}
                const int iv = first[k].y;
                if (iv + SUPPORT <= nv) {
                    for (int b = 0; b < SUPPORT; ++b)
                        row[iv + b] += v * t[SUPPORT + b];
                } else {
                    for (int b = 0; b < SUPPORT; ++b)
                        row[(iv + b) % nv] += v * t[SUPPORT + b];
                }
            }
        }
    }
}

/* Gather as `interp`, with the kernel values read from `tap`. */
__kernel void interp_taps(__global const int4 *restrict first,
                          __global const real_t *restrict tap,
                          __global const complex_t *restrict grid,
                          __global complex_t *vis,
                          const int nu, const int nv, const int plane, const int start, const int count)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    const int k = start + i;
    const int4 f = first[k];
    __global const real_t *t = tap + (size_t)k * TAPS;
    complex_t sum = (complex_t)(0, 0);
    int iu = f.x;
    for (int a = 0; a < SUPPORT; ++a, ++iu) {
        if (iu >= nu)
            iu -= nu;
        __global const complex_t *row = grid + (size_t)iu * nv;
        complex_t rsum = (complex_t)(0, 0);
        if (f.y + SUPPORT <= nv) {
            for (int b = 0; b < SUPPORT; ++b)
                rsum += row[f.y + b] * t[SUPPORT + b];
        } else {
            for (int b = 0; b < SUPPORT; ++b)
                rsum += row[(f.y + b) % nv] * t[SUPPORT + b];
        }
        sum += rsum * t[a];
    }
{% if use_w %}
    vis[k] += sum * t[2 * SUPPORT + plane - f.z];
{% else %}
    vis[k] += sum;
{% endif %}
}


/* -- The data in and out, on the device: the kept visibilities in plan order from the
   caller's (nrow * nchan) array, weighted, conjugated where the point moved to -uvw
   (src < 0: index -src - 1) and phase-shifted (centre and nshift); scatter_vis is its
   adjoint, into a zeroed (nrow * nchan) array. */
__kernel void gather_vis(__global const complex_t *restrict vis_in, __global const real_t *restrict wgt,
                         __global const int *restrict src, __global const complex_t *restrict phase,
                         __global complex_t *restrict out, const int count, const int use_wgt,
                         const int use_phase, __global int *restrict tally)
{
    /* tally: [0] non-finite visibilities, [1] non-finite weights, [2] non-zero weighted
       visibilities, among the kept ones (the operator refuses the first two and warns
       when the last is 0). */
    __local int seen[3];
    const int lid = get_local_id(0);
    if (lid < 3)
        seen[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int k = get_global_id(0);
    if (k < count) {
        const int s = src[k];
        const int i = s < 0 ? -s - 1 : s;
        complex_t v = vis_in[i];
        if (!(isfinite(v.x) && isfinite(v.y)))
            atomic_inc(&seen[0]);
        if (use_wgt) {
            const real_t w = wgt[i];
            if (!isfinite(w))
                atomic_inc(&seen[1]);
            v *= w;
        }
        if (v.x != 0 || v.y != 0)
            atomic_inc(&seen[2]);
        if (s < 0)
            v.y = -v.y;
        if (use_phase)
            v = cmul(v, phase[k]);
        out[k] = v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < 3 && seen[lid])
        atomic_add(&tally[lid], seen[lid]);
}

__kernel void scatter_vis(__global const complex_t *restrict values, __global const real_t *restrict wgt,
                          __global const int *restrict src, __global const complex_t *restrict phase,
                          __global complex_t *restrict out, const int count, const int use_wgt,
                          const int use_phase, __global int *restrict tally)
{
    /* tally[1]: non-finite weights among the kept visibilities. */
    const int k = get_global_id(0);
    if (k >= count)
        return;
    const int s = src[k];
    const int i = s < 0 ? -s - 1 : s;
    complex_t v = values[k];
    if (use_phase)
        v = cmul_conj(v, phase[k]);
    if (s < 0)
        v.y = -v.y;
    if (use_wgt) {
        const real_t w = wgt[i];
        if (!isfinite(w))
            atomic_inc(&tally[1]);
        v *= w;
    }
    out[i] = v;
}
