{# The moving window's order of a plan, on the device (clgrid/strategies/track_chunks.py).

   A baseline's kept samples lie consecutively in the plan, in the caller's order
   (sample s belongs to baseline s / baseline_length).  A small key, `minor`, splits
   them into runs (the support and sign of w when gridding, the channel when
   degridding); each run keeps the samples' own order and is cut into chunks of at
   most max_length:

   1. count_keys: samples per key = baseline * num_minor + minor;
   2. the caller scans the counts (clgrid/scan.py): where each key's run starts;
   3. place: a work-group per baseline walks its samples in order, WG at a time; a
      sample takes its key's cursor plus the samples of that key before it in the
      tile, so a run keeps the plan's order (the counting sort of counting_sort.cl
      takes slots by atomics, which would shuffle it).  WG = 1 on CPUs: a core walks
      a baseline with no comparisons;
   4. count_chunks, the caller's scan, write_chunks: each run cut into chunks (first,
      count, widest support, whether the first sample's kernel is conjugated);
   5. count_classes, the caller's scan, place_by_class: the chunks ordered by the
      order's class (the gridder's: longest first; the degridder's: widest support
      first), stably, in blocks of BLOCK (a radix sort's pass: counts per (class,
      block), class first, scanned; a chunk goes to its (class, block)'s start plus
      the chunks of its class before it in the block);
   6. for the gridder, count_tiles, the caller's scan, expand_work: a row (chunk, tile)
      per work-group, a chunk's rows after the tiles of the chunks before it.

   Tables are written an int at a time: Oclgrind 21.10 takes a vector built from
   scalars for unset (its uninitialised-value check runs on these kernels).

   Template variables: minor (a C expression of the int4 packed plan `p`, the sample
   index `s` and the int `nchan`), preamble (C declarations it reads), order_class (a C
   expression of the int4 chunk `c`: its class, 0 first), order_preamble (what that
   reads), rank_of_support (rank of each support, widest 0), wg (work-items of place),
   block (chunks per work-group of count_classes and place_by_class). #}
#define WG {{ wg }}
#define BLOCK {{ block }}

{{ preamble }}
{{ order_preamble }}
__constant int RANK_OF_SUPPORT[{{ rank_of_support | length }}] = { {{- rank_of_support | join(", ") -}} };

inline int minor_of(const int4 p, const int s, const int nchan)
{
    return {{ minor }};
}

inline int class_of(const int4 c)
{
    return {{ order_class }};
}

__kernel void count_keys(__global const int4 *restrict packed, __global const int *restrict source, const int n,
                         const int baseline_length, const int nchan, const int num_minor,
                         __global int *restrict counts)
{
    const int i = get_global_id(0);
    if (i < n)
        atomic_inc(&counts[source[i] / baseline_length * num_minor + minor_of(packed[i], source[i], nchan)]);
}

/* starts: the scanned counts; cursor: a copy of them, each key's next free slot. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void place(__global const int4 *restrict packed, __global const int *restrict source, const int nchan,
           const int num_minor, __global const int *restrict starts, __global int *restrict cursor,
           __global int4 *restrict sorted_packed, __global int *restrict sorted_source)
{
    __local int tile_keys[WG];
    const int lid = get_local_id(0);
    const int first_key = get_group_id(0) * num_minor;
    const int end = starts[first_key + num_minor];      /* the baseline's samples: in the plan and sorted alike */
    for (int base = starts[first_key]; base < end; base += WG) {
        const int i = base + lid;
        int4 p = (int4)(0);
        int s = 0, m = -1;
        if (i < end) {
            p = packed[i];
            s = source[i];
            m = minor_of(p, s, nchan);
        }
        tile_keys[lid] = m;
        barrier(CLK_LOCAL_MEM_FENCE);
        int before = 0, last = 1;
        for (int j = 0; j < lid; ++j)
            before += tile_keys[j] == m;
        for (int j = lid + 1; j < WG && last; ++j)
            last = tile_keys[j] != m;
        const int key = first_key + m;
        if (i < end) {
            const int slot = cursor[key] + before;
            sorted_packed[slot] = p;
            sorted_source[slot] = s;
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);   /* every cursor read before it moves */
        if (i < end && last)
            cursor[key] += before + 1;
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}

