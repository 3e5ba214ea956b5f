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

   Template variables: none. #}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF

#define KEPT 0
#define FLAGGED 1
#define OFF_GRID 2
#define BEYOND_STACK 3
#define NOT_FINITE 4
#define NUM_STATUSES 5

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
