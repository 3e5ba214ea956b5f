{# The image side of the w-gridding operator on the device (clgrid/wgridding.py, with a
    device FFT): crop a transformed w-plane into the image with its w phase, and the
    adjoint, so that no plane goes through the host.  Grid [NU][NV] complex, periodic,
    centre at index 0; image [npix_x][npix_y], pixel (ix, iy) at grid cell
    ((ix - npix_x / 2) mod NU, (iy - npix_y / 2) mod NV).  The w phase of plane p at a
    pixel is exp(-2 pi i c) with c = (w_start + p dw) t cycles, t = s - nshift (s the w
    term: n - 1, tilted by tilt_x x + tilt_y y for a recentred image); the
    image is divided by the grid correction cu[ix] cv[iy] cw(dw t) (times n with
    divide_by_n), cw from its Chebyshev series.
    With fp64 (phase_double) every per-pixel quantity is computed here, in double, from
    the pixel's coordinates: nothing of the image's size crosses from the host.  Without
    it the host sends a0 = (w_start t) mod 1 and s = dw t (float64 there, so c = a0 + p s
    keeps its fraction in single precision) and the inverse correction per pixel.
    The kernels run over (npix_y, npix_x): dimension 0, the one a work-group's neighbours
    share, runs along an image row and a grid row, so their reads are coalesced.
    Template variables: double, use_w, phase_double. #}
{% include "complex.cl" %}
{% if phase_double %}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
{% endif %}

/* sin and cos of 2 pi c for c in [-1/2, 1/2] cycles, by quarter turns and Taylor
   polynomials on [-pi/4, pi/4] (terms to x^17 in double, x^9 in single: truncation
   below 1e-19 and 2e-9): multiply-adds that vectorise, where a CPU runtime's sincos
   costs tens of nanoseconds a pixel (PoCL: docs/benchmarks/imaging.md). */
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

{% if phase_double %}
/* What the pixel model needs (wgridding.WGridder._pixels): the image's geometry, the w
   planes and the Chebyshev series of the w correction on [cheb_lo, cheb_hi] in dw t. */
typedef struct {
    double pixsize_x, pixsize_y, center_x, center_y, nshift, w_start, dw, cheb_lo, cheb_hi, tilt_x, tilt_y;
    int npix_x, npix_y, ncheb, divide_by_n;
} pixels_t;

/* t = s - nshift at pixel (ix, iy), s = n - 1 + tilt_x x + tilt_y y the w term, and n. */
inline double pixel_t(const pixels_t p, const int ix, const int iy, double *n)
{
    const double x = (ix - p.npix_x / 2) * p.pixsize_x + p.center_x;
    const double y = (iy - p.npix_y / 2) * p.pixsize_y + p.center_y;
    *n = sqrt(1.0 - x * x - y * y);
    return ((*n - 1.0) + p.tilt_x * x + p.tilt_y * y) - p.nshift;
}

/* 1 / correction at pixel (ix, iy). */
inline real_t pixel_scale(const pixels_t p, __global const double *restrict cu, __global const double *restrict cv,
                          __global const double *restrict cheb, const int ix, const int iy)
{
    double corr = cu[ix] * cv[iy];
{% if use_w %}
    double n;
    const double t = pixel_t(p, ix, iy, &n);
    /* Clenshaw's recurrence for sum cheb[k] T_k(z), z the point dw t mapped to [-1, 1] */
    const double z = (2.0 * p.dw * t - (p.cheb_lo + p.cheb_hi)) / (p.cheb_hi - p.cheb_lo);
    double b1 = 0.0, b2 = 0.0;
    for (int k = p.ncheb - 1; k >= 1; --k) {
        const double b0 = 2.0 * z * b1 - b2 + cheb[k];
        b2 = b1;
        b1 = b0;
    }
    corr *= z * b1 - b2 + cheb[0];
    if (p.divide_by_n)
        corr *= n;
{% endif %}
    return (real_t)(1.0 / corr);
}

/* The w phase's cycles of plane `plane` at pixel (ix, iy), reduced to [-1/2, 1/2]. */
inline real_t pixel_cycles(const pixels_t p, const int ix, const int iy, const int plane)
{
    double n;
    const double c = (p.w_start + plane * p.dw) * pixel_t(p, ix, iy, &n);
    return (real_t)(c - rint(c));
}
#define PIXEL_ARGS const pixels_t model, __global const double *restrict cu, __global const double *restrict cv, \
    __global const double *restrict cheb
