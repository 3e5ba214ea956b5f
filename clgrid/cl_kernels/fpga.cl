{# What the FPGA kernels share: precision, sizes, the plan decoder, the single
    work-item attribute, the Intel-only pragmas, the on-chip tile's geometry and the
    arguments of a walk over tiles.  Intel's offline compiler (aoc) defines
    INTELFPGA_CL; every other compiler gets the same source without the Intel
    extensions, so PoCL and Oclgrind run it as a functional emulation.
    Template variables: double, npol, oversample, grid_size, unroll_u, tile, max_support. #}
{% include "complex.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define UNROLL_U {{ unroll_u }}          /* kernel columns per pipeline step */
#define TILE {{ tile }}                  /* grid cells per side of a tile */
#define HALO {{ max_support }}           /* the widest kernel's reach beyond a tile, in cells */
#define PADDED (TILE + 2 * HALO)         /* side of the on-chip copy: tile plus halo */
{% include "plan.cl" %}

{% include "fpga_task.cl" %}

/* Grid cell (u, v) of the first on-chip cell of tile t: the tile's corner minus the halo. */
inline int2 padded_corner(__global const int2 *restrict tile_corner, int t)
{
    return tile_corner[t] - (int2)(HALO, HALO);
}

inline bool on_grid(int u, int v)
{
    return u >= 0 && u < GRID_SIZE && v >= 0 && v < GRID_SIZE;
}

{% macro tile_walk_arguments() %}
    __global const int4 *restrict plan,            /* [num_vis], tile by tile */
    __global const int2 *restrict tile_corner,     /* [num_tiles] first cell (u, v) */
    __global const int *restrict tile_first,       /* [num_tiles + 1] into plan */
    __global const complex_t *restrict kernels,    /* compacted quarters */
    __global const int *restrict kernel_start,     /* [plane] */
    __global const int *restrict kernel_side,      /* [plane] */
    __global const int *restrict support,          /* [plane] */
{%- endmacro %}
