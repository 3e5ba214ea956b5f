{# The exponential-of-semicircle kernel psi(x) = exp(beta (sqrt(1 - x^2) - 1)) over
    ES_WIDTH cells, as one polynomial per tap, highest power first
    (clgrid.sources.accuracy.horner_coefficients): Horner's rule instead of exp and sqrt, the same
    few multiply-adds for every tap, which vectorise.  Shared by the w-gridding operator
    (wgrid_analytic.cl) and the seeds' work distributions with an analytic kernel source
    (source_analytic.cl), so both evaluate the very same kernel.
    Needs complex.cl's real_t.  Template variables: es_width (W), es_degree, es_coef
    ((es_degree + 1) x W), double. #}
#define ES_WIDTH {{ es_width }}
#define ES_DEGREE {{ es_degree }}
__constant real_t ES_COEF[ES_DEGREE + 1][ES_WIDTH] = {
{% for row in es_coef %}    { {% for c in row %}{{ "%.17g" % c }}{{ "" if double else "f" }}, {% endfor %}},
{% endfor %}};

/* Tap j's polynomial at z in [-1, 1]: the weight of a cell (z + 1) / 2 + j - W / 2 cells
   from the point. */
inline real_t es_piece(const int j, const real_t z)
{
    real_t k = ES_COEF[0][j];
    for (int d = 1; d <= ES_DEGREE; ++d)
        k = k * z + ES_COEF[d][j];
    return k;
}

/* All W kernel values of a point along one axis: tap j sits (frac + j) cells from it,
   frac in [-W/2, -W/2 + 1). */
inline void es_taps(real_t *k, const real_t frac)
{
    const real_t z = (real_t)2 * frac + (real_t)(ES_WIDTH - 1);
    for (int j = 0; j < ES_WIDTH; ++j)
        k[j] = ES_COEF[0][j];
    for (int d = 1; d <= ES_DEGREE; ++d)
        for (int j = 0; j < ES_WIDTH; ++j)
            k[j] = k[j] * z + ES_COEF[d][j];
}

/* The tap whose polynomial holds a cell `distance` cells from the point, -1 outside the
   kernel, and in *z where in it (es_piece's argument). */
inline int es_tap(const real_t distance, real_t *z)
{
    const real_t t = distance + (real_t)ES_WIDTH / 2;
    const int j = (int)floor(t);
    *z = (real_t)2 * (t - j) - 1;
    return j >= 0 && j < ES_WIDTH ? j : -1;
}

/* The weight of a cell `distance` cells from the point, any distance (0 outside the
   kernel): for work distributions that visit a footprint's cells one by one. */
inline real_t es_weight(const real_t distance)
{
    real_t z;
    const int j = es_tap(distance, &z);
    return j < 0 ? 0 : es_piece(j, z);
}

/* The polynomials copied to local memory by the whole work-group (every work-item calls
   it, before any es_weight_in): work-items that evaluate different taps read local memory
   side by side, where their reads of constant memory (ES_COEF) would be serialised. */
#define ES_COEFS ((ES_DEGREE + 1) * ES_WIDTH)
inline void es_coef_to_local(__local real_t *coef)
{
    const int lid = (get_local_id(2) * get_local_size(1) + get_local_id(1)) * get_local_size(0) + get_local_id(0);
    const int size = get_local_size(0) * get_local_size(1) * get_local_size(2);
    for (int i = lid; i < ES_COEFS; i += size)
        coef[i] = ES_COEF[i / ES_WIDTH][i % ES_WIDTH];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* es_weight with the polynomials in local memory (es_coef_to_local). */
inline real_t es_weight_in(__local const real_t *coef, const real_t distance)
{
    real_t z;
    const int j = es_tap(distance, &z);
    if (j < 0)
        return 0;
    real_t k = coef[j];
    for (int d = 1; d <= ES_DEGREE; ++d)
        k = k * z + coef[d * ES_WIDTH + j];
    return k;
}