#define SCALE(ix, iy, i) pixel_scale(model, cu, cv, cheb, ix, iy)
#define CYCLES(ix, iy, i, plane) pixel_cycles(model, ix, iy, plane)
{% else %}
/* The w phase's cycles of plane `plane` at a pixel, reduced to [-1/2, 1/2]. */
inline real_t cycles(const float a0, const float s, const int plane)
{
    float c = a0 + (float)plane * s;
    return c - rint(c);
}
#define PIXEL_ARGS __global const float *restrict a0, __global const float *restrict s, \
    __global const real_t *restrict scale
#define SCALE(ix, iy, i) scale[i]
#define CYCLES(ix, iy, i, plane) cycles(a0[i], s[i], plane)
{% endif %}

inline int grid_index(const int i, const int npix, const int n)
{
    const int g = i - npix / 2;
    return g < 0 ? g + n : g;
}

/* image[ix][iy] += Re(plane[cell] exp(-2 pi i c)) */
__kernel void accumulate(__global const complex_t *restrict grid, __global real_t *image, PIXEL_ARGS,
                         const int nu, const int nv, const int npix_x, const int npix_y, const int plane)
{
    const int iy = get_global_id(0), ix = get_global_id(1);   /* neighbours along a row: coalesced */
    if (ix >= npix_x || iy >= npix_y)
        return;
    const int pix = ix * npix_y + iy;
    const complex_t g = grid[(size_t)grid_index(ix, npix_x, nu) * nv + grid_index(iy, npix_y, nv)];
{% if use_w %}
    const real_t c = CYCLES(ix, iy, pix, plane);
    real_t cosine;
    const real_t sine = turn(c, &cosine);
    image[pix] += g.x * cosine + g.y * sine;
{% else %}
    image[pix] += g.x;
{% endif %}
}

/* out = image / the grid correction (the image made, or a dirty image to predict from,
   once per call); not_finite[0] counts the image's NaN and infinite pixels, not_finite[1]
   the finite ones the division made infinite.  With `add`, out = that + out (the images
   of the devices after this one in a device list, sent up), the scaled value rounded
   first, as the host's sum would; not_finite[2] counts the sums that are not finite. */
__kernel void finish(__global const real_t *restrict image, __global real_t *out, PIXEL_ARGS,
                     const int npix_x, const int npix_y, __global int *restrict not_finite, const int add)
{
    const int iy = get_global_id(0), ix = get_global_id(1);   /* neighbours along a row: coalesced */
    if (ix >= npix_x || iy >= npix_y)
        return;
    const int i = ix * npix_y + iy;
    const real_t value = image[i];
    const real_t scaled = value * SCALE(ix, iy, i);
    if (!isfinite(value))
        atomic_inc(not_finite);
    else if (!isfinite(scaled))
        atomic_inc(not_finite + 1);
    if (add) {
#pragma OPENCL FP_CONTRACT OFF
        const real_t sum = scaled + out[i];
        if (!isfinite(sum))
            atomic_inc(not_finite + 2);
        out[i] = sum;
    } else {
        out[i] = scaled;
    }
}

/* The adjoint of accumulate: the grid (zeroed before) gets scaled * exp(+2 pi i c) at
   the image's cells, `scaled` the dirty image through finish. */
__kernel void load_plane(__global const real_t *restrict scaled, PIXEL_ARGS,
                         __global complex_t *grid, const int nu, const int nv, const int npix_x,
                         const int npix_y, const int plane)
{
    const int iy = get_global_id(0), ix = get_global_id(1);   /* neighbours along a row: coalesced */
    if (ix >= npix_x || iy >= npix_y)
        return;
    const int pix = ix * npix_y + iy;
    const real_t value = scaled[pix];
    const size_t cell = (size_t)grid_index(ix, npix_x, nu) * nv + grid_index(iy, npix_y, nv);
{% if use_w %}
    const real_t c = CYCLES(ix, iy, pix, plane);
    real_t cosine;
    const real_t sine = turn(c, &cosine);
    grid[cell] = (complex_t)(value * cosine, value * sine);
{% else %}
    grid[cell] = (complex_t)(value, (real_t)0);
{% endif %}
}
