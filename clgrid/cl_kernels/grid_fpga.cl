{# FPGA gridder (Intel FPGA SDK for OpenCL, single work-item).  One pipeline walks the
    visibilities tile by tile, in the order clgrid/strategies/fpga.py sorts them on
    the host, and accumulates each tile plus a kernel-wide halo on chip; the tile is
    added to the global grid once, when the pipeline leaves it.  No atomics: nothing
    else writes the grid (seed 000, memo 74: global bandwidth and layout limit FPGA
    gridding, so each grid cell crosses the memory interface once per tile).

    Floating-point adds into on-chip memory would be a loop-carried dependency: the
    next visibility may add to the same cell before the last add has left the
    pipeline.  So the accumulator is banked: visibility i of a tile adds to copy
    i % BANKS, two visibilities that share a copy are BANKS apart (ivdep safelen),
    and within one visibility every footprint cell is distinct (ivdep).  The copies
    are summed at write-out.  Kernel columns go UNROLL_U per pipeline step.
    Template variables: those of fpga.cl, and banks. #}
{% include "fpga.cl" %}
{% from "fpga.cl" import tile_walk_arguments with context %}
#define BANKS {{ banks }}

__kernel SINGLE_WORK_ITEM
void grid_fpga(
{{ tile_walk_arguments() }}
    __global complex_t *restrict grid,             /* [NPOL][GRID_SIZE][GRID_SIZE] */
    __global const complex_t *restrict vis,        /* [num_vis][NPOL], weighted */
    const int num_tiles)
{
    __local complex_t acc[BANKS][NPOL][PADDED * PADDED];
    const complex_t zero = (complex_t)(0, 0);

    /* Cleared once here; the write-out clears what it has written. */
    for (int b = 0; b < BANKS; ++b)
        for (int pol = 0; pol < NPOL; ++pol) {
            #pragma unroll {{ unroll_u }}
            for (int c = 0; c < PADDED * PADDED; ++c)
                acc[b][pol][c] = zero;
        }

    for (int t = 0; t < num_tiles; ++t) {
        const int2 corner = padded_corner(tile_corner, t);
        int bank = 0;
        INTEL_PRAGMA("ivdep safelen({{ banks }}) array(acc)")
        for (int i = tile_first[t]; i < tile_first[t + 1]; ++i) {
            const planned_vis p = decode_plan(plan[i]);
            const int s = support[p.plane];
            const int start = kernel_start[p.plane];
            const int side = kernel_side[p.plane];
            complex_t v[NPOL];
            #pragma unroll
            for (int pol = 0; pol < NPOL; ++pol)
                v[pol] = vis[(size_t)i * NPOL + pol];

            INTEL_PRAGMA("ivdep array(acc)")
            for (int j = -s; j <= s; ++j) {
                const int row = (p.grid_v + j - corner.y) * PADDED + p.grid_u - corner.x;
                INTEL_PRAGMA("ivdep array(acc)")
                for (int k0 = -s; k0 <= s; k0 += UNROLL_U) {
                    #pragma unroll
                    for (int lane = 0; lane < UNROLL_U; ++lane) {
                        const int k = k0 + lane;
                        if (k <= s) {
                            const complex_t c = kernel_sample(kernels, start, side, p, j, k);
                            #pragma unroll
                            for (int pol = 0; pol < NPOL; ++pol)
                                acc[bank][pol][row + k] += cmul(v[pol], c);
                        }
                    }
                }
            }
            bank = bank + 1 == BANKS ? 0 : bank + 1;
        }

        /* Add the tile and its halo to the grid, row by row, and clear it. */
        for (int y = 0; y < PADDED; ++y) {
            const int gv = corner.y + y;
            #pragma unroll {{ unroll_u }}
            for (int x = 0; x < PADDED; ++x) {
                const int gu = corner.x + x;
                #pragma unroll
                for (int pol = 0; pol < NPOL; ++pol) {
                    complex_t sum = zero;
                    #pragma unroll
                    for (int b = 0; b < BANKS; ++b) {
                        sum += acc[b][pol][y * PADDED + x];
                        acc[b][pol][y * PADDED + x] = zero;
                    }
                    if (on_grid(gu, gv))
                        grid[((size_t)pol * GRID_SIZE + gv) * GRID_SIZE + gu] += sum;
                }
            }
        }
    }
}
