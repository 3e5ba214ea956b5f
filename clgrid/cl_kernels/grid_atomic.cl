{# Atomic gridder, seed 003 §3.1 (Listing 4): one work-group per visibility; the
    group's WG_V rows of WG_U work-items walk the kernel's rows, u fastest so that
    neighbouring work-items add to neighbouring grid cells; every addition is a
    float atomic on the global grid.  The weights come from the kernel source `source`
    (source_table.cl, source_texture.cl or source_analytic.cl: their per-point names).
    Template variables: double, atomic, npol, oversample, grid_size, wg_u, wg_v, source
    (and the source's). #}
{% include "common.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define WG_U {{ wg_u }}
#define WG_V {{ wg_v }}
{% include "plan.cl" %}
{% include source %}

__kernel __attribute__((reqd_work_group_size(WG_U, WG_V, 1)))
void grid_atomic(__global const int4 *restrict plan,          /* [num_vis] */
                 __global const complex_t *restrict vis,      /* [num_vis][NPOL], weighted */
                 SOURCE_ARGS
                 __global grid_real_t *grid,                       /* [NPOL][GRID_SIZE][GRID_SIZE] complex */
                 const int num_vis)
{
    const size_t pol_stride = (size_t)GRID_SIZE * GRID_SIZE;
    POINT_SETUP
    for (int i = get_group_id(0); i < num_vis; i += get_num_groups(0)) {
        const planned_vis p = decode_plan(plan[i]);
        const int s = source_support(SOURCE_PASS p, i);
        const point_taps taps = point_taps_of(SOURCE_PASS p, s, i);
        complex_t v[NPOL];
        for (int pol = 0; pol < NPOL; ++pol)
            v[pol] = vis[(size_t)i * NPOL + pol];

        for (int j = -s + (int)get_local_id(1); j <= s; j += WG_V) {
            const size_t row = (size_t)(p.grid_v + j) * GRID_SIZE;
            const tap_row r = point_row(SOURCE_STORE, taps, j);
            for (int k = -s + (int)get_local_id(0); k <= s; k += WG_U) {
                const complex_t c = source_conj(point_weight_in_row(SOURCE_STORE, taps, r, j, k), p.conjugate);
                const size_t cell = row + p.grid_u + k;
                for (int pol = 0; pol < NPOL; ++pol)
                    atomic_add_complex(grid, pol * pol_stride + cell, cmul(v[pol], c));
            }
        }
    }
}
