{# The W-projection tables interpolated linearly in u, v and w (clgrid.sources.tables.KernelStack,
    interpolation "linear": the texture path, seed 004 §4.1): the weights sampled from the
    quarter cube (texture_sample.cl) at each visibility's continuous position, one float4
    per visibility (frac_u, frac_v, z, footprint support).  The names are source_table.cl's
    (its header lists them); the per-point and per-window ones are defined here.
    Needs plan.cl and OVERSAMPLE.  Template variables: texture_sample.cl's. #}
{% include "texture_sample.cl" %}
#define SOURCE_DECL(R) KERNEL_CUBE cube,                            /* quarter cube */ \
                    __global const float4 *R position,    /* [num_vis] */
#define SOURCE_ARGS SOURCE_DECL(restrict)
#define SOURCE_PARAMS SOURCE_DECL()
#define SOURCE_PASS cube, position,
#define SOURCE_STORE_TYPE KERNEL_CUBE
#define SOURCE_STORE cube

inline int source_support(SOURCE_PARAMS planned_vis p, int i)
{
    return footprint_support(position[i]);
}

inline int4 source_footprint(SOURCE_PARAMS planned_vis p, int i)
{
    const int s = source_support(SOURCE_PASS p, i);
    return (int4)(p.grid_u - s, p.grid_v - s, 2 * s + 1, s);
}

{% include "source_stack_common.cl" %}

/* Per point: the taps are the visibility's position. */
#define POINT_SETUP
typedef float4 point_taps;

inline point_taps point_taps_of(SOURCE_PARAMS planned_vis p, int s, int i)
{
    return position[i];
}

#define point_weight(cube, taps, j, k) texture_weight(cube, taps, j, k)
typedef int tap_row;   /* the tap j */
#define point_row(cube, taps, j) (j)
#define point_weight_in_row(cube, taps, row, j, k) texture_weight(cube, taps, j, k)

/* Per window: the position, staged beside the window (which keeps nothing for it); a
   window row is the tap j of the point's row. */
inline int2 window_taps(SOURCE_PARAMS planned_vis p, int support, int width, int r_u, int r_v)
{
    return (int2)(0, 0);
}

#define WINDOW_LOCAL __local float4 where[BATCH];
#define WINDOW_STAGE(t, i) where[t] = position[i];
typedef float4 window_point;
#define WINDOW_POINT(t) where[t]

inline int window_row(int4 window, int e_v, int r_v, int support, int row_stride)
{
    return e_v - r_v - support;
}

#define window_weight(cube, at, row, e_u, r_u, support) texture_weight(cube, at, row, (e_u) - (r_u) - (support))
