{# Planning and arranging in two passes over the samples (clgrid/planning/fused.py), for
   the imaging operator: the points of plan_positions.cl's w-stacking section, with the
   very same arithmetic (stacked_point, first_taps), go straight to their place in the
   layout's order (clgrid.planning.stacking.PlaneOrder) without the plan in the caller's
   order in between.

   1. classify_keyed: each sample's status and the counts (stacked_status, as classify_stacked), and for a
      kept point its sort key (first plane, then place in the plane) and its rank among the
      points of its key, the old value of the key's atomic counter (cuFINUFFT's bin sort:
      the counting and the ranks in one pass, so that placing needs no atomics);
   2. the caller scans the key counts into where each key's run starts (clgrid/device/scan.py);
   3. place_keyed: each kept point's first cells and plane, offsets, value index and phase
      written at its key's start plus its rank.
   The order within a key is the atomics' (as clgrid/device/counting_sort.py's).

   Template variables: plan_positions.cl's w-stacking ones (double, use_w, fold, support,
   num_planes) and key (a C expression of `p`, an int4 (first u cell, first v cell, 0,
   first plane): the layout's key, stacking._key_expression). #}
{% include "plan_positions.cl" %}

inline int key_of(const int4 p)
{
    return {{ key }};
}

/* Status of sample i (counted per status in counts); key[i] (-1 unless kept) and rank[i]. */
__kernel void classify_keyed(__global const double *restrict uvw, __global const double *restrict scale,
                             __global const uchar *restrict keep, const stacking_t g,
                             const int plane_lo, const int plane_hi,
                             __global int *restrict key, __global int *restrict rank,
                             __global int *restrict key_counts, __global int *restrict counts)
{
    __local int tally[NUM_STATUSES];
    const int lid = get_local_id(0);
    if (lid < NUM_STATUSES)
        tally[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int i = get_global_id(0);
    if (i < g.nsample) {
        int2 c;
        double first_w;
        int moved;
        const int s = stacked_status(uvw, scale, keep, g, plane_lo, plane_hi, i, &c, &first_w, &moved);
        int k = -1;
        if (s == KEPT) {
            k = key_of((int4)(c.x, c.y, 0, (int)first_w));
            rank[i] = atomic_inc(&key_counts[k]);
        }
        key[i] = k;
        atomic_inc(&tally[s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < NUM_STATUSES && tally[lid])
        atomic_add(&counts[lid], tally[lid]);
}

/* Kept sample i at starts[key] + rank: first cells and plane (as take_stacked's first),
   the first taps' offsets, src (its sample, or with by_position its place in this order;
   -src - 1 where the point moved) and the phase gridding applies (null: none);
   sample (null: not wanted) receives i. */
__kernel void place_keyed(__global const double *restrict uvw, __global const double *restrict scale,
                          const stacking_t g, __global const int *restrict key, __global const int *restrict rank,
                          __global const int *restrict starts, const int by_position,
                          __global int4 *restrict first, __global real4_t *restrict fraction,
                          __global int *restrict src, __global cplx_t *restrict phase,
                          __global int *restrict sample)
{
    const int i = get_global_id(0);
    if (i >= g.nsample)
        return;
    const int k = key[i];
    if (k < 0)
        return;
    const int j = starts[k] + rank[i];
    double u, v, w;
    const int moved = stacked_point(uvw, scale, g, i, &u, &v, &w);
    double4 frac;
    double first_w;
    const int2 c = first_taps(g, u, v, w, &frac, &first_w);
    first[j] = (int4)(c.x, c.y, (int)first_w, 0);
{% if double %}
    fraction[j] = frac;
{% else %}
    fraction[j] = convert_float4(frac);
{% endif %}
    const int s = by_position ? j : i;
    src[j] = moved ? -s - 1 : s;
    if (sample)
        sample[j] = i;
    if (phase)
        phase[j] = stacked_phase(g, u, v, w);
}
