{# Gather degridder, seed 001's fastest: a team of LANES work-items per visibility
    gathers grid * conj(weight) over the footprint and reduces.  The team strides
    through the footprint row-major, several points per work-item, so neighbouring
    work-items read neighbouring grid cells and (phase-major kernel rows) neighbouring
    kernel samples; each kernel sample is read once per visibility for all
    polarisations.  TEAMS teams share a work-group, and each team finishes BATCH
    consecutive visibilities (sorted by w-plane and cell on the host) before one
    batched local-memory reduction; with sub-groups the team is a sub-group and each
    visibility is reduced in registers instead.
    Template variables: double, atomic, npol, oversample, grid_size, lanes_per_vis,
    teams_per_group, vis_per_batch, points_per_item, subgroups. #}
{% include "common.cl" %}
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
#define POINTS_PER_ITEM {{ points_per_item }}
#define PHASE_MAJOR_KERNELS
{% include "plan.cl" %}
{% include "reduce.cl" %}

/* Footprint walk of one work-item: tap (j, k) and the row-major step to its next point. */
typedef struct {
    int j, k;              /* current tap, in [-s, s] */
    int step_j, step_k;    /* a step of `lanes` points, as rows and columns */
    int s, width;
} footprint_walk;

/* Add grid * conj(weight) at the current tap to acc, then step. */
inline void gather_point(footprint_walk *w, planned_vis p, __global const complex_t *restrict kernels,
                         int start, int side, __global const complex_t *corner[NPOL], complex_t acc[NPOL])
{
    const complex_t c = kernel_sample(kernels, start, side, p, w->j, w->k);
    const int cell = (w->j + w->s) * GRID_SIZE + (w->k + w->s);
    for (int pol = 0; pol < NPOL; ++pol)
        acc[pol] += cmul_conj(corner[pol][cell], c);
    w->k += w->step_k;
    w->j += w->step_j;
    if (w->k > w->s) {
        w->k -= w->width;
        ++w->j;
    }
}

/* This work-item's share of visibility p: the footprint points lane, lane + lanes, ...
   in row-major order, POINTS_PER_ITEM of them per step so their loads are in flight
   together; sum of grid * conj(weight) added to acc per polarisation. */
inline void gather_share(planned_vis p, int s, int lane, int lanes,
                         __global const complex_t *restrict kernels, int start, int side,
                         __global const complex_t *restrict grid, complex_t acc[NPOL])
{
    __global const complex_t *corner[NPOL];       /* footprint corner (-s, -s) per polarisation */
    for (int pol = 0; pol < NPOL; ++pol)
        corner[pol] = grid + (size_t)pol * GRID_SIZE * GRID_SIZE
                      + (size_t)(p.grid_v - s) * GRID_SIZE + (p.grid_u - s);
    const int width = 2 * s + 1, points = width * width;
    footprint_walk w = {lane / width - s, lane % width - s, lanes / width, lanes % width, s, width};
    int t = lane;
    for (; t + (POINTS_PER_ITEM - 1) * lanes < points; t += POINTS_PER_ITEM * lanes)
        for (int q = 0; q < POINTS_PER_ITEM; ++q)
            gather_point(&w, p, kernels, start, side, corner, acc);
    for (; t < points; t += lanes)
        gather_point(&w, p, kernels, start, side, corner, acc);
}

__kernel __attribute__((reqd_work_group_size(LANES * TEAMS, 1, 1)))
void degrid_gather(__global const int4 *restrict plan,          /* [num_vis], sorted or not */
                   __global const complex_t *restrict kernels,  /* compacted, phase-major quarters */
                   __global const int *restrict kernel_start,   /* [plane] */
                   __global const int *restrict kernel_side,    /* [plane] */
                   __global const int *restrict support,        /* [plane] */
                   __global const complex_t *restrict grid,     /* [NPOL][GRID_SIZE][GRID_SIZE] */
                   __global complex_t *restrict vis,            /* [num_vis][NPOL], plan order */
                   const int num_vis)
{
{% if subgroups %}
    /* one sub-group per visibility: reduced in registers, no barriers */
    const int lane = get_sub_group_local_id(), lanes = get_sub_group_size();
    const int teams = get_num_sub_groups();
    for (int first = (get_group_id(0) * teams + get_sub_group_id()) * BATCH; first < num_vis;
         first += get_num_groups(0) * teams * BATCH) {
        for (int i = first; i < min(first + BATCH, num_vis); ++i) {
            const planned_vis p = decode_plan(plan[i]);
            complex_t acc[NPOL];
            for (int pol = 0; pol < NPOL; ++pol)
                acc[pol] = (complex_t)(0, 0);
            gather_share(p, support[p.plane], lane, lanes, kernels, kernel_start[p.plane],
                         kernel_side[p.plane], grid, acc);
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
    for (int first = get_group_id(0) * TEAMS * BATCH; first < num_vis;
         first += get_num_groups(0) * TEAMS * BATCH) {
        const int team_first = first + team * BATCH;
        for (int r = 0; r < BATCH; ++r) {
            complex_t acc[NPOL];
            for (int pol = 0; pol < NPOL; ++pol)
                acc[pol] = (complex_t)(0, 0);
            if (team_first + r < num_vis) {
                const planned_vis p = decode_plan(plan[team_first + r]);
                gather_share(p, support[p.plane], lane, LANES, kernels, kernel_start[p.plane],
                             kernel_side[p.plane], grid, acc);
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
