{# Shared helpers: precision and complex arithmetic (complex.cl), float atomic add.
    Template variables: double (bool), atomic ("cas", "xchg", "ext", "ptx"),
    deterministic (bool: the grid is 64-bit fixed point, clgrid/deterministic.py). #}
{% include "complex.cl" %}
{% if double or deterministic %}
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
{% endif %}
{% if double %}
{% if atomic == "ext" %}
#pragma OPENCL EXTENSION cl_ext_float_atomics : enable
{% endif %}
{% endif %}

{% macro cas_add(name, space) %}
/* Add by compare-and-swap on the bit pattern, in {{ space }} memory. */
inline void {{ name }}(volatile {{ space }} real_t *address, real_t value)
{
{% if double %}
    volatile {{ space }} ulong *bits = (volatile {{ space }} ulong *)address;
    ulong expected = as_ulong(*address);
    for (;;) {
        const ulong seen = atom_cmpxchg(bits, expected, as_ulong(as_double(expected) + value));
{% else %}
    volatile {{ space }} uint *bits = (volatile {{ space }} uint *)address;
    uint expected = as_uint(*address);
    for (;;) {
        const uint seen = atomic_cmpxchg(bits, expected, as_uint(as_float(expected) + value));
{% endif %}
        if (seen == expected)
            break;
        expected = seen;
    }
}
{% endmacro %}

/* Float atomic add to global memory. The path is a tuning choice (clgrid/atomics.py):
   OpenCL 1.2 has no float atomics, so "cas" (compare-and-swap on the bit pattern) is
   the portable path; the others are faster where the device has them.
   grid_real_t is what the grid holds: real_t, or in deterministic mode a 64-bit
   fixed-point integer, so that the sum does not depend on the order of the adds. */
{% if deterministic %}
typedef long grid_real_t;
/* Deterministic mode: values arrive pre-scaled by 2^k (clgrid/deterministic.py) so that
   no sum can leave 63 bits; each is rounded to an integer and added as one. Integer
   addition is associative: any order of the atomics gives the same bits. */
inline void atomic_add_real(volatile __global grid_real_t *address, real_t value)
{
    atom_add(address, convert_long_sat_rte(value));
}
{% else %}
typedef real_t grid_real_t;
{% endif %}
{% if deterministic %}
{% elif atomic == "ptx" %}
/* NVIDIA: the hardware reduction instruction, through inline PTX. */
inline void atomic_add_real(volatile __global real_t *address, real_t value)
{
{% if double %}
    asm volatile("red.global.add.f64 [%0], %1;" :: "l"(address), "d"(value) : "memory");
{% else %}
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(address), "f"(value) : "memory");
{% endif %}
}
{% elif atomic == "ext" %}
/* OpenCL 3.0 cl_ext_float_atomics. */
inline void atomic_add_real(volatile __global real_t *address, real_t value)
{
{% if double %}
    atomic_fetch_add_explicit((volatile __global atomic_double *)address, value,
                              memory_order_relaxed, memory_scope_device);
{% else %}
    atomic_fetch_add_explicit((volatile __global atomic_float *)address, value,
                              memory_order_relaxed, memory_scope_device);
{% endif %}
}
{% elif atomic == "xchg" %}
/* Take the cell's value (leaving 0), add ours, put the sum back; whatever another
   work-item deposited in between comes back and goes round again. */
inline void atomic_add_real(volatile __global real_t *address, real_t value)
{
{% if double %}
    volatile __global ulong *bits = (volatile __global ulong *)address;
    while (value != 0.0) {
        const double taken = as_double(atom_xchg(bits, as_ulong(0.0)));
        value = as_double(atom_xchg(bits, as_ulong(taken + value)));
    }
{% else %}
    while (value != 0.0f) {
        const float taken = atomic_xchg(address, 0.0f);
        value = atomic_xchg(address, taken + value);
    }
{% endif %}
}
{% else %}
{{ cas_add("atomic_add_real", "__global") }}
{% endif %}

/* For strategies that accumulate in local memory and flush once (seed 003
   Listing 6's SHMSZ part). */
{{ cas_add("local_atomic_add_real", "__local") }}

inline void atomic_add_complex(__global grid_real_t *grid, size_t cell, complex_t value)
{
    atomic_add_real(grid + 2 * cell, value.x);
    atomic_add_real(grid + 2 * cell + 1, value.y);
}
