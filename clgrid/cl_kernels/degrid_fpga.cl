{# FPGA degridder (Intel FPGA SDK for OpenCL, single work-item), the adjoint of
    grid_fpga.cl: vis = sum over the footprint of grid * conj(c), c the gridding
    weight.  One pipeline walks the visibilities tile by tile (sorted on the host);
    each tile plus its kernel-wide halo is read from the global grid once into
    on-chip memory and every visibility of the tile is served from there.

    A visibility's sum is a floating-point reduction: summed into one register, each
    add would wait for the previous one to leave the adder.  So it goes into a shift
    register of SHIFT_DEPTH partial sums, each add updating the entry written
    SHIFT_DEPTH steps earlier, and the entries are summed at the end (Intel FPGA SDK
    for OpenCL Best Practices Guide, "Relaxing Loop-Carried Dependency by Inferring
    Shift Registers").  Kernel columns go UNROLL_U per pipeline step.
    Template variables: those of fpga.cl, and shift_depth. #}
{% include "fpga.cl" %}
{% from "fpga.cl" import tile_walk_arguments with context %}
#define SHIFT_DEPTH {{ shift_depth }}

__kernel SINGLE_WORK_ITEM
void degrid_fpga(
{{ tile_walk_arguments() }}
    __global const complex_t *restrict grid,       /* [NPOL][GRID_SIZE][GRID_SIZE] */
    __global complex_t *restrict vis,              /* [num_vis][NPOL] out */
    const int num_tiles)
{
    __local complex_t patch[NPOL][PADDED * PADDED];
    const complex_t zero = (complex_t)(0, 0);

    for (int t = 0; t < num_tiles; ++t) {
        const int2 corner = padded_corner(tile_corner, t);

        /* Read the tile and its halo once, row by row; zero beyond the grid's edge. */
        for (int y = 0; y < PADDED; ++y) {
            const int gv = corner.y + y;
            #pragma unroll {{ unroll_u }}
            for (int x = 0; x < PADDED; ++x) {
                const int gu = corner.x + x;
                #pragma unroll
                for (int pol = 0; pol < NPOL; ++pol)
                    patch[pol][y * PADDED + x] = on_grid(gu, gv)
                        ? grid[((size_t)pol * GRID_SIZE + gv) * GRID_SIZE + gu] : zero;
            }
        }

        for (int i = tile_first[t]; i < tile_first[t + 1]; ++i) {
            const planned_vis p = decode_plan(plan[i]);
            const int s = support[p.plane];
            const int start = kernel_start[p.plane];
            const int side = kernel_side[p.plane];
            complex_t partial[NPOL][SHIFT_DEPTH];
            #pragma unroll
            for (int pol = 0; pol < NPOL; ++pol) {
                #pragma unroll
                for (int d = 0; d < SHIFT_DEPTH; ++d)
                    partial[pol][d] = zero;
            }

            for (int j = -s; j <= s; ++j) {
                const int row = (p.grid_v + j - corner.y) * PADDED + p.grid_u - corner.x;
                for (int k0 = -s; k0 <= s; k0 += UNROLL_U) {
                    complex_t step[NPOL];
                    #pragma unroll
                    for (int pol = 0; pol < NPOL; ++pol)
                        step[pol] = zero;
                    #pragma unroll
                    for (int lane = 0; lane < UNROLL_U; ++lane) {
                        const int k = k0 + lane;
                        if (k <= s) {
                            const complex_t c = kernel_sample(kernels, start, side, p, j, k);
                            #pragma unroll
                            for (int pol = 0; pol < NPOL; ++pol)
                                step[pol] += cmul_conj(patch[pol][row + k], c);
                        }
                    }
                    /* Shift register: the oldest partial sum takes this step's sum. */
                    #pragma unroll
                    for (int pol = 0; pol < NPOL; ++pol) {
                        const complex_t oldest = partial[pol][SHIFT_DEPTH - 1];
                        #pragma unroll
                        for (int d = SHIFT_DEPTH - 1; d > 0; --d)
                            partial[pol][d] = partial[pol][d - 1];
                        partial[pol][0] = oldest + step[pol];
                    }
                }
            }

            #pragma unroll
            for (int pol = 0; pol < NPOL; ++pol) {
                complex_t total = zero;
                #pragma unroll
                for (int d = 0; d < SHIFT_DEPTH; ++d)
                    total += partial[pol][d];
                vis[(size_t)i * NPOL + pol] = total;
            }
        }
    }
}