/* Chunks of each key's run (num_keys + 1 entries, the last 0, for the scan). */
__kernel void count_chunks(__global const int *restrict starts, const int num_keys, const int max_length,
                           __global int *restrict chunks_of_key)
{
    const int k = get_global_id(0);
    if (k <= num_keys)
        chunks_of_key[k] = k < num_keys ? (starts[k + 1] - starts[k] + max_length - 1) / max_length : 0;
}

/* Chunk c: the key whose chunks it is among (the last with chunk_starts[key] <= c),
   its samples, the widest support among them and the sign of the first. */
__kernel void write_chunks(__global const int *restrict starts, __global const int *restrict chunk_starts,
                           const int num_keys, const int num_chunks, const int max_length,
                           __global const int4 *restrict sorted_packed, __global const int *restrict supports,
                           __global int *restrict chunks)
{
    const int c = get_global_id(0);
    if (c >= num_chunks)
        return;
    int lo = 0, hi = num_keys - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (chunk_starts[mid] <= c)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int first = starts[lo] + (c - chunk_starts[lo]) * max_length;
    const int count = min(max_length, starts[lo + 1] - first);
    int widest = 0;
    for (int i = first; i < first + count; ++i)
        widest = max(widest, supports[sorted_packed[i].w & 0x7fffffff]);
    chunks[4 * c] = first;
    chunks[4 * c + 1] = count;
    chunks[4 * c + 2] = widest;
    chunks[4 * c + 3] = sorted_packed[first].w < 0;
}

/* Chunks per (class, block of BLOCK chunks), class first, and per support's rank. */
__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void count_classes(__global const int4 *restrict chunks, const int num_chunks, __global int *restrict counts,
                   __global int *restrict per_rank)
{
    const int c = get_global_id(0);
    if (c < num_chunks) {
        const int4 chunk = chunks[c];
        atomic_inc(&counts[class_of(chunk) * get_num_groups(0) + get_group_id(0)]);
        atomic_inc(&per_rank[RANK_OF_SUPPORT[chunk.z]]);
    }
}

/* starts: the scanned counts of count_classes. */
__kernel __attribute__((reqd_work_group_size(BLOCK, 1, 1)))
void place_by_class(__global const int4 *restrict chunks, const int num_chunks, __global const int *restrict starts,
                    __global int4 *restrict sorted_chunks)
{
    __local int tile_classes[BLOCK];
    const int c = get_global_id(0), lid = get_local_id(0);
    int4 chunk = (int4)(0);
    int order = -1;
    if (c < num_chunks) {
        chunk = chunks[c];
        order = class_of(chunk);
    }
    tile_classes[lid] = order;
    barrier(CLK_LOCAL_MEM_FENCE);
    int before = 0;
    for (int j = 0; j < lid; ++j)
        before += tile_classes[j] == order;
    if (c < num_chunks)
        sorted_chunks[starts[order * get_num_groups(0) + get_group_id(0)] + before] = chunk;
}

/* The gridder's work-groups per chunk (num_chunks + 1 entries, the last 0, for the scan):
   tiles_of_support[s] for a chunk of support s. */
__kernel void count_tiles(__global const int4 *restrict chunks, const int num_chunks,
                          __global const int *restrict tiles_of_support, __global int *restrict tiles)
{
    const int c = get_global_id(0);
    if (c <= num_chunks)
        tiles[c] = c < num_chunks ? tiles_of_support[chunks[c].z] : 0;
}

/* One row (chunk, tile) per work-group of the gridder, from first_row[c]: the scanned tiles. */
__kernel void expand_work(__global const int4 *restrict chunks, const int num_chunks,
                          __global const int *restrict tiles_of_support, __global const int *restrict first_row,
                          __global int *restrict work)
{
    const int c = get_global_id(0);
    if (c >= num_chunks)
        return;
    const int tiles = tiles_of_support[chunks[c].z], first = first_row[c];
    for (int tile = 0; tile < tiles; ++tile) {
        work[2 * (first + tile)] = c;
        work[2 * (first + tile) + 1] = tile;
    }
}
