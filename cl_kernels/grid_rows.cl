{# Row-band gridder for CPUs (clgrid/strategies/rows.py): owner computes, no atomics.
    Work-item b owns the grid rows [b * BAND, (b + 1) * BAND) of every polarisation and
    alone writes them, so it adds with plain loads and stores; on a CPU, where float
    atomics are compare-and-swap loops, that is most of the gain.  Visibilities arrive
    sorted by grid row, then column: band_range[b] is the run of those whose footprint
    may reach band b (grid row within the widest support of it), and each adds the rows
    of its footprint that fall in the band.  A footprint row is one contiguous table row
    of the kernels by offset (kernel_taps.cl), read forwards or backwards, so the
    innermost loop is a row of complex multiply-adds with unit stride on both sides: what
    a CPU compiler vectorises.  Template variables: double, npol, oversample, grid_size, band. #}
{% include "complex.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define BAND {{ band }}
{% include "plan.cl" %}
{% include "kernel_taps.cl" %}

/* row[x] += v * c[x * dir] for x in [-s, s]; v * conj(c) is folded in by the signs
   (bs = sign * v.y, as = sign * v.x), so there is no branch per tap. */
inline void add_row(__global complex_t *restrict row, __global const complex_t *restrict c, int dir, int s,
                    real_t a, real_t b, real_t as, real_t bs)
{
    if (dir > 0) {
        for (int x = -s; x <= s; ++x) {
            const complex_t k = c[x];
            row[x] += (complex_t)(a * k.x - bs * k.y, b * k.x + as * k.y);
        }
    } else {
        for (int x = -s; x <= s; ++x) {
            const complex_t k = c[-x];
            row[x] += (complex_t)(a * k.x - bs * k.y, b * k.x + as * k.y);
        }
    }
}

__kernel void grid_rows(__global const int4 *restrict plan,          /* [num_vis], by row then column */
                        __global const complex_t *restrict vis,      /* [num_vis][NPOL], weighted */
                        __global const complex_t *restrict kernels,  /* tables by offset */
                        __global const int *restrict kernel_start,   /* [plane] */
                        __global const int *restrict support,        /* [plane] */
                        __global const int2 *restrict band_range,    /* [num_bands] run of plan */
                        __global complex_t *restrict grid)           /* [NPOL][GRID_SIZE][GRID_SIZE] */
{
    const int band = get_global_id(0);
    const int first_row = band * BAND;
    const int last_row = min(first_row + BAND, GRID_SIZE) - 1;
    const int2 range = band_range[band];
    for (int i = range.x; i < range.y; ++i) {
        const planned_vis p = decode_plan(plan[i]);
        const int s = support[p.plane];
        const int j0 = max(-s, first_row - p.grid_v);
        const int j1 = min(s, last_row - p.grid_v);
        if (j0 > j1)
            continue;
        const kernel_taps t = taps_of(p, s, kernel_start[p.plane]);
        const real_t sign = p.conjugate ? -1 : 1;
        for (int pol = 0; pol < NPOL; ++pol) {
            const complex_t v = vis[(size_t)i * NPOL + pol];
            __global complex_t *centre = grid + ((size_t)pol * GRID_SIZE + p.grid_v) * GRID_SIZE + p.grid_u;
            for (int j = j0; j <= j1; ++j)
                add_row(centre + j * GRID_SIZE, kernels + t.centre + j * t.row, t.col, s,
                        v.x, v.y, sign * v.x, sign * v.y);
        }
    }
}
