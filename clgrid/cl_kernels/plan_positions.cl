{# Planning on the device (clgrid/device_plan.py): seed 003 Listing 1's index arithmetic,
   in double, with the very operations of clgrid.planning.host.grid_indices, so the result is
   bit-identical to the host's float64 planning (IEEE double division and sqrt are
   correctly rounded in OpenCL; contraction into fma is switched off; round() rounds
   halves away from zero, as the reference does).

   1. classify: one status per (row, channel) sample (KEPT, FLAGGED, OFF_GRID,
      BEYOND_STACK, NOT_FINITE), the packed plan of kept samples and the counts, and for
      an analytic kernel source (fraction not null) each kept sample's exact offset from
      its nearest cell, nearest - position in cells (clgrid/analytic_kernel.py says why);
   2. the caller scans the kept flags (clgrid/scan.py);
   3. compact: kept samples, in the caller's order, to dense arrays.

   Template variables: stacked (and, with it, those of the w-stacking section below). #}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

#define KEPT 0
#define FLAGGED 1
#define OFF_GRID 2
#define BEYOND_STACK 3
#define NOT_FINITE 4
#define ELSEWHERE 5     /* w-stacking: no tap on the planes planned for (another operator's) */
#define NUM_STATUSES 6

/* Status and packed plan (Plan encoding, plan.cl) of sample i = row * nchan + chan.
   uvw: (nrow, 3) in metres when scale is not null (scale[chan] = freq / c), in
   wavelengths otherwise; usable: 0 where every polarisation is flagged (null: all). */
