{# Planning of the w-gridding operator on the device (clgrid/wgrid_plan.py), in double with
   the very operations of wgrid_plan.plan_on_host, so that cells and offsets are
   bit-identical to the host's float64 planning (contraction into fma is off; ceil and
   the conversions are exact).

   1. classify: each (row, channel) sample's sort key (dropped samples: the last key);
   2. clgrid.device.counting_sort orders the samples by key and keeps where each key starts;
   3. positions: for each kept sample in that order, its first cells, offsets, source
      index (negative: conjugated) and phase factor.

   Keys (the order the spread wants): plane * KEYS_PER_PLANE + place, where place is the
   first u cell ("rows": owner-computes rows) or the bin of BIN_U x BIN_V cells holding
   the first cell ("bins": one work-group per bin).
   Template variables: double (offsets and phases in double), use_w, fold (w < 0 moved
   to -uvw), layout, bin_u, bin_v, keys_per_plane, num_planes, support. #}
{% include "complex.cl" %}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
#define SUPPORT {{ support }}
#define KEYS_PER_PLANE {{ keys_per_plane }}
#define NUM_PLANES {{ num_planes }}
#define DROPPED (NUM_PLANES * KEYS_PER_PLANE)

{% if double %}
typedef double4 real4_t;
{% else %}
typedef float4 real4_t;
{% endif %}

/* The geometry, as wgrid_plan.Geometry: scale factors from wavelengths to cells and
   planes, and the phase's centre and nshift. */
typedef struct {
    double sign_u, sign_v, sign_w;  /* the flips */
    double cells_u, cells_v;        /* nu * pixsize_x, nv * pixsize_y */
    double w_start, dw;
    double center_x, center_y, nshift;
    int nu, nv, nchan, nsample;
} geometry_t;

/* u, v, w in wavelengths of sample i (row i / nchan), flipped and folded; returns
   whether the point moved to -uvw. */
inline int point(__global const double *restrict uvw, __global const double *restrict scale,
                 const geometry_t g, const int i, double *u, double *v, double *w)
{
    const int row = i / g.nchan;
    const double f = scale[i - row * g.nchan];
    *u = uvw[3 * row] * g.sign_u * f;
    *v = uvw[3 * row + 1] * g.sign_v * f;
    *w = uvw[3 * row + 2] * g.sign_w * f;
{% if fold %}
    if (*w < 0) {
        *u = -*u;
        *v = -*v;
        *w = -*w;
        return 1;
    }
{% endif %}
    return 0;
}

inline int wrap(const double first, const int n)
{
    const long c = (long)first % n;
    return (int)(c < 0 ? c + n : c);
}

/* First cells (u, v mod the grid; first plane) and the first taps' offsets. */
inline int4 cells(const geometry_t g, const double u, const double v, const double w, double4 *frac)
{
    const double radius = SUPPORT / 2.0;
    const double pos_u = u * g.cells_u, pos_v = v * g.cells_v;
    const double first_u = ceil(pos_u - radius), first_v = ceil(pos_v - radius);
{% if use_w %}
    const double pos_w = (w - g.w_start) / g.dw;
    const double first_w = ceil(pos_w - radius);
    *frac = (double4)(first_u - pos_u, first_v - pos_v, first_w - pos_w, 0.0);
{% else %}
    const double first_w = 0.0;
    *frac = (double4)(first_u - pos_u, first_v - pos_v, 0.0, 0.0);
{% endif %}
    return (int4)(wrap(first_u, g.nu), wrap(first_v, g.nv), (int)first_w, 0);
}

inline int key_of(const int4 c, const geometry_t g)
{
{% if layout == "rows" %}
    return c.z * KEYS_PER_PLANE + c.x;
{% else %}
    const int bins_v = (g.nv + {{ bin_v }} - 1) / {{ bin_v }};
    return c.z * KEYS_PER_PLANE + (c.x / {{ bin_u }}) * bins_v + c.y / {{ bin_v }};
{% endif %}
}

/* keyed[i].x: sample i's key (DROPPED where masked or not finite: those are counted in
   bad[0]; a plane outside the stack, which the geometry rules out, in bad[1]). */
__kernel void classify(__global const double *restrict uvw, __global const double *restrict scale,
                       __global const uchar *restrict keep, const geometry_t g,
                       __global int4 *restrict keyed, __global int *restrict source,
                       __global int *restrict bad)
{
    const int i = get_global_id(0);
    if (i >= g.nsample)
        return;
    int key = DROPPED;
    if (!keep || keep[i]) {
        double u, v, w;
        point(uvw, scale, g, i, &u, &v, &w);
        if (!(isfinite(u) && isfinite(v) && isfinite(w))) {
            atomic_inc(&bad[0]);
        } else {
            double4 frac;
            const int4 c = cells(g, u, v, w, &frac);
{% if use_w %}
            if (c.z < 0 || c.z + SUPPORT > NUM_PLANES)
                atomic_inc(&bad[1]);
            else
{% endif %}
                key = key_of(c, g);
        }
    }
    keyed[i] = (int4)(key, 0, 0, 0);
    source[i] = i;
}

/* The plan of the k-th kept sample in key order (order[k]: its sample index). */
__kernel void positions(__global const double *restrict uvw, __global const double *restrict scale,
                        const geometry_t g, __global const int *restrict order, const int count,
                        __global int4 *restrict first, __global real4_t *restrict frac,
                        __global int *restrict src, __global complex_t *restrict phase)
{
    const int k = get_global_id(0);
    if (k >= count)
        return;
    const int i = order[k];
    double u, v, w;
    const int moved = point(uvw, scale, g, i, &u, &v, &w);
    double4 f;
    first[k] = cells(g, u, v, w, &f);
{% if double %}
    frac[k] = f;
{% else %}
    frac[k] = convert_float4(f);
{% endif %}
    src[k] = moved ? -i - 1 : i;
    if (phase) {
        const double cycles = u * g.center_x + v * g.center_y - w * g.nshift;
        double c;
        const double s = sincos(2 * M_PI * cycles, &c);
        phase[k] = (complex_t)(c, s);
    }
}
