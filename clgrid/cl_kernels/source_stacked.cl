{# The w-stacking kernel source (clgrid.sources.analytic.StackedKernel): the
    exponential-of-semicircle kernel (es_horner.cl) evaluated at the exact offsets of a
    point's first taps along u, v and, with w, the w-planes (clgrid.planning.plan.plan_stacked:
    first cells and planes, and the first taps' offsets in a real4, `frac`).  A point spreads
    over SOURCE_WIDTH x SOURCE_WIDTH cells of SOURCE_WIDTH planes (with w), starting at its
    first cell.  The names are source_table.cl's (its header lists them), read from a plan
    decoded by plan_stacked.cl; the per-point (points.cl) and per-tile (grid_tiled.cl) ones
    are defined here, and:
      SOURCE_WIDTH        taps per side, the same for every point
      source_plane_weight(SOURCE_PASS p, i, plane)   the point's weight on w-plane `plane`
                          (the sources without w-planes give 1)
    and, for the distributions that keep a point's separable taps (rows_stacked.cl's tap
    buffer, fpga_stacked.cl's pipelines) or its plane weight in two halves:
      point_column(SOURCE_STORE, taps, k)   the factor along a row of tap (j, k):
                          point_weight = point_row(.., j) * point_column(.., k)
      source_plane_arg(SOURCE_PASS p, i)    what the point's plane weights are computed from
      source_plane_weight_at(arg, tap)      its weight on the plane `tap` planes past its first
    Every distribution including this source reads it only through these names
    (tests/test_kernel_sources.py).
    Needs plan_stacked.cl.  Template variables: double, use_w and es_horner.cl's. #}
{% include "es_horner.cl" %}
#define SOURCE_WIDTH ES_WIDTH
{% if double %}
typedef double4 real4_t;
{% else %}
typedef float4 real4_t;
{% endif %}
#define SOURCE_DECL(R) __global const real4_t *R frac,   /* [n]: offsets of the first taps (u, v, w) */
#define SOURCE_ARGS SOURCE_DECL(restrict)
#define SOURCE_PARAMS SOURCE_DECL()
#define SOURCE_PASS frac,

/* The polynomial argument of the point's plane weights (with w). */
inline real_t source_plane_arg(SOURCE_PARAMS planned_vis p, int i)
{
    return (real_t)2 * frac[i].z + (real_t)(SOURCE_WIDTH - 1);
}

/* Its weight on the plane `tap` planes past its first (0 <= tap < SOURCE_WIDTH). */
#define source_plane_weight_at(arg, tap) es_piece((tap), (arg))

/* The point's weight on w-plane `plane` (1 without w): tap plane - first. */
inline real_t source_plane_weight(SOURCE_PARAMS planned_vis p, int i, int plane)
{
{% if use_w %}
    return es_piece(plane - p.plane, (real_t)2 * frac[i].z + (real_t)(SOURCE_WIDTH - 1));
{% else %}
    return (real_t)1;
{% endif %}
}

/* Half the footprint, rounded down (its first cell is the plan's, not centre - support). */
inline int source_support(SOURCE_PARAMS planned_vis p, int i)
{
    return SOURCE_WIDTH / 2;
}

/* The footprint: first cell (along a row, across rows), taps per side, support. */
inline int4 source_footprint(SOURCE_PARAMS planned_vis p, int i)
{
    return (int4)(p.grid_u, p.grid_v, SOURCE_WIDTH, SOURCE_WIDTH / 2);
}

/* real: conj(c) = c */
#define source_conj(c, conjugate) (c)

/* Per point: the 2 SOURCE_WIDTH values along a row and across rows, by Horner's rule once,
   in registers; tap (j, k) counted from the footprint's centre as in the other sources, so
   from -support (the first cell: source_footprint) to SOURCE_WIDTH - 1 - support. */
#define SOURCE_STORE_TYPE int    /* nothing: the values are in point_taps */
#define SOURCE_STORE 0
#define POINT_SETUP
typedef struct {
    real_t u[SOURCE_WIDTH];   /* along a row (the grid's v: frac.y) */
    real_t v[SOURCE_WIDTH];   /* across rows (the grid's u: frac.x) */
} point_taps;

inline point_taps point_taps_of(SOURCE_PARAMS planned_vis p, int s, int i)
{
    const real4_t f = frac[i];
    point_taps t;
    es_taps(t.u, f.y);
    es_taps(t.v, f.x);
    return t;
}

#define point_weight(store, taps, j, k) ((taps).v[(j) + SOURCE_WIDTH / 2] * (taps).u[(k) + SOURCE_WIDTH / 2])
typedef real_t tap_row;   /* the value across rows of row j */
#define point_row(store, taps, j) ((taps).v[(j) + SOURCE_WIDTH / 2])
#define point_weight_in_row(store, taps, row, j, k) ((row) * (taps).u[(k) + SOURCE_WIDTH / 2])
#define point_column(store, taps, k) ((taps).u[(k) + SOURCE_WIDTH / 2])   /* separable: the factor along a row */

/* Per tile: a column is the tap along the row (the grid's v, plan_stacked.cl). */
typedef struct {
    int row0;          /* tap of the tile's first column */
    int step;          /* 1 */
    real_t d_u, d_v;   /* offsets of the first taps along a row and across rows (frac.y, frac.x) */
} tile_taps;

inline tile_taps tile_taps_of(SOURCE_PARAMS planned_vis p, int s, int width, int origin_u, int i)
{
    const real4_t f = frac[i];
    tile_taps t;
    t.row0 = origin_u - p.grid_u;
    t.step = 1;
    t.d_u = f.y;
    t.d_v = f.x;
    return t;
}

inline int tile_column(tile_taps t, int u)
{
    return t.row0 + u;   /* step 1 */
}

/* An entry's SOURCE_WIDTH values along a row and across rows, by Horner's rule once per entry, at an
   odd stride: the work-items reading one entry's values, and those writing consecutive
   entries', hit distinct banks. */
#define TILE_TAP_STRIDE (SOURCE_WIDTH | 1)
#define TILE_LOCAL __local real_t tile_taps_u[BATCH][TILE_TAP_STRIDE], tile_taps_v[BATCH][TILE_TAP_STRIDE];
#define TILE_STAGE(e, taps) { \
        real_t k_[SOURCE_WIDTH]; \
        es_taps(k_, (taps).d_u); \
        for (int j_ = 0; j_ < SOURCE_WIDTH; ++j_) \
            tile_taps_u[e][j_] = k_[j_]; \
        es_taps(k_, (taps).d_v); \
        for (int j_ = 0; j_ < SOURCE_WIDTH; ++j_) \
            tile_taps_v[e][j_] = k_[j_]; \
    }
#define TILE_STORE(e) (e)
/* Tap (jj, column): the product of its values along a row and across rows (real). */
#define tile_weight(e, t, width, column, jj) (tile_taps_u[e][column] * tile_taps_v[e][jj])
typedef real_t tile_weight_t;   /* what tile_weight gives */
/* sum + value * c for a real weight c (tile_visibility's re.x, im.x: the value) */
#define tile_mad(sum, re, im, c) ((complex_t)(mad((re).x, (c), (sum).x), mad((im).x, (c), (sum).y)))
