{# Tile geometry shared by the bucket sort and the tile kernel (clgrid/strategies/tiled.py).
   Tiles are TILE_U x TILE_V cells and tile (0, 0) has the grid centre in its middle
   (seed 003 §3.3), so tile (tu, tv) starts at cell (TILE0_U + tu * TILE_U, TILE0_V +
   tv * TILE_V); tu and tv are negative left of and below the centre.
   Buckets: the tiles of the active grid row by row, then the tiles of the central box,
   then the windows: TILE_U x TILE_V regions like tiles but overlapping, one every
   WINDOW_STEP cells, so that a footprint of support up to WINDOW_SUPPORT fits wholly in
   one of them (the one starting at or just before its first cell) and is one entry
   instead of one per tile it touches.
   Template variables: grid_size, tile_u, tile_v, max_tiles, central_radius, tile_factor_4096,
   window_support, windows_base. #}
#define TILE_U {{ tile_u }}
#define TILE_V {{ tile_v }}
#define TILE0_U (GRID_SIZE / 2 - TILE_U / 2)
#define TILE0_V (GRID_SIZE / 2 - TILE_V / 2)
#define MAX_TILES {{ max_tiles }}              /* tiles covering the whole grid */
#define CENTRAL_RADIUS {{ central_radius }}    /* central box: |tu|, |tv| <= radius; none if < 0 */
#define BOX_SIDE (2 * CENTRAL_RADIUS + 1)
#define TILE_FACTOR_4096 {{ tile_factor_4096 }}  /* tile_factor in units of 1/4096 */
#define WINDOW_SUPPORT {{ window_support }}    /* supports up to this go to one window; none if < 0 */
#define WINDOW_STEP_U (TILE_U - 2 * WINDOW_SUPPORT)
#define WINDOW_STEP_V (TILE_V - 2 * WINDOW_SUPPORT)
#define WINDOWS_BASE {{ windows_base }}        /* bucket of the first window */

/* floor(a / b) for b > 0 */
inline int floor_div(int a, int b)
{
    return (a >= 0 ? a : a - b + 1) / b;
}

typedef struct {
    int tu0, tv0;                  /* first tile of the active grid */
    int nu;                        /* tiles across it */
    int wu0, wv0, nwu;             /* first window of the active grid, windows across it */
    int u_lo, u_hi, v_lo, v_hi;    /* visibilities centred in here are tiled, the others are not */
} tile_grid;

/* How far from the centre tiling reaches on a side where the active grid reaches `extent`. */
inline int tiled_reach(int extent)
{
    return (int)(((long)max(extent, 0) * TILE_FACTOR_4096 + 4095) / 4096);
}

/* The tiling of the active grid `box` = {u_min, u_max, v_min, v_max} (tile_bounding_box). */
inline tile_grid make_tile_grid(__global const int *box)
{
    const int centre = GRID_SIZE / 2;
    tile_grid g;
    g.tu0 = floor_div(box[0] - TILE0_U, TILE_U);
    g.nu = floor_div(box[1] - TILE0_U, TILE_U) - g.tu0 + 1;
    g.tv0 = floor_div(box[2] - TILE0_V, TILE_V);
    if (WINDOW_SUPPORT >= 0) {
        g.wu0 = floor_div(box[0] - TILE0_U, WINDOW_STEP_U);
        g.nwu = floor_div(box[1] - TILE0_U, WINDOW_STEP_U) - g.wu0 + 1;
        g.wv0 = floor_div(box[2] - TILE0_V, WINDOW_STEP_V);
    }
    /* tile_factor (seed 003 §3.6): that fraction of the active grid on each side of the centre */
    g.u_lo = centre - tiled_reach(centre - box[0]);
    g.u_hi = centre + tiled_reach(box[1] - centre);
    g.v_lo = centre - tiled_reach(centre - box[2]);
    g.v_hi = centre + tiled_reach(box[3] - centre);
    if (TILE_FACTOR_4096 == 0)   /* nothing tiled, not even the centre cell */
        g.u_hi = g.u_lo - 1;
    return g;
}

inline bool is_tiled(tile_grid g, planned_vis p)
{
    return g.u_lo <= p.grid_u && p.grid_u <= g.u_hi && g.v_lo <= p.grid_v && p.grid_v <= g.v_hi;
}

/* The tiles a footprint of support s touches: (tu_first, tu_last, tv_first, tv_last). */
inline int4 footprint_tiles(planned_vis p, int s)
{
    return (int4)(floor_div(p.grid_u - s - TILE0_U, TILE_U), floor_div(p.grid_u + s - TILE0_U, TILE_U),
                  floor_div(p.grid_v - s - TILE0_V, TILE_V), floor_div(p.grid_v + s - TILE0_V, TILE_V));
}

/* The window that holds a footprint of support s <= WINDOW_SUPPORT: (wu, -, wv, -). */
inline int4 footprint_window(planned_vis p, int s)
{
    const int wu = floor_div(p.grid_u - s - TILE0_U, WINDOW_STEP_U);
    const int wv = floor_div(p.grid_v - s - TILE0_V, WINDOW_STEP_V);
    return (int4)(wu, wu, wv, wv);
}

inline int window_bucket(tile_grid g, int wu, int wv)
{
    return WINDOWS_BASE + (wv - g.wv0) * g.nwu + wu - g.wu0;
}

inline bool in_central_box(int tu, int tv)
{
    return -CENTRAL_RADIUS <= tu && tu <= CENTRAL_RADIUS && -CENTRAL_RADIUS <= tv && tv <= CENTRAL_RADIUS;
}

inline int bucket_of(tile_grid g, int tu, int tv)
{
    if (in_central_box(tu, tv))
        return MAX_TILES + (tv + CENTRAL_RADIUS) * BOX_SIDE + tu + CENTRAL_RADIUS;
    return (tv - g.tv0) * g.nu + tu - g.tu0;
}

/* First cell (u, v) of the tile of a bucket. */
inline int2 tile_origin(tile_grid g, int bucket)
{
    int tu, tv;
    if (WINDOW_SUPPORT >= 0 && bucket >= WINDOWS_BASE) {
        const int wu = g.wu0 + (bucket - WINDOWS_BASE) % g.nwu, wv = g.wv0 + (bucket - WINDOWS_BASE) / g.nwu;
        return (int2)(TILE0_U + wu * WINDOW_STEP_U, TILE0_V + wv * WINDOW_STEP_V);
    }
    if (bucket >= MAX_TILES) {
        tu = (bucket - MAX_TILES) % BOX_SIDE - CENTRAL_RADIUS;
        tv = (bucket - MAX_TILES) / BOX_SIDE - CENTRAL_RADIUS;
    } else {
        tu = g.tu0 + bucket % g.nu;
        tv = g.tv0 + bucket / g.nu;
    }
    return (int2)(TILE0_U + tu * TILE_U, TILE0_V + tv * TILE_V);
}
