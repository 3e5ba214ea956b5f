{# Sum of a map over i in [0, n) (clgrid/device_sum.py): each work-group sums a strided
   share in registers, then in local memory; the host adds the groups' partial sums.
   Template variables: wg, sum_t (the C type summed), map (a C expression of i and the
   arguments), arguments (the kernel's own parameters), preamble (helpers). #}
{{ preamble }}
#define WG {{ wg }}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void partial_sums({{ arguments }}, const int n, __global {{ sum_t }} *restrict partials)
{
    __local {{ sum_t }} acc[WG];
    const int lid = get_local_id(0);
    {{ sum_t }} total = 0;
    for (int i = get_global_id(0); i < n; i += get_global_size(0))
        total += {{ map }};
    acc[lid] = total;
    for (int stride = WG / 2; stride > 0; stride /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < stride)
            acc[lid] += acc[lid + stride];
    }
    if (lid == 0)
        partials[get_group_id(0)] = acc[0];
}
