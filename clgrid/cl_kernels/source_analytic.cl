{# The exponential-of-semicircle kernel (clgrid.sources.analytic.AnalyticKernel) evaluated
    at each visibility's exact offset from its cell (`fraction`: nearest cell - position,
    in cells; tap k lies k + fraction cells from the visibility), by Horner's rule
    (es_horner.cl).  The weights are real and separable: a tap's weight is its u value
    times its v value.  The names are source_table.cl's (its header lists them); the
    per-point and per-tile ones are defined here:
      per point  the polynomials copied to local memory by the work-group (POINT_SETUP),
                 each tap evaluated from there, the v value once per row of taps;
      per tile   the 2 TAPS one-dimensional values of an entry evaluated once, by the
                 work-item that prepares it, into local memory (TILE_STAGE): 2 TAPS Horner
                 evaluations per visibility, not two per cell, and no reads of the
                 polynomials in constant memory by work-items evaluating different taps
                 (they would be serialised).
    Needs plan.cl.  Template variables: es_horner.cl's, es_taps (2 support + 1). #}
{% include "es_horner.cl" %}
#define SOURCE_DECL(R) __global const complex_t *R fraction, /* [num_vis]: nearest cell - position */ \
                    __global const int *R support,        /* [plane] */
#define SOURCE_ARGS SOURCE_DECL(restrict)
#define SOURCE_PARAMS SOURCE_DECL()
#define SOURCE_PASS fraction, support,
#define SOURCE_STORE_TYPE __local const real_t *restrict         /* the polynomials, es_coef_to_local */
#define SOURCE_STORE coef

inline int source_support(SOURCE_PARAMS planned_vis p, int i)
{
    return support[p.plane];
}

inline int4 source_footprint(SOURCE_PARAMS planned_vis p, int i)
{
    const int s = source_support(SOURCE_PASS p, i);
    return (int4)(p.grid_u - s, p.grid_v - s, 2 * s + 1, s);
}

inline real_t source_plane_weight(SOURCE_PARAMS planned_vis p, int i, int plane)
{
    return 1;
}

/* real: conj(c) = c */
#define source_conj(c, conjugate) (c)

/* Per point: the taps are the visibility's offset from its cell. */
#define POINT_SETUP __local real_t coef[ES_COEFS]; es_coef_to_local(coef);
typedef complex_t point_taps;

inline point_taps point_taps_of(SOURCE_PARAMS planned_vis p, int s, int i)
{
    return fraction[i];
}

#define point_weight(coef, taps, j, k) ((complex_t)(es_weight_in(coef, (k) + (taps).x) * es_weight_in(coef, (j) + (taps).y), 0))
typedef real_t tap_row;   /* the v value of row j */
#define point_row(coef, taps, j) es_weight_in(coef, (j) + (taps).y)
#define point_weight_in_row(coef, taps, row, j, k) ((complex_t)((row) * es_weight_in(coef, (k) + (taps).x), 0))

/* Per tile: a column is the tap k + support. */
#define TAPS {{ es_taps }}   /* 2 * support + 1 */
typedef struct {
    int row0;          /* tap k + support of the tile's first column */
    int step;          /* 1 */
    real_t d_u, d_v;   /* distance in cells of tap (-support, -support) from the visibility */
} tile_taps;

inline tile_taps tile_taps_of(SOURCE_PARAMS planned_vis p, int s, int width, int origin_u, int i)
{
    const complex_t f = fraction[i];   /* nearest - position: tap k lies k + f cells off */
    tile_taps t;
    t.step = 1;
    t.row0 = origin_u - p.grid_u + s;
    t.d_u = f.x - s;
    t.d_v = f.y - s;
    return t;
}

inline int tile_column(tile_taps t, int u)
{
    return t.row0 + t.step * u;
}

#define TILE_LOCAL __local real_t tile_taps_local[BATCH][2 * TAPS];   /* an entry's kernel values along u, then along v */
#define TILE_STAGE(e, taps) \
    for (int k = 0; k < TAPS; ++k) { \
        tile_taps_local[e][k] = es_weight((taps).d_u + k); \
        tile_taps_local[e][TAPS + k] = es_weight((taps).d_v + k); \
    }
#define TILE_STORE(e) tile_taps_local[e]
/* Tap (jj, column) = (j, k) + support: the product of its u and v values (real). */
#define tile_weight(store, t, width, column, jj) ((store)[column] * (store)[TAPS + (jj)])
typedef real_t tile_weight_t;   /* what tile_weight gives */
/* sum + value * c for a real weight c (the value is re.x, im.x; conjugating a real weight does nothing) */
#define tile_mad(sum, re, im, c) ((complex_t)(mad((re).x, (c), (sum).x), mad((im).x, (c), (sum).y)))
