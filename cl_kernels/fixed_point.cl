{# Deterministic mode's last step (clgrid/deterministic.py): the 64-bit fixed-point
    grid, in units of 2^-exponent, to floating point.  Rounded once, to nearest, then
    scaled by a power of two (exact, as ldexp is, unless the result is subnormal).
    Template variable: double (bool). #}
{% include "complex.cl" %}

__kernel void fixed_to_real(__global const long *restrict fixed, __global real_t *restrict grid,
                            const ulong count, const int exponent)
{
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0))
{% if double %}
        grid[i] = ldexp(convert_double_rte(fixed[i]), -exponent);
{% else %}
        grid[i] = ldexp(convert_float_rte(fixed[i]), -exponent);
{% endif %}
}
