{# Gather degridder, seed 001's fastest: a team of LANES work-items per visibility
    gathers grid * conj(weight) over the footprint and reduces.  The team strides
    through the footprint row-major, several points per work-item, so neighbouring
    work-items read neighbouring grid cells and neighbouring kernel samples (kernels
    by offset: one contiguous table per visibility); each kernel sample is read once
    per visibility for all polarisations, and the conjugation for w < 0 is applied
    once per visibility, not per point.  TEAMS teams share a work-group, and each team
    finishes BATCH consecutive visibilities (sorted by w-plane and cell tile on the device)
    before one batched local-memory reduction; with sub-groups the team is a
    sub-group and each visibility is reduced in registers instead.
    The weights come from the kernel source `source` (source_table.cl in the by_offset
    layout, source_texture.cl or source_analytic.cl: their per-point names).
    Template variables: double, npol, oversample, grid_size, lanes_per_vis,
    teams_per_group, vis_per_batch, points_per_item, subgroups, source (and the source's). #}
{% include "complex.cl" %}
{% if subgroups %}
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
{% endif %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define LANES {{ lanes_per_vis }}
#define TEAMS {{ teams_per_group }}
#define BATCH {{ vis_per_batch }}
#define VALUES (BATCH * NPOL)
#define GROUP_VIS (TEAMS * BATCH)         /* visibilities per pass of a work-group */
#define POINTS_PER_ITEM {{ points_per_item }}
{% include "plan.cl" %}
{% include "reduce.cl" %}
{% include source %}

{# Footprint half-width `s` and taps of visibility `i` (decoded as `p`), declared in place. #}
{% macro footprint(i) %}
const int s = source_support(SOURCE_PASS p, {{ i }});
const point_taps taps = point_taps_of(SOURCE_PASS p, s, {{ i }});
{% endmacro %}

/* Footprint walk of one work-item: tap (j, k) and the row-major step to its next point. */
typedef struct {
    int j, k;              /* current tap, in [-s, s] */
    int step_j, step_k;    /* a step of `lanes` points, as rows and columns */
    int s, width;
} footprint_walk;

/* Sum of grid * conj(weight) with no branch per point: for stored kernel samples K,
   `same` collects (g.x K.x, g.y K.y) and `cross` (g.y K.x, g.x K.y); finish_sum makes
   them sum g conj(K) (w >= 0, weight K) or sum g K (w < 0, weight conj(K)). */
inline complex_t finish_sum(complex_t same, complex_t cross, int conjugate)
{
    return conjugate ? (complex_t)(same.x - same.y, cross.y + cross.x)
                     : (complex_t)(same.x + same.y, cross.x - cross.y);
}

/* Add the products at the current tap, then step. */
inline void gather_point(footprint_walk *w, point_taps taps, SOURCE_STORE_TYPE kernels,
                         __global const complex_t *centre[NPOL], complex_t same[NPOL], complex_t cross[NPOL])
{
    const complex_t c = point_weight(kernels, taps, w->j, w->k);
    const int cell = w->j * GRID_SIZE + w->k;
    for (int pol = 0; pol < NPOL; ++pol) {
        const complex_t g = centre[pol][cell];
        same[pol] += g * c;
        cross[pol] += g.yx * c;
    }
    w->k += w->step_k;
    w->j += w->step_j;
    if (w->k > w->s) {
        w->k -= w->width;
        ++w->j;
    }
}

/* This work-item's share of visibility p: the footprint points lane, lane + lanes, ...
   in row-major order, POINTS_PER_ITEM of them per step so their loads are in flight
   together; its partial sum of grid * conj(weight) per polarisation goes to out. */
inline void gather_share(planned_vis p, int s, point_taps taps, int lane, int lanes, SOURCE_STORE_TYPE kernels,
                         __global const complex_t *restrict grid, complex_t out[NPOL])
{
    __global const complex_t *centre[NPOL];       /* the visibility's cell, per polarisation */
    complex_t same[NPOL], cross[NPOL];
    for (int pol = 0; pol < NPOL; ++pol) {
        centre[pol] = grid + ((size_t)pol * GRID_SIZE + p.grid_v) * GRID_SIZE + p.grid_u;
        same[pol] = cross[pol] = (complex_t)(0);
    }
    const int width = 2 * s + 1, points = width * width;
    footprint_walk w = {lane / width - s, lane % width - s, lanes / width, lanes % width, s, width};
    int t = lane;
    for (; t + (POINTS_PER_ITEM - 1) * lanes < points; t += POINTS_PER_ITEM * lanes)
        for (int q = 0; q < POINTS_PER_ITEM; ++q)
            gather_point(&w, taps, kernels, centre, same, cross);
    for (; t < points; t += lanes)
        gather_point(&w, taps, kernels, centre, same, cross);
    for (int pol = 0; pol < NPOL; ++pol)
        out[pol] = finish_sum(same[pol], cross[pol], p.conjugate);
}

__kernel __attribute__((reqd_work_group_size(LANES * TEAMS, 1, 1)))
void degrid_gather(__global const int4 *restrict plan,          /* [num_vis], sorted or not */
                   SOURCE_ARGS
                   __global const complex_t *restrict grid,     /* [NPOL][GRID_SIZE][GRID_SIZE] */
                   __global complex_t *restrict vis,            /* [num_vis][NPOL], plan order */
                   const int num_vis)
{
    /* Each work-group takes one contiguous run of passes over the visibilities (sorted
       neighbours stay on one compute unit, sharing its cache); a pass is GROUP_VIS of them. */
    const int group = get_group_id(0), groups = get_num_groups(0);
    const int passes = (num_vis + GROUP_VIS - 1) / GROUP_VIS;
    const int per_group = (passes + groups - 1) / groups;
    const int last_pass = min(passes, (group + 1) * per_group);
    POINT_SETUP
{% if subgroups %}
    /* one sub-group per visibility: reduced in registers, no barriers */
    const int lane = get_sub_group_local_id(), lanes = get_sub_group_size();
    const int team_vis = (GROUP_VIS + get_num_sub_groups() - 1) / get_num_sub_groups();
    for (int pass = group * per_group; pass < last_pass; ++pass) {
        const int first = pass * GROUP_VIS + get_sub_group_id() * team_vis;
        const int end = min(min(first + team_vis, (pass + 1) * GROUP_VIS), num_vis);
        for (int i = first; i < end; ++i) {
            const planned_vis p = decode_plan(plan[i]);
            {{ footprint("i") }}
            complex_t acc[NPOL];
            gather_share(p, s, taps, lane, lanes, SOURCE_STORE, grid, acc);
            for (int pol = 0; pol < NPOL; ++pol) {
                const complex_t total = (complex_t)(sub_group_reduce_add(acc[pol].x),
                                                    sub_group_reduce_add(acc[pol].y));
                if (lane == 0)
                    vis[(size_t)i * NPOL + pol] = total;
            }
        }
    }
{% else %}
    __local complex_t partials[TEAMS][VALUES * LANES];
    const int lane = get_local_id(0) % LANES, team = get_local_id(0) / LANES;
    for (int pass = group * per_group; pass < last_pass; ++pass) {
        const int team_first = pass * GROUP_VIS + team * BATCH;
        for (int r = 0; r < BATCH; ++r) {
            complex_t acc[NPOL];
            for (int pol = 0; pol < NPOL; ++pol)
                acc[pol] = (complex_t)(0);
            if (team_first + r < num_vis) {
                const planned_vis p = decode_plan(plan[team_first + r]);
                {{ footprint("team_first + r") }}
                gather_share(p, s, taps, lane, LANES, SOURCE_STORE, grid, acc);
            }
            for (int pol = 0; pol < NPOL; ++pol)
                partials[team][(r * NPOL + pol) * LANES + lane] = acc[pol];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        fold_partials(partials[team], LANES, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int m = lane; m < VALUES; m += LANES)
            if (team_first + m / NPOL < num_vis)
                vis[(size_t)team_first * NPOL + m] = folded_sum(partials[team], LANES, m);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
{% endif %}
}
