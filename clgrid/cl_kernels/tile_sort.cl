{# Preprocessing of the tiled gridder on the device (seed 003 §3.3.1): the bounding box
   of the active grid, then a bucket sort of the planned visibilities into the tiles
   their footprints touch, in two passes of one kernel (count, then place at offsets
   from a prefix sum of the counts, clgrid/scan.py).  Visibilities outside the tiled
   part of the grid (tile_factor) are copied out for the atomic kernel instead.
   With sort_copies_plan, each entry carries a copy of its visibility's plan (seed 000
   §4.2: the tile kernel reads w-plane and offsets from the sorted stream); without, an
   entry is only (visibility, bucket) and the tile kernel reads the plan by index.
   grid_tiled.cl's "chunks" schedule.  Template variables: sort_wg, sort_run,
   sort_copies_plan (and those of tile_grid.cl, plan.cl). #}
{% include "tile_grid.cl" %}
#define SORT_WG {{ sort_wg }}
#define SORT_RUN {{ sort_run }}

/* Cells touched by any footprint: box = {u_min, u_max, v_min, v_max}, which the
   host sets to {INT_MAX, INT_MIN, INT_MAX, INT_MIN} first. */
__kernel __attribute__((reqd_work_group_size(SORT_WG, 1, 1)))
void tile_bounding_box(__global const int4 *restrict plan, __global const int *restrict support,
                       const int num_vis, __global int *box)
{
    __local int4 boxes[SORT_WG];
    int4 mine = (int4)(INT_MAX, INT_MIN, INT_MAX, INT_MIN);
    for (int i = get_global_id(0); i < num_vis; i += get_global_size(0)) {
        const planned_vis p = decode_plan(plan[i]);
        const int s = support[p.plane];
        mine = (int4)(min(mine.x, p.grid_u - s), max(mine.y, p.grid_u + s),
                      min(mine.z, p.grid_v - s), max(mine.w, p.grid_v + s));
    }
    const int lid = get_local_id(0);
    boxes[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int stride = SORT_WG / 2; stride > 0; stride >>= 1) {
        if (lid < stride) {
            const int4 other = boxes[lid + stride];
            mine = (int4)(min(mine.x, other.x), max(mine.y, other.y), min(mine.z, other.z), max(mine.w, other.w));
            boxes[lid] = mine;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        atomic_min(box, mine.x);
        atomic_max(box + 1, mine.y);
        atomic_min(box + 2, mine.z);
        atomic_max(box + 3, mine.w);
    }
}

#define NOT_TILED ((int4)(0, -1, 0, -1))
#define UNTILED 0   /* the family of a visibility's buckets: none (the atomic kernel's), */
#define TILES 1     /* every tile its footprint touches, */
#define WINDOW 2    /* or the one window that holds it (tile_grid.cl) */

/* Take n slots for the run [first, first + n) in `bucket` with one atomic; copy them there if `place`. */
inline void claim_run(int bucket, int first, int n, int place, __global const int4 *restrict plan,
                      __global int *tally, __global int4 *restrict entries,
                      __global int2 *restrict entry_vis_bucket)
{
    const int at = atomic_add(tally + bucket, n);
    for (int m = 0; place && m < n; ++m) {
{% if sort_copies_plan %}
        entries[at + m] = plan[first + m];
{% endif %}
        entry_vis_bucket[at + m] = (int2)(first + m, bucket);
    }
}

/* Take n slots for the run of visibilities [first, first + n) in every bucket of
   `tiles` (family TILES), in its window (WINDOW: tiles.x, tiles.z) or among the untiled
   ones, with one atomic each; copy them there if `place`. */
inline void bucket_run(tile_grid g, int family, int4 tiles, int first, int n, int place,
                       __global const int4 *restrict plan, __global const complex_t *restrict vis,
                       __global int *tally, __global int *untiled_tally,
                       __global int4 *restrict entries, __global int2 *restrict entry_vis_bucket,
                       __global int4 *restrict untiled_plan, __global complex_t *restrict untiled_vis)
{
    if (n == 0)
        return;
    if (family == UNTILED) {
        const int at = atomic_add(untiled_tally, n);
        for (int m = 0; place && m < n; ++m) {
            untiled_plan[at + m] = plan[first + m];
            for (int pol = 0; pol < NPOL; ++pol)
                untiled_vis[(size_t)(at + m) * NPOL + pol] = vis[(size_t)(first + m) * NPOL + pol];
        }
    } else if (family == WINDOW) {
        claim_run(window_bucket(g, tiles.x, tiles.z), first, n, place, plan, tally, entries, entry_vis_bucket);
    } else {
        for (int tv = tiles.z; tv <= tiles.w; ++tv)
            for (int tu = tiles.x; tu <= tiles.y; ++tu)
                claim_run(bucket_of(g, tu, tv), first, n, place, plan, tally, entries, entry_vis_bucket);
    }
}

/* Count (place == 0: tally = zeroed counts) or place (place == 1: tally = bucket
   offsets, advanced as slots are taken).  A work-item takes SORT_RUN consecutive
   visibilities and handles each run of them that touches the same tiles with one
   atomic per tile: consecutive time steps of a baseline mostly do, which is what
   keeps the dense central tiles from serialising on their counters. */
__kernel void bucket_visibilities(__global const int4 *restrict plan, __global const complex_t *restrict vis,
                                  __global const int *restrict support, const int num_vis,
                                  __global const int *restrict box, __global int *tally,
                                  __global int *untiled_tally, __global int4 *restrict entries,
                                  __global int2 *restrict entry_vis_bucket, __global int4 *restrict untiled_plan,
                                  __global complex_t *restrict untiled_vis, const int place)
{
    const tile_grid g = make_tile_grid(box);
    const int first = get_global_id(0) * SORT_RUN;
    if (first >= num_vis)
        return;
    const int end = min(first + SORT_RUN, num_vis);
    int4 run_tiles = NOT_TILED;
    int run_family = UNTILED;
    int run_first = first;
    for (int i = first; i < end; ++i) {
        const planned_vis p = decode_plan(plan[i]);
        const int s = support[p.plane];
        const int family = !is_tiled(g, p) ? UNTILED : s <= WINDOW_SUPPORT ? WINDOW : TILES;
        const int4 tiles = family == UNTILED ? NOT_TILED : family == WINDOW ? footprint_window(p, s)
                                                                            : footprint_tiles(p, s);
        if (family != run_family || any(tiles != run_tiles)) {
            bucket_run(g, run_family, run_tiles, run_first, i - run_first, place, plan, vis, tally,
                       untiled_tally, entries, entry_vis_bucket, untiled_plan, untiled_vis);
            run_family = family;
            run_tiles = tiles;
            run_first = i;
        }
    }
    bucket_run(g, run_family, run_tiles, run_first, end - run_first, place, plan, vis, tally, untiled_tally,
               entries, entry_vis_bucket, untiled_plan, untiled_vis);
}
