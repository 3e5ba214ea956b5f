{# What the imaging operator keeps per point in plan order, and in what type
    (clgrid/imaging/engine.py): its value (value_t) and phase (phase_t), in the operator's
    complex type, or in float2 where a double-precision operator's epsilon allows
    (clgrid.sources.accuracy.float_taps_allowed; the arithmetic stays in complex_t).
    Needs complex.cl.  Template variables: double, value_single. #}
{% if double and value_single %}
typedef float2 value_t;
typedef float2 phase_t;
#define AS_COMPLEX(x) convert_double2(x)
#define AS_VALUE(x) convert_float2(x)
{% else %}
typedef complex_t value_t;
typedef complex_t phase_t;
#define AS_COMPLEX(x) (x)
#define AS_VALUE(x) (x)
{% endif %}
