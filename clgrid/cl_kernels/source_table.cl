{# The W-projection tables read at the nearest oversampled sample (clgrid.sources.tables.KernelStack,
    interpolation "nearest"): one of the three kernel sources of the W-projection work
    distributions (source_texture.cl, source_analytic.cl define the same names).  The
    tables lie on the device in the layout the distribution reads best (`table_layout`,
    its strategy's kernel_layout): where a visibility's taps are and how a tap is read
    follow from it.

    The names every source defines (a distribution uses those of its access pattern):
      SOURCE_ARGS          the kernel parameters the source reads, each followed by a comma
      SOURCE_PARAMS        the same without restrict, for helper functions (restrict pointers
                           of inlined helpers stop Oclgrind: llvm.experimental.noalias.scope.decl)
      SOURCE_PASS          their names, each followed by a comma
      SOURCE_STORE_TYPE    what a weight is read from, as a helper function's parameter
      SOURCE_STORE         its name in a kernel (after POINT_SETUP)
      source_support(SOURCE_PASS p, i)   half-width of visibility i's footprint
      source_footprint(SOURCE_PASS p, i) int4: its first cell (u, v), taps per side, support
      source_plane_weight(SOURCE_PASS p, i, plane)   its weight on a stacking plane (1 here)
      source_conj(c, conjugate)          a weight conjugated for w < 0 (as the source needs)
    per point (atomic "compact", gather "by_offset"): a work-group or team per visibility
      POINT_SETUP          statements at the top of the kernel, by every work-item
      point_taps           where a visibility's taps are: point_taps_of(SOURCE_PASS p, s, i)
      point_weight(SOURCE_STORE, taps, j, k)              unconjugated weight of tap (j, k)
      tap_row, point_row(SOURCE_STORE, taps, j), point_weight_in_row(SOURCE_STORE, taps, row, j, k):
                           the same weight, with what a row of taps shares made once per row
    per tile ("u_rows", grid_tiled.cl): taps relative to a tile's first column
      tile_taps            tile_taps_of(SOURCE_PASS p, s, width, origin_u, i)
      tile_column(taps, u) the index of the tile's column u (linear in u: base + step u)
      TILE_LOCAL           local memory the source stages an entry's taps in (declarations)
      TILE_STAGE(e, taps)  stage entry e's taps there (the work-item that prepared it)
      TILE_STORE(e)        what entry e's weights are read from
      tile_weight(TILE_STORE(e), taps, width, column, jj): unconjugated weight of tap
                           (jj - s, the tap of column): complex, or real where the source's are
      tile_weight_t        its type
      tile_mad(sum, re, im, c)  sum + the value times weight c, the value given as
                           re = (x, -y), im = (y, x) (conjugated: (x, y), (y, -x))
    per window ("offset_rows", grid_moving_window.cl): taps relative to a window
      window_taps(SOURCE_PASS p, support, width, r_u, r_v)   int2 kept with the window
      WINDOW_LOCAL, WINDOW_STAGE(t, i), window_point, WINDOW_POINT(t): what the source
                           stages per visibility besides the window
      window_row(window, e_v, r_v, support, row_stride), window_weight(SOURCE_STORE, at,
                           row, e_u, r_u, support): unconjugated weight at window place (e_u, e_v)
    (source_stacked.cl adds SOURCE_WIDTH, the w-stacking source's fixed footprint, and for
    its separable taps and w-planes point_column, source_plane_arg, source_plane_weight_at.)
    Needs plan.cl and OVERSAMPLE (and OFFSET_RANGE for offset_rows).
    Template variables: oversample, table_layout. #}
{% if table_layout == "by_offset" %}
{% include "kernel_taps.cl" %}
{% endif %}
{% if table_layout == "offset_rows" %}
#define SOURCE_DECL(R) __global const complex_t *R kernels,  /* KernelStack.offset_rows() */ \
                    __global const int *R kernel_start,   /* [plane] */
#define SOURCE_ARGS SOURCE_DECL(restrict)
#define SOURCE_PARAMS SOURCE_DECL()
#define SOURCE_PASS kernels, kernel_start,
{% elif table_layout == "by_offset" %}
#define SOURCE_DECL(R) __global const complex_t *R kernels,  /* tables by offset */ \
                    __global const int *R kernel_start,   /* [plane] */ \
                    __global const int *R support,        /* [plane] */
#define SOURCE_ARGS SOURCE_DECL(restrict)
#define SOURCE_PARAMS SOURCE_DECL()
#define SOURCE_PASS kernels, kernel_start, support,
{% else %}
#define SOURCE_DECL(R) __global const complex_t *R kernels,  /* KernelStack.{{ table_layout }}() */ \
                    __global const int *R kernel_start,   /* [plane] */ \
                    __global const int *R kernel_side,    /* [plane] */ \
                    __global const int *R support,        /* [plane] */
#define SOURCE_ARGS SOURCE_DECL(restrict)
#define SOURCE_PARAMS SOURCE_DECL()
#define SOURCE_PASS kernels, kernel_start, kernel_side, support,
{% endif %}
#define SOURCE_STORE_TYPE __global const complex_t *restrict
#define SOURCE_STORE kernels

{% if table_layout != "offset_rows" %}
inline int source_support(SOURCE_PARAMS planned_vis p, int i)
{
    return support[p.plane];
}

inline int4 source_footprint(SOURCE_PARAMS planned_vis p, int i)
{
    const int s = source_support(SOURCE_PASS p, i);
    return (int4)(p.grid_u - s, p.grid_v - s, 2 * s + 1, s);
}
{% endif %}

{% include "source_stack_common.cl" %}
{% if table_layout == "compact" %}

/* KernelStack.compact: the D2 symmetry folds tap (j, k) onto |offset + tap * OS| of the
   plane's quarter (plan.cl's kernel_sample, unconjugated). */
#define POINT_SETUP
typedef struct {
    int start, side;      /* the plane's quarter and its side */
    int off_u, off_v;     /* the visibility's oversample offsets */
} point_taps;

inline point_taps point_taps_of(SOURCE_PARAMS planned_vis p, int s, int i)
{
    point_taps t;
    t.start = kernel_start[p.plane];
    t.side = kernel_side[p.plane];
    t.off_u = p.off_u;
    t.off_v = p.off_v;
    return t;
}

#define point_weight(kernels, t, j, k) \
    (kernels)[(t).start + abs((t).off_v + (j) * OVERSAMPLE) * (t).side + abs((t).off_u + (k) * OVERSAMPLE)]

typedef int tap_row;   /* the tap j */
#define point_row(kernels, t, j) (j)
#define point_weight_in_row(kernels, t, row, j, k) point_weight(kernels, t, j, k)
{% elif table_layout == "by_offset" %}

/* KernelStack.by_offset: the visibility's table, a row of taps contiguous (kernel_taps.cl). */
#define POINT_SETUP
typedef kernel_taps point_taps;

inline point_taps point_taps_of(SOURCE_PARAMS planned_vis p, int s, int i)
{
    return taps_of(p, s, kernel_start[p.plane]);
}

#define point_weight(kernels, taps, j, k) (kernels)[tap_index(taps, j, k)]
typedef int tap_row;   /* the tap j */
#define point_row(kernels, t, j) (j)
#define point_weight_in_row(kernels, t, row, j, k) point_weight(kernels, t, j, k)
{% elif table_layout == "u_rows" %}

/* KernelStack.u_rows: for each |off_u| a quarter row per |off_v + j * OS|, contiguous in
   u, read backwards when off_u < 0. */
typedef struct {
    int row0;     /* u_rows index of the tile's first column in quarter row 0 */
    int step;     /* +1 or -1: index step from a column to the next (off_u < 0 reads backwards) */
    int off_v0;   /* off_v - support * OVERSAMPLE: quarter row of tap j is |off_v0 + (j + support) * OVERSAMPLE| */
} tile_taps;

inline tile_taps tile_taps_of(SOURCE_PARAMS planned_vis p, int s, int width, int origin_u, int i)
{
    tile_taps t;
    t.step = p.off_u < 0 ? -1 : 1;
    t.row0 = kernel_start[p.plane] + (int)abs(p.off_u) * kernel_side[p.plane] * width + s
             + t.step * (origin_u - p.grid_u);
    t.off_v0 = p.off_v - s * OVERSAMPLE;
    return t;
}

inline int tile_column(tile_taps t, int u)
{
    return t.row0 + t.step * u;
}

#define TILE_LOCAL
#define TILE_STAGE(e, taps)
#define TILE_STORE(e) kernels
/* Tap j (jj = j + support) in the column whose u_rows index (quarter row 0) is `column`. */
#define tile_weight(store, t, width, column, jj) (store)[(column) + (int)abs((t).off_v0 + (jj) * OVERSAMPLE) * (width)]
typedef complex_t tile_weight_t;   /* what tile_weight gives */
#define tile_mad(sum, re, im, c) ((complex_t)(mad((re).x, (c).x, mad((re).y, (c).y, (sum).x)), \
                                              mad((im).x, (c).x, mad((im).y, (c).y, (sum).y))))
{% elif table_layout == "offset_rows" %}

/* KernelStack.offset_rows: a row of u taps per (|off_v + j * OS|, off_u).  Kept with the
   window: x the offset-row address of tap row 0 of the visibility's u offset, minus r_u;
   y off_v - (r_v + S) * OVERSAMPLE, so that the kernel row is |y + e_v * OVERSAMPLE|. */
inline int2 window_taps(SOURCE_PARAMS planned_vis p, int support, int width, int r_u, int r_v)
{
    return (int2)(kernel_start[p.plane] + (p.off_u + OFFSET_RANGE) * width - r_u,
                  p.off_v - (r_v + support) * OVERSAMPLE);
}

#define WINDOW_LOCAL
#define WINDOW_STAGE(t, i)
typedef int window_point;   /* nothing besides the window */
#define WINDOW_POINT(t) 0

inline int window_row(int4 window, int e_v, int r_v, int support, int row_stride)
{
    return window.z + (int)abs(window.w + e_v * OVERSAMPLE) * row_stride;
}

#define window_weight(kernels, at, row, e_u, r_u, support) (kernels)[(row) + (e_u)]
{% endif %}
