{# Batched sums over the work-items of a group, in local memory (seed 001's reduction,
    paid once per batch of visibilities instead of once per visibility).
    Each of `lanes` work-items writes its partials of VALUES sums to
    partials[m * lanes + lane]; then, with a barrier before each step:
      fold_partials   every work-item folds the rows down to `split` partials per sum,
      folded_sum(m)   adds those up.
    The including template defines VALUES. #}

/* Partials per sum left by fold_partials: lanes / VALUES, so that every work-item helps. */
inline int fold_split(int lanes)
{
    return max(1, lanes / VALUES);
}

/* Row m keeps in its first `split` entries the sums of entries c, c + split, c + 2 split, ...;
   in place: each entry is read and written by one work-item only. */
inline void fold_partials(__local complex_t *partials, int lanes, int lane)
{
    const int split = fold_split(lanes);
    for (int task = lane; task < VALUES * split; task += lanes) {
        __local complex_t *row = partials + (task / split) * lanes;
        const int c = task % split;
        complex_t sum = row[c];
        for (int src = c + split; src < lanes; src += split)
            sum += row[src];
        row[c] = sum;
    }
}

inline complex_t folded_sum(__local const complex_t *partials, int lanes, int m)
{
    __local const complex_t *row = partials + m * lanes;
    complex_t sum = row[0];
    for (int c = 1; c < fold_split(lanes); ++c)
        sum += row[c];
    return sum;
}
