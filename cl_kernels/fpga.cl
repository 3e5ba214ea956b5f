{# What the FPGA kernels share: the single work-item attribute, the Intel-only
    pragmas and the geometry of the on-chip tile.  Intel's offline compiler (aoc)
    defines INTELFPGA_CL; every other compiler gets the same source without the
    Intel extensions, so PoCL and Oclgrind run it as a functional emulation.
    Template variables: tile, max_support. #}
#define TILE {{ tile }}                  /* grid cells per side of a tile */
#define HALO {{ max_support }}           /* the widest kernel's reach beyond a tile, in cells */
#define PADDED (TILE + 2 * HALO)         /* side of the on-chip copy: tile plus halo */

#ifdef INTELFPGA_CL
/* A single work-item kernel: no hardware for work-item IDs (Intel FPGA SDK for
   OpenCL Programming Guide, "Omit Hardware that Generates and Dispatches Kernel IDs"). */
#define SINGLE_WORK_ITEM __attribute__((max_global_work_dim(0)))
#define INTEL_PRAGMA(text) _Pragma(text)
#else
#define SINGLE_WORK_ITEM
#define INTEL_PRAGMA(text)
#endif

/* Grid cell (u, v) of the first on-chip cell of tile t: the tile's corner minus the halo. */
inline int2 padded_corner(__global const int2 *restrict tile_corner, int t)
{
    return tile_corner[t] - (int2)(HALO, HALO);
}

inline bool on_grid(int u, int v)
{
    return u >= 0 && u < GRID_SIZE && v >= 0 && v < GRID_SIZE;
}