__kernel void classify(__global const double *restrict uvw, __global const double *restrict scale,
                       __global const uchar *restrict usable, const int nchan, const int nsample,
                       const double du, const double oversample, const double w_scale,
                       const int grid_size, const int num_planes, __global const int *restrict supports,
                       __global int *restrict status, __global int4 *restrict packed,
                       __global int *restrict kept, __global int *restrict counts,
                       __global double2 *restrict fraction)
{
    __local int tally[NUM_STATUSES];
    const int lid = get_local_id(0);
    if (lid < NUM_STATUSES)
        tally[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);

    const int i = get_global_id(0);
    if (i < nsample) {
        const int row = i / nchan;
        const double f = scale ? scale[i - row * nchan] : 1.0;
        const double u = uvw[3 * row] * f, v = uvw[3 * row + 1] * f, w = uvw[3 * row + 2] * f;
        int s = KEPT;
        int4 p = (int4)(0, 0, 0, 0);
        if (usable && !usable[i]) {
            s = FLAGGED;
        } else if (!(isfinite(u) && isfinite(v) && isfinite(w))) {
            s = NOT_FINITE;
        } else {
            const double pos_u = u / du, pos_v = v / du;
            const double near_u = round(pos_u), near_v = round(pos_v);
            const double off_u = round((near_u - pos_u) * oversample);
            const double off_v = round((near_v - pos_v) * oversample);
            const double plane = round(sqrt(fabs(w * w_scale)));
            if (plane >= num_planes) {
                s = BEYOND_STACK;
            } else {
                const double support = supports[(int)plane];
                const double centre = grid_size / 2;
                if (near_u + centre - support < 0 || near_u + centre + support >= grid_size
                    || near_v + centre - support < 0 || near_v + centre + support >= grid_size) {
                    s = OFF_GRID;
                } else {
                    p.x = (int)(near_u + centre);
                    p.y = (int)(near_v + centre);
                    p.z = (int)(((uint)(int)off_u & 0xFFFFu) | ((uint)(int)off_v << 16));
                    p.w = (int)((uint)(int)plane | (w < 0 ? 0x80000000u : 0u));
                    if (fraction)
                        fraction[i] = (double2)(near_u - pos_u, near_v - pos_v);
                }
            }
        }
        status[i] = s;
        packed[i] = p;
        kept[i] = s == KEPT;
        atomic_inc(&tally[s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < NUM_STATUSES && tally[lid])
        atomic_add(&counts[lid], tally[lid]);
}

/* Kept samples to dense arrays in the caller's order: sample index, packed plan,
   support and the norm's weight sum (KernelStack.weight_sums at its plane and offsets). */
__kernel void compact(__global const int *restrict status, __global const int4 *restrict packed,
                      __global const int *restrict position, const int nsample,
                      __global const int *restrict supports, __global const double *restrict weight_sums,
                      const int offset_range,
                      __global int *restrict sample, __global int4 *restrict kept_packed,
                      __global int *restrict kept_support, __global double *restrict kept_weight_sum)
{
    const int i = get_global_id(0);
    if (i >= nsample || status[i] != KEPT)
        return;
    const int j = position[i];
    const int4 p = packed[i];
    const int plane = p.w & 0x7fffffff;
    const int off_u = as_int(as_uint(p.z) << 16) >> 16, off_v = p.z >> 16;
    const int side = 2 * offset_range + 1;
    sample[j] = i;
    kept_packed[j] = p;
    kept_support[j] = supports[plane];
    kept_weight_sum[j] = weight_sums[(plane * side + off_v + offset_range) * side + off_u + offset_range];
}
{% if stacked %}


/* -- Points for w-stacking (clgrid/imaging: the exponential-of-semicircle kernel evaluated
   at its exact distance, the padded grid periodic, w-planes spaced evenly), with the very
   operations of clgrid.planning.host.stacked_positions.  A point's first taps: the cells
   ceil(pos - W/2) of each axis (mod the grid) and the first plane ceil(pos_w - W/2), the
   first tap's offset from the point in each (fraction, in [-W/2, -W/2 + 1)), and where
   fold is set a point with w < 0 moved to -uvw and conjugated (the image is real).
   packed: x = first u cell, y = first v cell (the grid's first and second axes), z = 0,
   w = first plane, bit 31 set where the point moved.
   Template variables: stacked, double (fraction and phase in double), use_w, fold, support,
   num_planes. */
#define SUPPORT {{ support }}
#define NUM_PLANES {{ num_planes }}
{% if double %}
typedef double4 real4_t;
typedef double2 cplx_t;
{% else %}
typedef float4 real4_t;
typedef float2 cplx_t;
{% endif %}

/* The geometry (clgrid.imaging.geometry.ImageGeometry): scale factors from wavelengths to
   cells and planes, the phase's centre and nshift, and a recentred image's w-term tilt. */
typedef struct {
    double sign_u, sign_v, sign_w;  /* the flips */
    double cells_u, cells_v;        /* nu * pixsize_x, nv * pixsize_y */
    double w_start, dw;
    double center_x, center_y, nshift;
    double tilt_x, tilt_y;          /* the point at u + tilt_x w, v + tilt_y w */
    int nu, nv, nchan, nsample;
} stacking_t;

/* u, v, w in wavelengths of sample i (row i / nchan), flipped and folded; returns
   whether the point moved to -uvw. */
inline int stacked_point(__global const double *restrict uvw, __global const double *restrict scale,
                         const stacking_t g, const int i, double *u, double *v, double *w)
{
    const int row = i / g.nchan;
    const double f = scale[i - row * g.nchan];
    *u = uvw[3 * row] * g.sign_u * f;
    *v = uvw[3 * row + 1] * g.sign_v * f;
    *w = uvw[3 * row + 2] * g.sign_w * f;
    int moved = 0;
{% if fold %}
    if (*w < 0) {
        *u = -*u;
        *v = -*v;
        *w = -*w;
        moved = 1;
    }
{% endif %}
{% if use_w %}
    *u = *u + g.tilt_x * *w;
    *v = *v + g.tilt_y * *w;
{% endif %}
    return moved;
}

inline int wrap(const double first, const int n)
{
    const long c = (long)first % n;
    return (int)(c < 0 ? c + n : c);
}

/* First cells (u, v mod the grid; first plane, as a double) and the first taps' offsets. */
inline int2 first_taps(const stacking_t g, const double u, const double v, const double w, double4 *frac,
                       double *first_w)
{
    const double radius = SUPPORT / 2.0;
    const double pos_u = u * g.cells_u, pos_v = v * g.cells_v;
    const double first_u = ceil(pos_u - radius), first_v = ceil(pos_v - radius);
{% if use_w %}
    const double pos_w = (w - g.w_start) / g.dw;
    *first_w = ceil(pos_w - radius);
    *frac = (double4)(first_u - pos_u, first_v - pos_v, *first_w - pos_w, 0.0);
{% else %}
    *first_w = 0.0;
    *frac = (double4)(first_u - pos_u, first_v - pos_v, 0.0, 0.0);
{% endif %}
    return (int2)(wrap(first_u, g.nu), wrap(first_v, g.nv));
}

/* Status of sample i (KEPT, FLAGGED where keep is 0 (null: all kept), NOT_FINITE, and with
   w ELSEWHERE for a point with no tap on planes [plane_lo, plane_hi), left to the
   operators of the other planes, or BEYOND_STACK); where its point is finite, its first
   cells (returned), first plane and whether it moved (folded to -uvw). */
inline int stacked_status(__global const double *restrict uvw, __global const double *restrict scale,
                          __global const uchar *restrict keep, const stacking_t g, const int plane_lo,
                          const int plane_hi, const int i, int2 *c, double *first_w, int *moved)
{
    if (keep && !keep[i])
        return FLAGGED;
    double u, v, w;
    *moved = stacked_point(uvw, scale, g, i, &u, &v, &w);
    if (!(isfinite(u) && isfinite(v) && isfinite(w)))
        return NOT_FINITE;
    double4 frac;
    *c = first_taps(g, u, v, w, &frac, first_w);
{% if use_w %}
    if (*first_w >= plane_hi || *first_w + SUPPORT <= plane_lo)
        return ELSEWHERE;       /* first: a slab's geometry holds its own points only */
    if (*first_w < 0 || *first_w + SUPPORT > NUM_PLANES)
        return BEYOND_STACK;
{% endif %}
    return KEPT;
}

/* The phase gridding applies to a point (centre shift and nshift). */
inline cplx_t stacked_phase(const stacking_t g, const double u, const double v, const double w)
{
    const double cycles = u * g.center_x + v * g.center_y - w * g.nshift;
    double c;
    const double s = sincos(2 * M_PI * cycles, &c);
    return (cplx_t)(c, s);
}

/* Status and packed plan of sample i (stacked_status). */
__kernel void classify_stacked(__global const double *restrict uvw, __global const double *restrict scale,
                               __global const uchar *restrict keep, const stacking_t g,
                               const int plane_lo, const int plane_hi,
                               __global int *restrict status, __global int4 *restrict packed,
                               __global int *restrict kept, __global int *restrict counts)
{
    __local int tally[NUM_STATUSES];
    const int lid = get_local_id(0);
    if (lid < NUM_STATUSES)
        tally[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int i = get_global_id(0);
    if (i < g.nsample) {
        int2 c;
        double first_w;
        int moved;
        const int s = stacked_status(uvw, scale, keep, g, plane_lo, plane_hi, i, &c, &first_w, &moved);
        const int4 p = s == FLAGGED || s == NOT_FINITE ? (int4)(0, 0, 0, 0)
                     : (int4)(c.x, c.y, 0, (int)((uint)(int)first_w | (moved ? 0x80000000u : 0u)));
        status[i] = s;
        packed[i] = p;
        kept[i] = s == KEPT;
        atomic_inc(&tally[s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < NUM_STATUSES && tally[lid])
        atomic_add(&counts[lid], tally[lid]);
}

/* Kept samples to dense arrays in the caller's order: sample index, packed plan, the first
   taps' offsets and the phase gridding applies (centre shift and nshift; null: none). */
__kernel void compact_stacked(__global const int *restrict status, __global const int4 *restrict packed,
                              __global const int *restrict position, __global const double *restrict uvw,
                              __global const double *restrict scale, const stacking_t g,
                              __global int *restrict sample, __global int4 *restrict kept_packed,
                              __global real4_t *restrict fraction, __global cplx_t *restrict phase)
{
    const int i = get_global_id(0);
    if (i >= g.nsample || status[i] != KEPT)
        return;
    const int j = position[i];
    double u, v, w;
    stacked_point(uvw, scale, g, i, &u, &v, &w);
    double4 frac;
    double first_w;
    first_taps(g, u, v, w, &frac, &first_w);
    sample[j] = i;
    kept_packed[j] = packed[i];
{% if double %}
    fraction[j] = frac;
{% else %}
    fraction[j] = convert_float4(frac);
{% endif %}
    if (phase)
        phase[j] = stacked_phase(g, u, v, w);
}
{% endif %}
{% if stacked %}

/* The plan in a key order (clgrid/planning/stacking.py): order[k] is the plan index of the
   k-th point in that order; first: its first cells and first plane (no flag), src: where
   its value is, as -index - 1 where it moved (conjugated): its sample, or with by_position
   its place in the plan (values given in plan order); fraction and phase with it. */
__kernel void take_stacked(__global const int *restrict order, __global const int *restrict sample,
                           __global const int4 *restrict packed, __global const real4_t *restrict fraction,
                           __global const cplx_t *restrict phase, const int n, const int by_position,
                           __global int4 *restrict first, __global real4_t *restrict frac,
                           __global int *restrict src, __global cplx_t *restrict sorted_phase)
{
    const int k = get_global_id(0);
    if (k >= n)
        return;
    const int i = order[k];
    const int4 p = packed[i];
    first[k] = (int4)(p.x, p.y, p.w & 0x7fffffff, 0);
    frac[k] = fraction[i];
    const int s = by_position ? i : sample[i];
    src[k] = p.w < 0 ? -s - 1 : s;
    if (phase)
        sorted_phase[k] = phase[i];
}
{% endif %}
