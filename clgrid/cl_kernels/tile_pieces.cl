{# grid_tiled.cl's "pieces" schedule, for w-stacking plans arranged by (first plane, bin)
   (clgrid.planning.stacking's "bins" layout: starts[g][bin] is where the points of first
   plane g whose first cell lies in the bin begin; clgrid/strategies/tiled_stacked.py): the
   points with a tap on a plane and their first cell in one bin of BIN_U x BIN_V cells are
   cut into pieces of at most PIECE, a work-group each, so that the dense bins of a real
   array's core are shared among many work-groups (cuFINUFFT's subproblems, Shih et al.
   2021).  A work-group's tile is its bin and the cells its footprints reach beyond it:
   a window that holds every footprint whole.  The stacked grid is [u][v]: a tile's columns
   are v cells (plan_stacked.cl).  The kernels here list each plane's work-groups on the
   device (TiledStackedGridding.arrange).
   Template variables: bin_u, bin_v, keys_per_plane, piece (and the source's SOURCE_WIDTH). #}
#define BIN_U {{ bin_u }}                        /* u cells (tile rows) of a bin */
#define BIN_V {{ bin_v }}                        /* v cells (tile columns) */
#define TILE_U (BIN_V + SOURCE_WIDTH - 1)        /* tile columns */
#define TILE_V (BIN_U + SOURCE_WIDTH - 1)        /* tile rows */
#define KEYS_PER_PLANE {{ keys_per_plane }}
#define PIECE {{ piece }}

/* First cell (column, row) = (v, u) of bin `bin`'s tile: bins are numbered along v first. */
inline int2 bin_origin(int bin)
{
    const int bins_v = (GRID_U + BIN_V - 1) / BIN_V;
    return (int2)((bin % bins_v) * BIN_V, (bin / bins_v) * BIN_U);
}

/* pieces[p][b]: how many pieces of at most PIECE the points with a tap on plane p (first
   planes p - reach + 1 .. p) whose first cell is in bin b make, from the table of where
   each (first plane, bin) run starts; entry num_planes * KEYS_PER_PLANE is 0, so that its
   exclusive scan ends with the total. */
__kernel void count_pieces(__global const int *restrict starts, const int num_planes, const int reach,
                           __global int *restrict pieces)
{
    const int i = get_global_id(0);
    const int n = num_planes * KEYS_PER_PLANE;
    if (i > n)
        return;
    if (i == n) {
        pieces[i] = 0;
        return;
    }
    const int p = i / KEYS_PER_PLANE, b = i - p * KEYS_PER_PLANE;
    int total = 0;
    for (int g = max(0, p - reach + 1); g <= p; ++g)
        total += starts[g * KEYS_PER_PLANE + b + 1] - starts[g * KEYS_PER_PLANE + b];
    pieces[i] = (total + PIECE - 1) / PIECE;
}

/* jobs[first_job[i] + k] = (bin, k) for each piece k of entry i (plane-major). */
__kernel void list_jobs(__global const int *restrict pieces, __global const int *restrict first_job, const int n,
                        __global int2 *restrict jobs)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int b = i % KEYS_PER_PLANE, first = first_job[i], count = pieces[i];
    for (int k = 0; k < count; ++k)
        jobs[first + k] = (int2)(b, k);
}
