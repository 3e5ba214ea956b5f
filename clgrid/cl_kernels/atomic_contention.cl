{# Float atomic contention micro-benchmark (clgrid/atomics.py): work-item i adds
   (i % 7 + 1) to address i % NUM_ADDRESSES, through the chosen global path, or
   with `local` first into a local-memory copy of the addresses, flushed once per
   work-group.  Template variables: double, atomic, local, num_addresses. #}
{% include "common.cl" %}
#define NUM_ADDRESSES {{ num_addresses }}

__kernel void contend(__global real_t *sums, const long num_adds)
{
{% if local %}
    __local real_t partial[NUM_ADDRESSES];
    for (int a = get_local_id(0); a < NUM_ADDRESSES; a += get_local_size(0))
        partial[a] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
{% endif %}
    for (long i = get_global_id(0); i < num_adds; i += get_global_size(0)) {
        const real_t value = (real_t)(i % 7 + 1);
{% if local %}
        local_atomic_add_real(partial + i % NUM_ADDRESSES, value);
{% else %}
        atomic_add_real(sums + i % NUM_ADDRESSES, value);
{% endif %}
    }
{% if local %}
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int a = get_local_id(0); a < NUM_ADDRESSES; a += get_local_size(0))
        if (partial[a] != 0)
            atomic_add_real(sums + a, partial[a]);
{% endif %}
}
