{# Values per call (clgrid/values.py): the plan holds positions only, so each call
   gathers its visibilities into the strategy's order (weighted, flagged ones zero) or
   scatters degridded ones back to the caller's order.

   Template variables: double (the strategy's precision), vis_double (the caller's
   visibilities are complex128), weights ("none", "sample": one per (row, channel),
   "pol": one per visibility), weights_double, flags (bool: per-polarisation flags),
   npol.  The norm's sum is a pyopencl reduction (clgrid/values.py). #}
{% include "complex.cl" %}
{% if vis_double or weights_double %}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
{% endif %}
#define NPOL {{ npol }}
{% if vis_double %}
typedef double2 vis_t;
{% else %}
typedef float2 vis_t;
{% endif %}
{% if weights_double %}
typedef double weight_t;
{% else %}
typedef float weight_t;
{% endif %}
/* the weighted value is formed in the widest of the caller's and the operator's precisions:
   single-precision data gridded in double are weighted in double, as the reference does */
{% if double or vis_double or weights_double %}
typedef double product_t;
{% else %}
typedef float product_t;
{% endif %}

/* out[i] = vis[source[i]] * weight, per polarisation: zero where flagged or weighted 0
   (whatever the value, NaN included). bad[0] counts non-finite values that would be
   gridded, bad[1] weights that are negative or not finite. */
__kernel void gather_weighted(__global const vis_t *restrict vis, __global const weight_t *restrict weights,
                              __global const uchar *restrict flags, __global const int *restrict source,
                              const int n, __global complex_t *restrict out, __global int *restrict bad)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int s = source[i];
    for (int p = 0; p < NPOL; ++p) {
        const int k = s * NPOL + p;
{% if weights == "pol" %}
        weight_t w = weights[k];
{% elif weights == "sample" %}
        weight_t w = weights[s];
{% else %}
        weight_t w = 1;
{% endif %}
{% if flags %}
        if (flags[k])
            w = 0;
{% endif %}
        const vis_t v = vis[k];
        real_t re = 0, im = 0;
        if (w != 0) {
            if (!(w > 0) || !isfinite(w))
                atomic_inc(&bad[1]);
            else if (!isfinite(v.x) || !isfinite(v.y))
                atomic_inc(&bad[0]);
            re = (real_t)((product_t)v.x * (product_t)w);      /* then rounded to the operator's */
            im = (real_t)((product_t)v.y * (product_t)w);
        }
        out[i * NPOL + p] = (complex_t)(re, im);
    }
}

/* out[source[i]] = values[i] (the caller's order); out must be zeroed first, so samples
   not degridded stay zero; per-polarisation flags zero theirs. */
__kernel void scatter(__global const complex_t *restrict values, __global const uchar *restrict flags,
                      __global const int *restrict source, const int n, __global vis_t *restrict out)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int s = source[i];
    for (int p = 0; p < NPOL; ++p) {
        const int k = s * NPOL + p;
        const complex_t v = values[i * NPOL + p];
{% if flags %}
        out[k] = flags[k] ? (vis_t)(0, 0) : (vis_t)(v.x, v.y);
{% else %}
        out[k] = (vis_t)(v.x, v.y);
{% endif %}
    }
}
