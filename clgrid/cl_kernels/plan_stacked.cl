{# Decoding of one point of a w-stacking plan (clgrid.planning.stacking.PointPlan.first: first
   u cell, first v cell, both modulo the grid, first w-plane) into plan.cl's planned_vis, so
   that a distribution reads both plans by the same names.  The stacked grid is [u][v], its
   fast axis v: grid_u here is the axis along a grid row (the point's first v cell), grid_v
   the axis across rows (its first u cell), as for the W-projection grid [v][u].  The cells
   are a footprint's first (source_stacked.cl's source_footprint), not its centre; the
   stacked plan folds w < 0 into the values, so nothing is conjugated. #}
typedef struct {
    int grid_u, grid_v;   /* first cell of the footprint along a grid row (v), and its row (u) */
    int plane;            /* first w-plane */
    int conjugate;        /* 0 */
} planned_vis;

inline planned_vis decode_plan(int4 first)
{
    planned_vis p;
    p.grid_u = first.y;
    p.grid_v = first.x;
    p.plane = first.z;
    p.conjugate = 0;
    return p;
}
