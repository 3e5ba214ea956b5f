{# Values per call of the imaging operator (clgrid/imaging/engine.py): the caller's
    (nrow * nchan) visibilities gathered into a plan's order and back.
    Template variables: double, value_single (value_types.cl). #}
{% include "complex.cl" %}
{% include "value_types.cl" %}

/* The kept visibilities in plan order from the
   caller's (nrow * nchan) array, weighted, conjugated where the point moved to -uvw
   (src < 0: index -src - 1) and phase-shifted (centre and nshift); scatter_vis is its
   adjoint, into a zeroed (nrow * nchan) array. */
__kernel void gather_vis(__global const complex_t *restrict vis_in, __global const real_t *restrict wgt,
                         __global const int *restrict src, __global const phase_t *restrict phase,
                         __global value_t *restrict out, const int count, const int use_wgt,
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
            v = cmul(v, AS_COMPLEX(phase[k]));
        out[k] = AS_VALUE(v);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* counts stop growing past 2^30 (an operator of more than 2^31 samples must not wrap
       its count of non-zero values to 0) */
    if (lid < 3 && seen[lid] && tally[lid] < (1 << 30))
        atomic_add(&tally[lid], seen[lid]);
}

__kernel void scatter_vis(__global const value_t *restrict values, __global const real_t *restrict wgt,
                          __global const int *restrict src, __global const phase_t *restrict phase,
                          __global complex_t *restrict out, const int count, const int use_wgt,
                          const int use_phase, __global int *restrict tally)
{
    /* tally[0]: kept visibilities whose value is not finite (the sums overflowed);
       tally[1]: non-finite weights among them. */
    const int k = get_global_id(0);
    if (k >= count)
        return;
    const int s = src[k];
    const int i = s < 0 ? -s - 1 : s;
    complex_t v = AS_COMPLEX(values[k]);
    if (use_phase)
        v = cmul_conj(v, AS_COMPLEX(phase[k]));
    if (s < 0)
        v.y = -v.y;
    if (use_wgt) {
        const real_t w = wgt[i];
        if (!isfinite(w))
            atomic_inc(&tally[1]);
        v *= w;
    }
    if (!isfinite(v.x) || !isfinite(v.y))
        atomic_inc(&tally[0]);
    out[i] = v;
}
