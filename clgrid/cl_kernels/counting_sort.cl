{# Counting sort of planned visibilities by a small integer key (clgrid/counting_sort.py):
   count per key, exclusive scan of the counts (clgrid/scan.py), place, then permute
   the plan and its sample indices into that order.  The order within a key is
   whatever the atomics give: callers use it where that cannot change a result
   (the grid's sums are order-free up to rounding, degridded values not at all).

   Template variables: key (a C expression of `p`, an int4 packed plan, Plan encoding),
   num_keys. #}
#define NUM_KEYS {{ num_keys }}

inline int key_of(const int4 p)
{
    return {{ key }};
}

__kernel void count_keys(__global const int4 *restrict packed, const int n, __global int *restrict counts)
{
    const int i = get_global_id(0);
    if (i < n)
        atomic_inc(&counts[key_of(packed[i])]);
}

/* cursor starts as the scanned counts: each visibility takes the next slot of its key. */
__kernel void place(__global const int4 *restrict packed, __global const int *restrict source, const int n,
                    __global int *restrict cursor, __global int4 *restrict sorted_packed,
                    __global int *restrict sorted_source)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    const int4 p = packed[i];
    const int slot = atomic_inc(&cursor[key_of(p)]);
    sorted_packed[slot] = p;
    sorted_source[slot] = source[i];
}
