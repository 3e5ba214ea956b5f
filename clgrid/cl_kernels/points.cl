{# One work-item per point (clgrid/strategies/points.py), for the w-stacking kernel source
    (source_stacked.cl, through the names every source defines): its 2W kernel values are
    computed once, in registers, then its W x W footprint is added with float atomics to one
    w-plane of the padded grid (spread) or gathered from it (interp).  The grid is periodic
    and indexed [u][v]: cell (iu, iv) at iu * NV + iv, and footprints wrap around its edges,
    which is exact for a discrete image (clgrid.sources.accuracy says why the kernel is what
    it is).  The plan (plan_stacked.cl) names the grid's v the axis along a row (grid_u).
    Template variables: double, atomic, plan, source (and the source's). #}
{% include "common.cl" %}
{% include plan %}
{% include source %}

__kernel void spread(__global const int4 *restrict first,     /* [n]: first cell u, v, first plane */
                     SOURCE_ARGS
                     __global const complex_t *restrict vis,  /* [n]: weighted, phase-shifted */
                     __global real_t *grid,                   /* [NU][NV] complex */
                     const int nu, const int nv, const int plane, const int start, const int count)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    POINT_SETUP
    const int k = start + i;
    const planned_vis p = decode_plan(first[k]);
    const int4 f = source_footprint(SOURCE_PASS p, k);   /* first cell along a row (v), its row (u), width, support */
    const point_taps taps = point_taps_of(SOURCE_PASS p, f.w, k);
    const complex_t v = vis[k] * source_plane_weight(SOURCE_PASS p, k, plane);
    int iu = f.y;
    for (int a = 0; a < f.z; ++a, ++iu) {
        if (iu >= nu)
            iu -= nu;
        const tap_row row = point_row(SOURCE_STORE, taps, a - f.w);
        const size_t cells = (size_t)iu * nv;
        int iv = f.x;
        for (int b = 0; b < f.z; ++b, ++iv) {
            if (iv >= nv)
                iv -= nv;
            atomic_add_complex(grid, cells + iv,
                               v * source_conj(point_weight_in_row(SOURCE_STORE, taps, row, a - f.w, b - f.w),
                                               p.conjugate));
        }
    }
}

__kernel void interp(__global const int4 *restrict first,
                     SOURCE_ARGS
                     __global const complex_t *restrict grid,  /* [NU][NV] */
                     __global complex_t *vis,                  /* [n]: this plane's share is added */
                     const int nu, const int nv, const int plane, const int start, const int count)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    POINT_SETUP
    const int k = start + i;
    const planned_vis p = decode_plan(first[k]);
    const int4 f = source_footprint(SOURCE_PASS p, k);
    const point_taps taps = point_taps_of(SOURCE_PASS p, f.w, k);
    complex_t sum = (complex_t)(0, 0);
    int iu = f.y;
    for (int a = 0; a < f.z; ++a, ++iu) {
        if (iu >= nu)
            iu -= nu;
        const tap_row row = point_row(SOURCE_STORE, taps, a - f.w);
        const size_t cells = (size_t)iu * nv;
        int iv = f.x;
        for (int b = 0; b < f.z; ++b, ++iv) {
            if (iv >= nv)
                iv -= nv;
            sum += grid[cells + iv] * source_conj(point_weight_in_row(SOURCE_STORE, taps, row, a - f.w, b - f.w),
                                                  p.conjugate);
        }
    }
    vis[k] += sum * source_plane_weight(SOURCE_PASS p, k, plane);
}
