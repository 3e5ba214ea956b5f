{# Exclusive prefix sum of int (clgrid/scan.py): each work-group scans one block of
   WG * ITEMS values (ITEMS in a row per work-item, then a scan of the work-items'
   totals in local memory) and writes the block's total; the totals are scanned the
   same way and added back.  Template variables: wg, items. #}
#define WG {{ wg }}
#define ITEMS {{ items }}
#define BLOCK (WG * ITEMS)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void scan_blocks(__global const int *restrict values, __global int *restrict prefix,
                 __global int *restrict block_totals, const int n)
{
    __local int totals[WG];
    const int lid = get_local_id(0);
    const int first = get_group_id(0) * BLOCK + lid * ITEMS;
    int before_in_row[ITEMS];
    int row_total = 0;
    for (int i = 0; i < ITEMS; ++i) {
        before_in_row[i] = row_total;
        if (first + i < n)
            row_total += values[first + i];
    }
    /* Hillis-Steele inclusive scan of the row totals */
    totals[lid] = row_total;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int d = 1; d < WG; d <<= 1) {
        const int add = lid >= d ? totals[lid - d] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        totals[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int before_row = totals[lid] - row_total;
    for (int i = 0; i < ITEMS; ++i)
        if (first + i < n)
            prefix[first + i] = before_row + before_in_row[i];
    if (lid == WG - 1)
        block_totals[get_group_id(0)] = totals[WG - 1];
}

__kernel void add_block_offsets(__global int *restrict prefix, __global const int *restrict block_offsets,
                                const int n)
{
    const int i = get_global_id(0);
    if (i < n)
        prefix[i] += block_offsets[i / BLOCK];
}

/* out[k] = values[k * step] for k in [0, count): where each step-th run begins (a plane's
   first key, in a table of key starts), a small copy back instead of the whole table. */
__kernel void every_nth(__global const int *restrict values, const int step, const int count,
                        __global int *restrict out)
{
    const int k = get_global_id(0);
    if (k < count)
        out[k] = values[(size_t)k * step];
}
