{# Smallest and largest |w| in wavelengths of the kept samples of device uvw
   (clgrid/planning/device_points.py), as clgrid.imaging.geometry.abs_w_range computes it
   on the host: without keep, over the rows (the host scales the extremes by the
   frequencies' extremes); with keep, over every kept (row, channel) sample, |w| * scale
   in the same float64 product.  Each work-group reduces a strided share; the host takes
   the groups' extremes.  A non-finite |w| makes the largest infinite (the host refuses it).
   Template variables: wg. #}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
#define WG {{ wg }}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void abs_w_extremes(__global const double *restrict uvw, __global const double *restrict scale,
                    __global const uchar *restrict keep, const int nchan, const int n,
                    __global double2 *restrict partials)
{
    __local double lo[WG], hi[WG];
    const int lid = get_local_id(0);
    double a = INFINITY, b = -INFINITY;
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) {
        double w;
        if (keep) {                     /* i: a (row, channel) sample */
            if (!keep[i])
                continue;
            const int row = i / nchan;
            w = fabs(uvw[3 * row + 2]) * scale[i - row * nchan];
        } else {                        /* i: a row */
            w = fabs(uvw[3 * i + 2]);
        }
        if (!isfinite(w)) {
            b = INFINITY;
        } else {
            a = fmin(a, w);
            b = fmax(b, w);
        }
    }
    lo[lid] = a;
    hi[lid] = b;
    for (int stride = WG / 2; stride > 0; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < stride) {
            lo[lid] = fmin(lo[lid], lo[lid + stride]);
            hi[lid] = fmax(hi[lid], hi[lid + stride]);
        }
    }
    if (lid == 0)
        partials[get_group_id(0)] = (double2)(lo[0], hi[0]);
}
