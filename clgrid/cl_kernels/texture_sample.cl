{# Kernel weights interpolated in (u, v, w) from the quarter cube (KernelStack.cube(),
    seed 004 §4.1); the semantics are clgrid/interpolation.py's.  KERNEL_CUBE is the
    cube's parameter type: an image sampled by the texture unit ("image"), or a buffer
    interpolated here ("software", for devices without float image filtering).
    Positions arrive as one float4 per visibility: (frac_u, frac_v, z, footprint
    support), float32 whatever the precision.
    Template variables: sampler, oversample, cube_side, cube_planes. #}
#define CUBE_SIDE {{ cube_side }}
#define CUBE_PLANES {{ cube_planes }}
{% if sampler == "image" %}
#define KERNEL_CUBE __read_only image3d_t

/* Texel centres at i + 0.5: the hardware's floor(t - 0.5) and weight is then the
   software path's floor(x) and x - floor(x); clamped like it at the edges. */
__constant sampler_t cube_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP_TO_EDGE
                                    | CLK_FILTER_LINEAR;

inline complex_t cube_sample(KERNEL_CUBE cube, real_t x, real_t y, real_t z)
{
    const float4 t = read_imagef(cube, cube_sampler,
                                 (float4)((float)x + 0.5f, (float)y + 0.5f, (float)z + 0.5f, 0.0f));
    return (complex_t)(t.x, t.y);
}
{% else %}
#define KERNEL_CUBE __global const complex_t *restrict

inline complex_t cube_texel(KERNEL_CUBE cube, int z, int y, int x)
{
    return cube[((size_t)z * CUBE_SIDE + y) * CUBE_SIDE + x];
}

/* Trilinear interpolation between texels, indices clamped to the cube (x, y, z >= 0). */
inline complex_t cube_sample(KERNEL_CUBE cube, real_t x, real_t y, real_t z)
{
    const real_t fx = floor(x), fy = floor(y), fz = floor(z);
    const real_t ax = x - fx, ay = y - fy, az = z - fz;
    const int x0 = min((int)fx, CUBE_SIDE - 1), x1 = min((int)fx + 1, CUBE_SIDE - 1);
    const int y0 = min((int)fy, CUBE_SIDE - 1), y1 = min((int)fy + 1, CUBE_SIDE - 1);
    const int z0 = min((int)fz, CUBE_PLANES - 1), z1 = min((int)fz + 1, CUBE_PLANES - 1);
    const complex_t low = mix(mix(cube_texel(cube, z0, y0, x0), cube_texel(cube, z0, y0, x1), ax),
                              mix(cube_texel(cube, z0, y1, x0), cube_texel(cube, z0, y1, x1), ax), ay);
    const complex_t high = mix(mix(cube_texel(cube, z1, y0, x0), cube_texel(cube, z1, y0, x1), ax),
                               mix(cube_texel(cube, z1, y1, x0), cube_texel(cube, z1, y1, x1), ax), ay);
    return mix(low, high, az);
}
{% endif %}

/* Half-width of the visibility's footprint. */
inline int footprint_support(float4 position)
{
    return (int)position.w;
}

/* Unconjugated weight of the cell at tap (j, k) from the visibility's nearest cell. */
inline complex_t texture_weight(KERNEL_CUBE cube, float4 position, int j, int k)
{
    return cube_sample(cube, fabs((real_t)k - position.x) * OVERSAMPLE,
                       fabs((real_t)j - position.y) * OVERSAMPLE, position.z);
}
