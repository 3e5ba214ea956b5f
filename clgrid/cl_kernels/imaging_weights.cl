{# Imaging weights (clgrid/imager/device_weighting.py): WSClean's weight-grid density and
    each sample's weight in the image, on the device.  The cell of a sample is computed
    in double precision with the same operations, in the same order, as the host's
    float64 twin (clgrid/imager/weighting.py), and without contraction into fused
    multiply-adds, so both put every sample in the same cell.  The density is summed in
    64-bit fixed point with the project's deterministic add (common.cl, deterministic):
    integer atomics, any order, the same bits.
    Template variable: wg (the work-group size of `apply`, a power of two); common.cl is
    rendered with double, deterministic and atomic "cas" (unused). #}
{% include "common.cl" %}
#pragma OPENCL FP_CONTRACT OFF
#define WG {{ wg }}

/* Sample (row, channel)'s cell (y * width + x), or -1 outside the grid: v < 0 folded to
   (-u, -v); column floor(u scale_x + width / 2), row floor(v scale_y), u and v in
   wavelengths (metres / wavelength); (u_m, v_m) are the row's folded uvw in metres. */
inline long weight_cell(const double u_m, const double v_m, const double wavelength, const double scale_x,
                        const double scale_y, const int width, const int half_height)
{
    const double x = floor((u_m / wavelength) * scale_x + (double)(width / 2));
    const double y = floor((v_m / wavelength) * scale_y);
    if (!(x >= 0.0 && x < (double)width && y < (double)half_height))
        return -1;
    return (long)y * width + (long)x;
}

/* density[cell] += weight * 2^exponent (rounded to an integer) for every sample with a
   non-zero weight inside the grid; a work-item takes whole rows. */
__kernel void density(__global const double *restrict uvw, __global const double *restrict wavelengths,
                      __global const float *restrict weights, const ulong nrow, const int nchan,
                      const double scale_x, const double scale_y, const int width, const int half_height,
                      const int exponent, __global grid_real_t *density)
{
    for (ulong row = get_global_id(0); row < nrow; row += get_global_size(0)) {
        const double flip = uvw[3 * row + 1] < 0.0 ? -1.0 : 1.0;
        const double u_m = uvw[3 * row] * flip, v_m = uvw[3 * row + 1] * flip;
        __global const float *w = weights + row * (ulong)nchan;
        for (int channel = 0; channel < nchan; ++channel) {
            if (w[channel] == 0.0f)
                continue;
            const long cell = weight_cell(u_m, v_m, wavelengths[channel], scale_x, scale_y, width, half_height);
            if (cell >= 0)
                atomic_add_real(density + cell, ldexp((double)w[channel], exponent));
        }
    }
}

/* weights[i] *= imaging[cell] (0 outside the grid), in float as the host does; used[i] |=
   (the result is not 0).  Each work-group writes its partial sums: counts[2 g] samples
   with a weight before, counts[2 g + 1] those kept; sums[3 g] their visibility weights,
   sums[3 g + 1] their weights in the image, sums[3 g + 2] the longest kept baseline
   |uvw| f (metres x Hz).  The work-group size is WG, a power of two. */
__kernel void apply(__global const double *restrict uvw, __global const double *restrict wavelengths,
                    __global const double *restrict freqs, __global float *restrict weights,
                    __global const float *restrict imaging, __global uchar *restrict used, const ulong nrow,
                    const int nchan, const double scale_x, const double scale_y, const int width,
                    const int half_height, __global long *restrict counts, __global double *restrict sums)
{
    __local long local_counts[2 * WG];
    __local double local_sums[3 * WG];
    long before = 0, kept = 0;
    double visibility_sum = 0.0, weight_sum = 0.0, longest = 0.0;
    for (ulong row = get_global_id(0); row < nrow; row += get_global_size(0)) {
        const double x = uvw[3 * row], y = uvw[3 * row + 1], z = uvw[3 * row + 2];
        const double flip = y < 0.0 ? -1.0 : 1.0;
        const double u_m = x * flip, v_m = y * flip;
        const double length = sqrt(x * x + y * y + z * z);
        for (int channel = 0; channel < nchan; ++channel) {
            const ulong i = row * (ulong)nchan + channel;
            const float w = weights[i];
            if (w == 0.0f)
                continue;
            ++before;
            const long cell = weight_cell(u_m, v_m, wavelengths[channel], scale_x, scale_y, width, half_height);
            const float factor = cell >= 0 ? imaging[cell] : 0.0f;
            const float result = w * factor;
            weights[i] = result;
            weight_sum += (double)result;
            if (factor != 0.0f) {
                ++kept;
                visibility_sum += (double)w;
                used[i] = 1;
                longest = fmax(longest, length * freqs[channel]);
            }
        }
    }
    const int lid = get_local_id(0);
    local_counts[2 * lid] = before;
    local_counts[2 * lid + 1] = kept;
    local_sums[3 * lid] = visibility_sum;
    local_sums[3 * lid + 1] = weight_sum;
    local_sums[3 * lid + 2] = longest;
    for (int stride = WG / 2; stride > 0; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < stride) {
            local_counts[2 * lid] += local_counts[2 * (lid + stride)];
            local_counts[2 * lid + 1] += local_counts[2 * (lid + stride) + 1];
            local_sums[3 * lid] += local_sums[3 * (lid + stride)];
            local_sums[3 * lid + 1] += local_sums[3 * (lid + stride) + 1];
            local_sums[3 * lid + 2] = fmax(local_sums[3 * lid + 2], local_sums[3 * (lid + stride) + 2]);
        }
    }
    if (lid == 0) {
        const size_t g = get_group_id(0);
        counts[2 * g] = local_counts[0];
        counts[2 * g + 1] = local_counts[1];
        sums[3 * g] = local_sums[0];
        sums[3 * g + 1] = local_sums[1];
        sums[3 * g + 2] = local_sums[2];
    }
}

/* density[i] in units twice as large, `shift` times (rounded half up): a later add whose
   weights would leave the 64 bits at the current units. */
__kernel void halve_units(__global grid_real_t *density, const ulong count, const int shift)
{
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0))
        density[i] = (density[i] + ((long)1 << (shift - 1))) >> shift;
}
