{# Kernels by oversample offset (KernelStack.by_offset): where a visibility's taps lie.
    Needs plan.cl's planned_vis; template variable oversample. #}
#define OFFSET_TABLES {{ (oversample + 1) // 2 + 1 }}   /* tables per axis: |offset| = 0 .. R */

/* Tap (j, k) of a visibility is kernels[centre + j * row + k * col]: its table is the one
   for (|off_v|, |off_u|), read backwards along an axis whose offset is negative (the
   kernels are even in u and v), so a row of taps is a contiguous run either way. */
typedef struct {
    int centre;   /* index of tap (0, 0) */
    int row;      /* +-(2s + 1) */
    int col;      /* +-1 */
} kernel_taps;

inline kernel_taps taps_of(planned_vis p, int s, int plane_start)
{
    const int width = 2 * s + 1;
    kernel_taps t;
    t.row = p.off_v < 0 ? -width : width;
    t.col = p.off_u < 0 ? -1 : 1;
    t.centre = plane_start + (abs(p.off_v) * OFFSET_TABLES + abs(p.off_u)) * width * width
               + s * width + s;
    return t;
}

inline int tap_index(kernel_taps t, int j, int k)
{
    return t.centre + j * t.row + k * t.col;
}
