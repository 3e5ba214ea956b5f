{# Count the non-finite reals (inf, NaN) of a buffer: the operators' overflow check
    (clgrid/checks.py).  One read of the buffer, one atomic per work-item that found any.
    Template variable: double (bool). #}
{% include "complex.cl" %}

__kernel void count_nonfinite(__global const real_t *restrict values, const ulong count,
                              __global uint *restrict found)
{
    uint bad = 0;
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0))
        bad += isfinite(values[i]) ? 0 : 1;
    if (bad)
        atomic_add(found, bad);
}
