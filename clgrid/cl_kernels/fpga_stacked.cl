{# The w-stacking FPGA kernels (clgrid/strategies/fpga_stacked.py), single work-items for
    Intel's FPGA SDK for OpenCL, with the w-stacking kernel source (source_stacked.cl): the
    imaging operator's spread (spread_fpga) and interpolation (interp_fpga) of one w-plane.
    One pipeline walks runs of points: a run is the points of one first plane whose first
    cell lies in one tile of TILE x TILE cells (sorted on the host, plane-major); each run
    is accumulated in, or read from, an on-chip copy of its tile plus the W - 1 cells its
    footprints reach beyond it, which crosses the memory interface once per run (seed 000,
    memo 74: FPGA gridding is bound by global memory).  No atomics: nothing else writes the
    grid.  The grid is periodic and indexed [u][v] (nu x nv).
    As in grid_fpga.cl the accumulator is banked against the loop-carried dependency of
    adds into on-chip memory (visibility i of a run adds to copy i % BANKS, ivdep safelen),
    and as in degrid_fpga.cl a visibility's sum goes through a shift register of
    SHIFT_DEPTH partial sums.  Kernel columns go UNROLL_U per pipeline step.
    Template variables: double, use_w, plan and source (plan_stacked.cl and source_stacked.cl,
    read only through the names their headers list), the source's, tile, unroll_u, and banks
    (spread) or shift_depth (interpolation). #}
{% include "complex.cl" %}
{% include plan %}
{% include source %}
{% include "fpga_task.cl" %}
#define TILE {{ tile }}
#define UNROLL_U {{ unroll_u }}
#define PADDED (TILE + SOURCE_WIDTH - 1)       /* a run's tile and the cells its footprints reach */

inline int wrapped(const int i, const int n)
{
    return i >= n ? i - n : i;
}

{% if banks is defined %}
#define BANKS {{ banks }}

/* Spread the runs [run_lo, run_hi) onto plane `plane` of the grid (runs[r]: the tile's
   first cell (u, v), then [start, end) into the points). */
__kernel SINGLE_WORK_ITEM
void spread_fpga(__global const int4 *restrict first, SOURCE_ARGS
                 __global const complex_t *restrict vis, __global complex_t *restrict grid,
                 __global const int4 *restrict runs, const int run_lo, const int run_hi,
                 const int nu, const int nv, const int plane)
{
    __local complex_t acc[BANKS][PADDED * PADDED];
    const complex_t zero = (complex_t)(0, 0);
    POINT_SETUP
    for (int b = 0; b < BANKS; ++b) {
        #pragma unroll {{ unroll_u }}
        for (int c = 0; c < PADDED * PADDED; ++c)
            acc[b][c] = zero;
    }
    for (int r = run_lo; r < run_hi; ++r) {
        const int4 run = runs[r];
        int bank = 0;
        INTEL_PRAGMA("ivdep safelen({{ banks }}) array(acc)")
        for (int i = run.z; i < run.w; ++i) {
            const planned_vis p = decode_plan(first[i]);
            /* first cell along a row (v), its row (u), width, support */
            const int4 f = source_footprint(SOURCE_PASS p, i);
            const point_taps taps = point_taps_of(SOURCE_PASS p, f.w, i);
            const complex_t v = vis[i] * source_plane_weight(SOURCE_PASS p, i, plane);
            const int base = (f.y - run.x) * PADDED + (f.x - run.y);
            INTEL_PRAGMA("ivdep array(acc)")
            for (int a = 0; a < SOURCE_WIDTH; ++a) {
                const complex_t va = v * point_row(SOURCE_STORE, taps, a - f.w);
                INTEL_PRAGMA("ivdep array(acc)")
                for (int b0 = 0; b0 < SOURCE_WIDTH; b0 += UNROLL_U) {
                    #pragma unroll
                    for (int lane = 0; lane < UNROLL_U; ++lane) {
                        const int b = b0 + lane;
                        if (b < SOURCE_WIDTH)
                            acc[bank][base + a * PADDED + b] += va * point_column(SOURCE_STORE, taps, b - f.w);
                    }
                }
            }
            bank = bank + 1 == BANKS ? 0 : bank + 1;
        }
        /* Add the tile to the grid, wrapping round its edges, and clear it. */
        for (int y = 0; y < PADDED; ++y) {
            const size_t row = (size_t)wrapped(run.x + y, nu) * nv;
            #pragma unroll {{ unroll_u }}
            for (int x = 0; x < PADDED; ++x) {
                complex_t sum = zero;
                #pragma unroll
                for (int b = 0; b < BANKS; ++b) {
                    sum += acc[b][y * PADDED + x];
                    acc[b][y * PADDED + x] = zero;
                }
                if (sum.x != 0 || sum.y != 0)
                    grid[row + wrapped(run.y + x, nv)] += sum;
            }
        }
    }
}
{% else %}
#define SHIFT_DEPTH {{ shift_depth }}

/* Add plane `plane`'s share to the values of the points of runs [run_lo, run_hi). */
__kernel SINGLE_WORK_ITEM
void interp_fpga(__global const int4 *restrict first, SOURCE_ARGS
                 __global const complex_t *restrict grid, __global complex_t *restrict vis,
                 __global const int4 *restrict runs, const int run_lo, const int run_hi,
                 const int nu, const int nv, const int plane)
{
    __local complex_t patch[PADDED * PADDED];
    const complex_t zero = (complex_t)(0, 0);
    POINT_SETUP
    for (int r = run_lo; r < run_hi; ++r) {
        const int4 run = runs[r];
        /* Read the tile once, row by row, wrapping round the grid's edges. */
        for (int y = 0; y < PADDED; ++y) {
            const size_t row = (size_t)wrapped(run.x + y, nu) * nv;
            #pragma unroll {{ unroll_u }}
            for (int x = 0; x < PADDED; ++x)
                patch[y * PADDED + x] = grid[row + wrapped(run.y + x, nv)];
        }
        for (int i = run.z; i < run.w; ++i) {
            const planned_vis p = decode_plan(first[i]);
            /* first cell along a row (v), its row (u), width, support */
            const int4 f = source_footprint(SOURCE_PASS p, i);
            const point_taps taps = point_taps_of(SOURCE_PASS p, f.w, i);
            const int base = (f.y - run.x) * PADDED + (f.x - run.y);
            complex_t partial[SHIFT_DEPTH];
            #pragma unroll
            for (int d = 0; d < SHIFT_DEPTH; ++d)
                partial[d] = zero;
            for (int a = 0; a < SOURCE_WIDTH; ++a) {
                for (int b0 = 0; b0 < SOURCE_WIDTH; b0 += UNROLL_U) {
                    complex_t step = zero;
                    #pragma unroll
                    for (int lane = 0; lane < UNROLL_U; ++lane) {
                        const int b = b0 + lane;
                        if (b < SOURCE_WIDTH)
                            step += patch[base + a * PADDED + b] * point_weight(SOURCE_STORE, taps, a - f.w, b - f.w);
                    }
                    /* Shift register: the oldest partial sum takes this step's sum. */
                    const complex_t oldest = partial[SHIFT_DEPTH - 1];
                    #pragma unroll
                    for (int d = SHIFT_DEPTH - 1; d > 0; --d)
                        partial[d] = partial[d - 1];
                    partial[0] = oldest + step;
                }
            }
            complex_t total = zero;
            #pragma unroll
            for (int d = 0; d < SHIFT_DEPTH; ++d)
                total += partial[d];
            vis[i] += total * source_plane_weight(SOURCE_PASS p, i, plane);
        }
    }
}
{% endif %}
