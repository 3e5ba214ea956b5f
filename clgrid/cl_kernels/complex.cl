{# Precision and complex arithmetic, for every kernel family (the FPGA kernels use
    these alone: they have no atomics).
    Template variable: double (bool). #}
{% if double %}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double real_t;
typedef double2 complex_t;
{% else %}
typedef float real_t;
typedef float2 complex_t;
{% endif %}

/* (a.x + i a.y) * (b.x + i b.y) */
inline complex_t cmul(complex_t a, complex_t b)
{
    return (complex_t)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

/* a * conj(b) */
inline complex_t cmul_conj(complex_t a, complex_t b)
{
    return (complex_t)(a.x * b.x + a.y * b.y, a.y * b.x - a.x * b.y);
}
