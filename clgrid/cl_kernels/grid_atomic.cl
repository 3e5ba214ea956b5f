{# Atomic gridder, seed 003 §3.1 (Listing 4): one work-group per visibility; the
    group's WG_V rows of WG_U work-items walk the kernel's rows, u fastest so that
    neighbouring work-items add to neighbouring grid cells; every addition is a
    float atomic on the global grid.  With texture, the weights are interpolated from
    the kernel cube (texture_sample.cl) instead of read as nearest samples; with an
    analytic kernel source (clgrid/analytic_kernel.py) they are evaluated (es_horner.cl,
    its polynomials copied to local memory) at each tap's exact distance from the
    visibility.
    Template variables: double, atomic, npol, oversample, grid_size, wg_u, wg_v,
    texture, analytic (and texture_sample.cl's or es_horner.cl's when set). #}
{% include "common.cl" %}
{% if analytic %}
{% include "es_horner.cl" %}
{% endif %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define WG_U {{ wg_u }}
#define WG_V {{ wg_v }}
{% include "plan.cl" %}
{% if texture %}
{% include "texture_sample.cl" %}
{% endif %}

__kernel __attribute__((reqd_work_group_size(WG_U, WG_V, 1)))
void grid_atomic(__global const int4 *restrict plan,          /* [num_vis] */
                 __global const complex_t *restrict vis,      /* [num_vis][NPOL], weighted */
{% if texture %}
                 KERNEL_CUBE cube,                            /* quarter cube */
                 __global const float4 *restrict position,    /* [num_vis] */
{% elif analytic %}
                 __global const complex_t *restrict fraction, /* [num_vis]: nearest cell - position */
                 __global const int *restrict support,        /* [plane] */
{% else %}
                 __global const complex_t *restrict kernels,  /* compacted quarters */
                 __global const int *restrict kernel_start,   /* [plane] */
                 __global const int *restrict kernel_side,    /* [plane] */
                 __global const int *restrict support,        /* [plane] */
{% endif %}
                 __global grid_real_t *grid,                       /* [NPOL][GRID_SIZE][GRID_SIZE] complex */
                 const int num_vis)
{
    const size_t pol_stride = (size_t)GRID_SIZE * GRID_SIZE;
{% if analytic %}
    __local real_t coef[ES_COEFS];
    es_coef_to_local(coef);
{% endif %}
    for (int i = get_group_id(0); i < num_vis; i += get_num_groups(0)) {
        const planned_vis p = decode_plan(plan[i]);
{% if texture %}
        const float4 where = position[i];
        const int s = footprint_support(where);
{% elif analytic %}
        const int s = support[p.plane];
        const complex_t f = fraction[i];   /* tap k lies k + f cells from the visibility */
{% else %}
        const int s = support[p.plane];
        const int start = kernel_start[p.plane];
        const int side = kernel_side[p.plane];
{% endif %}
        complex_t v[NPOL];
        for (int pol = 0; pol < NPOL; ++pol)
            v[pol] = vis[(size_t)i * NPOL + pol];

        for (int j = -s + (int)get_local_id(1); j <= s; j += WG_V) {
            const size_t row = (size_t)(p.grid_v + j) * GRID_SIZE;
{% if analytic %}
            const real_t weight_v = es_weight_in(coef, j + f.y);
{% endif %}
            for (int k = -s + (int)get_local_id(0); k <= s; k += WG_U) {
{% if texture %}
                complex_t c = texture_weight(cube, where, j, k);
                if (p.conjugate)
                    c.y = -c.y;
{% elif analytic %}
                const complex_t c = (complex_t)(weight_v * es_weight_in(coef, k + f.x), 0);   /* real: conj(c) = c */
{% else %}
                const complex_t c = kernel_sample(kernels, start, side, p, j, k);
{% endif %}
                const size_t cell = row + p.grid_u + k;
                for (int pol = 0; pol < NPOL; ++pol)
                    atomic_add_complex(grid, pol * pol_stride + cell, cmul(v[pol], c));
            }
        }
    }
}
