{# Shared helpers: precision, complex arithmetic, float atomic add.
    Template variables: double (bool), atomic ("cas"). #}
{% if double %}
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
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

/* Float atomic add by compare-and-swap on the bit pattern: OpenCL 1.2 has no
   float atomics, so this is the portable path (DESIGN.md, "Float atomics"). */
{% if double %}
inline void atomic_add_real(volatile __global real_t *address, real_t value)
{
    volatile __global ulong *bits = (volatile __global ulong *)address;
    ulong expected = as_ulong(*address);
    for (;;) {
        ulong desired = as_ulong(as_double(expected) + value);
        ulong seen = atom_cmpxchg(bits, expected, desired);
        if (seen == expected)
            break;
        expected = seen;
    }
}
{% else %}
inline void atomic_add_real(volatile __global real_t *address, real_t value)
{
    volatile __global uint *bits = (volatile __global uint *)address;
    uint expected = as_uint(*address);
    for (;;) {
        uint desired = as_uint(as_float(expected) + value);
        uint seen = atomic_cmpxchg(bits, expected, desired);
        if (seen == expected)
            break;
        expected = seen;
    }
}
{% endif %}

inline void atomic_add_complex(__global real_t *grid, size_t cell, complex_t value)
{
    atomic_add_real(grid + 2 * cell, value.x);
    atomic_add_real(grid + 2 * cell + 1, value.y);
}
