{# Rows (clgrid/strategies/rows.py, the imaging operator's), for the w-stacking kernel source
    (source_stacked.cl): owner-computes, one work-item per grid row, no atomics.
    Template variables: double, use_w, tap_single (the kernel values kept in float),
    value_single (value_types.cl), plan and source (plan_stacked.cl and source_stacked.cl,
    read only through the names their headers list) and the source's. #}
{% include "complex.cl" %}
{% include "value_types.cl" %}
{% include plan %}
{% include source %}

/* For CPUs (tuning: [wgridding] spread = "rows"), where float
   atomics are compare-and-swap loops: every kernel value is computed once per operator
   into `tap` (W along u, W along v and, with w, the one on the plane; in tap_t: float where
   the operator's epsilon allows, clgrid/strategies/rows_stacked.py), with its first cells
   as an int2 `cell` (first v cell; first u cell + first plane * (nu + 1), the layout's key,
   below 2^31), and spreading is owner-computes, one work-item per grid row, no atomics.  Visibilities are sorted by
   first plane, then first u cell; row_start[g][u] is where those with first plane g and
   first u cell u begin (row_start[g][nu] where they end). */
{% if tap_single %}
typedef float tap_t;
{% else %}
typedef real_t tap_t;
{% endif %}
/* A point's values: W along u and W along v in `tap`; with w, its value on the plane being
   spread in `wv` (tap_t), written per plane by plane_values from `wz` (the polynomial
   argument of its first plane's value, real_t): one value kept rather than W, for one
   evaluation per point and plane against its W x W cells' work. */
#define TAPS (2 * SOURCE_WIDTH)

__kernel void compute_taps(SOURCE_ARGS __global tap_t *restrict tap,
                           __global real_t *restrict wz, __global const int4 *restrict first,
                           __global int2 *restrict cell, const int nu, const int count)
{
    const int k = get_global_id(0);
    if (k >= count)
        return;
    POINT_SETUP
    const planned_vis p = decode_plan(first[k]);
    /* first cell along a row (v), its row (u), width, support */
    const int4 f = source_footprint(SOURCE_PASS p, k);
    cell[k] = (int2)(f.x, f.y + p.plane * (nu + 1));
    const point_taps taps = point_taps_of(SOURCE_PASS p, f.w, k);
    __global tap_t *out = tap + (size_t)k * TAPS;
    for (int j = 0; j < SOURCE_WIDTH; ++j)
        out[j] = (tap_t)point_row(SOURCE_STORE, taps, j - f.w);
    for (int j = 0; j < SOURCE_WIDTH; ++j)
        out[SOURCE_WIDTH + j] = (tap_t)point_column(SOURCE_STORE, taps, j - f.w);
{% if use_w %}
    wz[k] = source_plane_arg(SOURCE_PASS p, k);
{% endif %}
}

/* The values on `plane` of the points start .. start + count - 1 (those with a tap on it). */
__kernel void plane_values(__global const int2 *restrict cell, __global const real_t *restrict wz,
                           __global tap_t *restrict wv, const int nu, const int plane, const int start,
                           const int count)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    const int k = start + i;
    wv[k] = (tap_t)source_plane_weight_at(wz[k], plane - cell[k].y / (nu + 1));
}

__kernel void spread_rows(__global const int2 *restrict cell,
                          __global const tap_t *restrict tap,       /* [n][TAPS] */
                          __global const tap_t *restrict wv,        /* [n]: on the plane */
                          __global const value_t *restrict vis,
                          __global complex_t *grid,                  /* [NU][NV] */
                          __global const int *restrict row_start,    /* [planes][nu + 1] */
                          const int nu, const int nv, const int plane)
{
    const int iu = get_global_id(0);
    if (iu >= nu)
        return;
    __global complex_t *row = grid + (size_t)iu * nv;
{% if use_w %}
    const int g_lo = max(0, plane - SOURCE_WIDTH + 1);
{% else %}
    const int g_lo = plane;
{% endif %}
    for (int g = g_lo; g <= plane; ++g) {
        __global const int *rs = row_start + (size_t)g * (nu + 1);
        for (int a = 0; a < SOURCE_WIDTH; ++a) {
            const int u0 = iu - a < 0 ? iu - a + nu : iu - a;
            const int end = rs[u0 + 1];
            for (int k = rs[u0]; k < end; ++k) {
                __global const tap_t *t = tap + (size_t)k * TAPS;
{% if use_w %}
                const complex_t v = AS_COMPLEX(vis[k]) * ((real_t)t[a] * (real_t)wv[k]);
{% else %}
                const complex_t v = AS_COMPLEX(vis[k]) * (real_t)t[a];
{% endif %}
                const int iv = cell[k].x;
                if (iv + SOURCE_WIDTH <= nv) {
                    for (int b = 0; b < SOURCE_WIDTH; ++b)
                        row[iv + b] += v * (real_t)t[SOURCE_WIDTH + b];
                } else {
                    for (int b = 0; b < SOURCE_WIDTH; ++b)
                        row[(iv + b) % nv] += v * (real_t)t[SOURCE_WIDTH + b];
                }
            }
        }
    }
}

/* Gather as `interp`, with the kernel values along u and v read from `tap`, the one on
   the plane evaluated. */
__kernel void interp_taps(__global const int2 *restrict cell,
                          __global const tap_t *restrict tap,
                          __global const real_t *restrict wz,
                          __global const complex_t *restrict grid,
                          __global value_t *vis,
                          const int nu, const int nv, const int plane, const int start, const int count)
{
    const int i = get_global_id(0);
    if (i >= count)
        return;
    const int k = start + i;
    const int2 c = cell[k];
    const int fz = c.y / (nu + 1);
    const int4 f = (int4)(c.y - fz * (nu + 1), c.x, fz, 0);
    __global const tap_t *t = tap + (size_t)k * TAPS;
    complex_t sum = (complex_t)(0, 0);
    int iu = f.x;
    for (int a = 0; a < SOURCE_WIDTH; ++a, ++iu) {
        if (iu >= nu)
            iu -= nu;
        __global const complex_t *row = grid + (size_t)iu * nv;
        complex_t rsum = (complex_t)(0, 0);
        if (f.y + SOURCE_WIDTH <= nv) {
            for (int b = 0; b < SOURCE_WIDTH; ++b)
                rsum += row[f.y + b] * (real_t)t[SOURCE_WIDTH + b];
        } else {
            for (int b = 0; b < SOURCE_WIDTH; ++b)
                rsum += row[(f.y + b) % nv] * (real_t)t[SOURCE_WIDTH + b];
        }
        sum += rsum * (real_t)t[a];
    }
{% if use_w %}
    vis[k] = AS_VALUE(AS_COMPLEX(vis[k]) + sum * source_plane_weight_at(wz[k], plane - f.z));
{% else %}
    vis[k] = AS_VALUE(AS_COMPLEX(vis[k]) + sum);
{% endif %}
}
