{# The w-stacking kernel source (clgrid.sources.analytic.StackedKernel): the
    exponential-of-semicircle kernel (es_horner.cl) evaluated at the exact offsets of a
    point's first taps along u, v and, with w, the w-planes (clgrid.planning.plan.plan_stacked:
    first cells and planes, and the first taps' offsets in a real4).  A point spreads over
    SUPPORT x SUPPORT cells of SUPPORT planes.  Shared by the imaging operator's work
    distributions (points.cl, grid_bins.cl, rows_stacked.cl).
    Template variables: double, use_w and es_horner.cl's. #}
{% include "es_horner.cl" %}
#define SUPPORT ES_WIDTH
{% if double %}
typedef double4 real4_t;
{% else %}
typedef float4 real4_t;
{% endif %}

/* The point's weight on w-plane `plane` (1 without w): tap plane - first. */
inline real_t plane_weight(const int4 first, const real4_t frac, const int plane)
{
{% if use_w %}
    return es_piece(plane - first.z, (real_t)2 * frac.z + (real_t)(SUPPORT - 1));
{% else %}
    return (real_t)1;
{% endif %}
}
