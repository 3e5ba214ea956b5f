{# The image side of the w-gridding operator on the device (clgrid/wgridding.py, with a
    device FFT): crop a transformed w-plane into the image with its w phase, and the
    adjoint, so that no plane goes through the host.  Grid [NU][NV] complex, periodic,
    centre at index 0; image [npix_x][npix_y], pixel (ix, iy) at grid cell
    ((ix - npix_x / 2) mod NU, (iy - npix_y / 2) mod NV).  The w phase of plane p at a
    pixel is exp(-2 pi i c) with c = a0 + p * s cycles: a0 = (w_start t) mod 1 and
    s = dw t, computed in float64 on the host (t = n - 1 - nshift), so single precision
    loses nothing to large w.
    Template variables: double, use_w, phase_double (a0, s and c in float64: where the
    device has it, so that c = a0 + p s keeps its fraction in single precision too). #}
{% include "complex.cl" %}
{% if phase_double %}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double phase_t;
{% else %}
typedef float phase_t;
{% endif %}

/* sin and cos of 2 pi c for c in [-1/2, 1/2] cycles, by quarter turns and Taylor
   polynomials on [-pi/4, pi/4] (terms to x^17 in double, x^9 in single: truncation
   below 1e-19 and 2e-9): multiply-adds that vectorise, where a CPU runtime's sincos
   costs tens of nanoseconds (measured 60 ns a pixel on PoCL). */
inline real_t turn(const real_t c, real_t *cosine)
{
    const real_t q = rint((real_t)4 * c);
    const real_t x = (real_t)(2 * M_PI) * (c - (real_t)0.25 * q);
    const real_t x2 = x * x;
{% if double %}
    const real_t sp = x * (1 + x2 * (-1.0 / 6 + x2 * (1.0 / 120 + x2 * (-1.0 / 5040 + x2 * (1.0 / 362880
        + x2 * (-1.0 / 39916800 + x2 * (1.0 / 6227020800 + x2 * (-1.0 / 1307674368000
        + x2 * (1.0 / 355687428096000)))))))));
    const real_t cp = 1 + x2 * (-1.0 / 2 + x2 * (1.0 / 24 + x2 * (-1.0 / 720 + x2 * (1.0 / 40320
        + x2 * (-1.0 / 3628800 + x2 * (1.0 / 479001600 + x2 * (-1.0 / 87178291200
        + x2 * (1.0 / 20922789888000))))))));
{% else %}
    const real_t sp = x * (1 + x2 * (-1.0f / 6 + x2 * (1.0f / 120 + x2 * (-1.0f / 5040 + x2 * (1.0f / 362880)))));
    const real_t cp = 1 + x2 * (-0.5f + x2 * (1.0f / 24 + x2 * (-1.0f / 720 + x2 * (1.0f / 40320))));
{% endif %}
    const int k = ((int)q) & 3;     /* 2 pi c = x + k pi / 2 */
    *cosine = k == 0 ? cp : k == 1 ? -sp : k == 2 ? -cp : sp;
    return k == 0 ? sp : k == 1 ? cp : k == 2 ? -sp : -cp;
}

/* The w phase's cycles of plane `plane` at a pixel, reduced to [-1/2, 1/2]. */
inline real_t cycles(const phase_t a0, const phase_t s, const int plane)
{
    phase_t c = a0 + (phase_t)plane * s;
    return (real_t)(c - rint(c));
}

inline int grid_index(const int i, const int npix, const int n)
{
    const int g = i - npix / 2;
    return g < 0 ? g + n : g;
}

/* image[ix][iy] += Re(plane[cell] exp(-2 pi i c)) */
__kernel void accumulate(__global const complex_t *restrict grid, __global real_t *image,
                         __global const phase_t *restrict a0, __global const phase_t *restrict s,
                         const int nu, const int nv, const int npix_x, const int npix_y, const int plane)
{
    const int ix = get_global_id(0), iy = get_global_id(1);
    if (ix >= npix_x || iy >= npix_y)
        return;
    const int pix = ix * npix_y + iy;
    const complex_t g = grid[(size_t)grid_index(ix, npix_x, nu) * nv + grid_index(iy, npix_y, nv)];
{% if use_w %}
    const real_t c = cycles(a0[pix], s[pix], plane);
    real_t cosine;
    const real_t sine = turn(c, &cosine);
    image[pix] += g.x * cosine + g.y * sine;
{% else %}
    image[pix] += g.x;
{% endif %}
}

/* out = image * scale (the grid correction's inverse) */
__kernel void finish(__global const real_t *restrict image, __global const real_t *restrict scale,
                     __global real_t *out, const int count)
{
    const int i = get_global_id(0);
    if (i < count)
        out[i] = image[i] * scale[i];
}

/* The adjoint of accumulate and finish: the grid (zeroed before) gets
   dirty * scale * exp(+2 pi i c) at the image's cells. */
__kernel void load_plane(__global const real_t *restrict dirty, __global const real_t *restrict scale,
                         __global const phase_t *restrict a0, __global const phase_t *restrict s,
                         __global complex_t *grid, const int nu, const int nv, const int npix_x,
                         const int npix_y, const int plane)
{
    const int ix = get_global_id(0), iy = get_global_id(1);
    if (ix >= npix_x || iy >= npix_y)
        return;
    const int pix = ix * npix_y + iy;
    const real_t value = dirty[pix] * scale[pix];
    const size_t cell = (size_t)grid_index(ix, npix_x, nu) * nv + grid_index(iy, npix_y, nv);
{% if use_w %}
    const real_t c = cycles(a0[pix], s[pix], plane);
    real_t cosine;
    const real_t sine = turn(c, &cosine);
    grid[cell] = (complex_t)(value * cosine, value * sine);
{% else %}
    grid[cell] = (complex_t)(value, (real_t)0);
{% endif %}
}
