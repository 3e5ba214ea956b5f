{# Spreading and interpolation with the analytic exponential-of-semicircle kernel, for the
    w-gridding operator (clgrid/wgridding.py).  One work-item per visibility: its 2W
    (3W with w) kernel values are computed once, in registers, then the W x W footprint is
    added atomically to one w-plane of the padded grid (spread) or gathered from it
    (interp).  The grid is periodic and indexed [u][v]: cell (iu, iv) at iu * NV + iv, and
    footprints wrap around its edges, which is exact for a discrete image (clgrid.accuracy
    says why the kernel is what it is).
    Template variables: double, atomic, support (W), use_w (bool). #}
{% include "common.cl" %}
#define SUPPORT {{ support }}
{% if double %}
typedef double4 real4_t;
{% else %}
typedef float4 real4_t;
{% endif %}

/* psi(x) = exp(beta (sqrt(1 - x^2) - 1)) on |x| < 1, else 0. */
inline real_t es_kernel(const real_t x, const real_t beta)
{
    const real_t r = (real_t)1 - x * x;
    return r > (real_t)0 ? exp(beta * (sqrt(r) - (real_t)1)) : (real_t)0;
}

/* Kernel values of one visibility along one axis: tap j sits (frac + j) cells from it,
   frac in [-W/2, -W/2 + 1). */
inline void taps(real_t *k, const real_t frac, const real_t beta)
{
    const real_t scale = (real_t)2 / (real_t)SUPPORT;
    for (int j = 0; j < SUPPORT; ++j)
        k[j] = es_kernel((frac + (real_t)j) * scale, beta);
}

/* The visibility's weight on w-plane `plane` (1 without w-gridding). */
inline real_t plane_weight(const int4 first, const real4_t frac, const int plane, const real_t beta)
{
{% if use_w %}
    return es_kernel((frac.z + (real_t)(plane - first.z)) * ((real_t)2 / (real_t)SUPPORT), beta);
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
    taps(ku, x.x, beta);
    taps(kv, x.y, beta);
    const complex_t v = vis[k] * plane_weight(f, x, plane, beta);
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
    taps(ku, x.x, beta);
    taps(kv, x.y, beta);
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
    vis[k] += sum * plane_weight(f, x, plane, beta);
}
