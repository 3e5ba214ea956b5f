{# Decoding of one planned visibility; the encoding is Plan.packed() in clgrid/plan.py. #}
typedef struct {
    int grid_u, grid_v;   /* nearest grid cell */
    int off_u, off_v;     /* oversample offsets, seed 003 Listing 1 */
    int plane;            /* w-plane */
    int conjugate;        /* w < 0: use conj(kernel) */
} planned_vis;

inline planned_vis decode_plan(int4 packed)
{
    planned_vis p;
    p.grid_u = packed.x;
    p.grid_v = packed.y;
    p.off_u = as_int(as_uint(packed.z) << 16) >> 16;
    p.off_v = packed.z >> 16;
    p.plane = packed.w & 0x7fffffff;
    p.conjugate = packed.w < 0;
    return p;
}

/* Kernel sample for tap (j, k) of a visibility, from the compacted quarter layout
   (KernelStack.compact): the D2 symmetry folds taps onto |offset + tap * OS|. */
inline complex_t kernel_sample(__global const complex_t *restrict kernels, int start, int side,
                               planned_vis p, int j, int k)
{
    const int iy = abs(p.off_v + j * OVERSAMPLE);
    const int ix = abs(p.off_u + k * OVERSAMPLE);
    complex_t c = kernels[start + iy * side + ix];
    if (p.conjugate)
        c.y = -c.y;
    return c;
}
