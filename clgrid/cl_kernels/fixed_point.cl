{# Deterministic mode's last step (clgrid/deterministic.py): the 64-bit fixed-point
    grid, in units of 2^-exponent, to floating point.  Rounded once, to nearest, then
    scaled by a power of two (exact, as ldexp is, unless the result is subnormal).
    Template variable: double (bool). #}
{% include "complex.cl" %}

/* grid = fixed * 2^-exponent, or grid += that (accumulate: the chunks of a stream). */
__kernel void fixed_to_real(__global const long *restrict fixed, __global real_t *restrict grid,
                            const ulong count, const int exponent, const int accumulate)
{
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0)) {
{% if double %}
        const real_t value = ldexp(convert_double_rte(fixed[i]), -exponent);
{% else %}
        const real_t value = ldexp(convert_float_rte(fixed[i]), -exponent);
{% endif %}
        grid[i] = accumulate ? grid[i] + value : value;
    }
}

/* values *= 2^exponent (exact: a power of two), before they are added in fixed point. */
__kernel void scale_by_power_of_two(__global real_t *restrict values, const ulong count, const int exponent)
{
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0))
        values[i] = ldexp(values[i], exponent);
}
