{# One work-item per point (clgrid/strategies/points.py), for the w-stacking kernel source
    (source_stacked.cl): its 2W kernel values are computed once, in registers, then its
    W x W footprint is added with float atomics to one w-plane of the padded grid (spread)
    or gathered from it (interp).  The grid is periodic and indexed [u][v]: cell (iu, iv)
    at iu * NV + iv, and footprints wrap around its edges, which is exact for a discrete
    image (clgrid.sources.accuracy says why the kernel is what it is).
    Template variables: double, atomic, use_w and source_stacked.cl's. #}
{% include "common.cl" %}
{% include "plan_stacked.cl" %}
{% include "source_stacked.cl" %}

__kernel void spread(__global const int4 *restrict first,     /* [n]: first cell u, v, first plane */
                     __global const real4_t *restrict frac,   /* [n]: offsets of the first taps */
                     __global const complex_t *restrict vis,  /* [n]: weighted, phase-shifted */
                     __global real_t *grid,                   /* [NU][NV] complex */
                     const int nu, const int nv, const int plane, const int start, const int count)
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
                     const int nu, const int nv, const int plane, const int start, const int count)
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


