{# Count the non-finite reals (inf, NaN) of a buffer: the operators' overflow check
    (clgrid/checks.py).  Each work-group reads one contiguous block, its work-items side
    by side (coalesced on a GPU, vectorised across work-items by CPU runtimes such as
    PoCL); one atomic per work-item that found any.
    Template variable: double (bool). #}
{% include "complex.cl" %}
/* inf and NaN are the values with every exponent bit set: an integer test, cheaper than isfinite on CPUs. */
{% if double %}
#define NON_FINITE(x) ((as_ulong(x) & 0x7ff0000000000000UL) == 0x7ff0000000000000UL)
{% else %}
#define NON_FINITE(x) ((as_uint(x) & 0x7f800000u) == 0x7f800000u)
{% endif %}

__kernel void count_nonfinite(__global const real_t *restrict values, const ulong count, const ulong block,
                              __global uint *restrict found)
{
    const ulong first = get_group_id(0) * block;
    const ulong end = min(first + block, count);
    uint bad = 0;
    for (ulong i = first + get_local_id(0); i < end; i += get_local_size(0))
        bad += NON_FINITE(values[i]) ? 1 : 0;
    if (bad)
        atomic_add(found, bad);
}
