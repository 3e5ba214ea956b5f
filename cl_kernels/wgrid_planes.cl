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
    const real_t sine = sincos((real_t)(2 * M_PI) * c, &cosine);
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
    const real_t sine = sincos((real_t)(2 * M_PI) * c, &cosine);
    grid[cell] = (complex_t)(value * cosine, value * sine);
{% else %}
    grid[cell] = (complex_t)(value, (real_t)0);
{% endif %}
}
