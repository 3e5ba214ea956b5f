{# Row-band gridder for CPUs (clgrid/strategies/rows.py): owner computes, no atomics.
    Work-item b owns the grid rows [b * BAND, (b + 1) * BAND) of every polarisation and
    alone writes them, so it adds with plain loads and stores; on a CPU, where float
    atomics are compare-and-swap loops, that is most of the gain.  Visibilities arrive
    sorted by grid row, then column: band_range[b] is the run of those whose footprint
    may reach band b (grid row within the widest support of it), and each adds the rows
    of its footprint that fall in the band.  A footprint row is one contiguous table row
    of the kernels by offset (kernel_taps.cl), read forwards or backwards, so the
    innermost loop is a row of complex multiply-adds with unit stride on both sides, done
    in vectors.  Template variables: double, npol, oversample, grid_size, band,
    vector_access. #}
{% include "complex.cl" %}
#define NPOL {{ npol }}
#define OVERSAMPLE {{ oversample }}
#define GRID_SIZE {{ grid_size }}
#define BAND {{ band }}
{% include "plan.cl" %}
{% include "kernel_taps.cl" %}

{# The row is added in vectors of 256 bits (AVX): 4 complex floats or 2 complex doubles a
   step, then the rest of the taps in halves of that, the last tap alone.  A vector of n
   complex numbers holds 2n reals, re/im interleaved; the swizzles `even`/`odd` repeat each
   number's real/imaginary part in both its lanes, `reverse` reverses the numbers' order.
   vector_access "vload" moves vectors with vloadN/vstoreN (portable); "cast" through
   pointers to vector types of scalar alignment, for compilers that call vloadN out of
   line (PoCL 3.0: slower than scalar code with vloadN, faster with casts). #}
{% set real = "double" if double else "float" %}
{% set chunks = [2] if double else [4, 2] %}
{% set even = {4: "s00224466", 2: "s0022"} %}
{% set odd = {4: "s11335577", 2: "s1133"} %}
{% set reverse = {4: "s67452301", 2: "s2301"} %}
{% if vector_access == "cast" %}
{% for n in chunks %}
typedef {{ real }}{{ 2 * n }} __attribute__((aligned(sizeof({{ real }})))) unaligned_{{ real }}{{ 2 * n }};
{% endfor %}
{% endif %}
{# The n complex numbers at `address` (a real_t pointer), as a vector: on one line, as the
   template loader marks lines after every statement (clgrid/codegen.py). #}
{% macro load(n, address) %}{% if vector_access == "cast" %}*(__global const unaligned_{{ real }}{{ 2 * n }} *)({{ address }}){% else %}vload{{ 2 * n }}(0, {{ address }}){% endif %}{% endmacro %}
{% macro add_chunk(n, reversed) %}
{% set vec = real ~ (2 * n) %}
{% if reversed %}
            const {{ vec }} k = ({{ load(n, "kr - 2 * (x + %d)" % (n - 1)) }}).{{ reverse[n] }};
{% else %}
            const {{ vec }} k = {{ load(n, "kr + 2 * x") }};
{% endif %}
            const {{ vec }} sum = {{ load(n, "r + 2 * x") }}
                + ({{ vec }})({{ (["a, b"] * n) | join(", ") }}) * k.{{ even[n] }}
                + ({{ vec }})({{ (["-bs, as"] * n) | join(", ") }}) * k.{{ odd[n] }};
{% if vector_access == "cast" %}
            *(__global unaligned_{{ vec }} *)(r + 2 * x) = sum;
{% else %}
            vstore{{ 2 * n }}(sum, 0, r + 2 * x);
{% endif %}
{% endmacro %}
{% macro row_loop(reversed) %}
        int x = -s;
        for (; x + {{ chunks[0] - 1 }} <= s; x += {{ chunks[0] }}) {
{{ add_chunk(chunks[0], reversed) }}
        }
{% for n in chunks[1:] %}
        if (x + {{ n - 1 }} <= s) {
{{ add_chunk(n, reversed) }}
            x += {{ n }};
        }
{% endfor %}
        if (x <= s) {
            const complex_t k = c[{{ "-x" if reversed else "x" }}];
            row[x] += (complex_t)(a * k.x - bs * k.y, b * k.x + as * k.y);
        }
{% endmacro %}

/* row[x] += v * c[x * dir] for x in [-s, s], in vector registers (PoCL does not vectorise
   the scalar loop; inlined by force, as PoCL does not inline it either); v * conj(c) is
   folded in by the signs (bs = sign * v.y, as = sign * v.x), so there is no branch per tap.
   No restrict here: inlined, it becomes noalias scope declarations that Oclgrind cannot run. */
__attribute__((always_inline)) inline void add_row(__global complex_t *row, __global const complex_t *c,
                                                   int dir, int s,
                                                   real_t a, real_t b, real_t as, real_t bs)
{
    __global real_t *r = (__global real_t *)row;
    __global const real_t *kr = (__global const real_t *)c;
    if (dir > 0) {
{{ row_loop(false) }}
    } else {
{{ row_loop(true) }}
    }
}

__kernel void grid_rows(__global const int4 *restrict plan,          /* [num_vis], by row then column */
                        __global const complex_t *restrict vis,      /* [num_vis][NPOL], weighted */
                        __global const complex_t *restrict kernels,  /* tables by offset */
                        __global const int *restrict kernel_start,   /* [plane] */
                        __global const int *restrict support,        /* [plane] */
                        __global const int2 *restrict band_range,    /* [num_bands] run of plan */
                        __global complex_t *restrict grid)           /* [NPOL][GRID_SIZE][GRID_SIZE] */
{
    const int band = get_global_id(0);
    const int first_row = band * BAND;
    const int last_row = min(first_row + BAND, GRID_SIZE) - 1;
    const int2 range = band_range[band];
    for (int i = range.x; i < range.y; ++i) {
        const planned_vis p = decode_plan(plan[i]);
        const int s = support[p.plane];
        const int j0 = first_row - p.grid_v > -s ? first_row - p.grid_v : -s;  /* not min/max: */
        const int j1 = last_row - p.grid_v < s ? last_row - p.grid_v : s;      /* PoCL calls those */
        if (j0 > j1)
            continue;
        const kernel_taps t = taps_of(p, s, kernel_start[p.plane]);
        const real_t sign = p.conjugate ? -1 : 1;
        for (int pol = 0; pol < NPOL; ++pol) {
            const complex_t v = vis[(size_t)i * NPOL + pol];
            __global complex_t *centre = grid + ((size_t)pol * GRID_SIZE + p.grid_v) * GRID_SIZE + p.grid_u;
            for (int j = j0; j <= j1; ++j)
                add_row(centre + j * GRID_SIZE, kernels + t.centre + j * t.row, t.col, s,
                        v.x, v.y, sign * v.x, sign * v.y);
        }
    }
}
