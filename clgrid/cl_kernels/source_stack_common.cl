{# What the two sources of the W-projection tables (source_table.cl, source_texture.cl)
    define alike: a visibility's weight on the one stacking plane, and its taps conjugated
    for w < 0 (the tables hold |w|).  Needs SOURCE_PARAMS (the including source's). #}
inline real_t source_plane_weight(SOURCE_PARAMS planned_vis p, int i, int plane)
{
    return 1;
}

inline complex_t source_conj(complex_t c, int conjugate)
{
    if (conjugate)
        c.y = -c.y;
    return c;
}
