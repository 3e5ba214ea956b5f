"""OpenCL C templates (Jinja2) rendered per device, built once and cached.

Templates live in ``clgrid/cl_kernels/``.  Before rendering, the loader puts a ``#line``
directive at the top of each template and after every line holding a Jinja
statement, comment end or macro call, so a compiler error names the template file and line that produced the
code, loops and includes notwithstanding.  A failed build raises `KernelBuildError`
with the build log and the path of the rendered source.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from pathlib import Path

import jinja2
import numpy as np
import pyopencl as cl

from ..errors import KernelBuildError

__all__ = ["kernel_dir", "render", "build_program", "kernel", "launch", "LAUNCH_GROUP"]

_programs: dict = {}
_kernels = threading.local()


def kernel_dir() -> Path:
    """Where the templates are: ``clgrid/cl_kernels/``, shipped inside the package."""
    return Path(__file__).resolve().parent.parent / "cl_kernels"


# Statements, comment ends and macro calls are what make output lines drift from template lines.
_CHANGES_LINE_COUNT = re.compile(r"\{%|#\}|\{\{\s*\w+\(")


class _LineMarkingLoader(jinja2.FileSystemLoader):
    """Adds ``#line`` directives so compiler messages point into the templates."""

    def get_source(self, environment, template):
        source, filename, uptodate = super().get_source(environment, template)
        lines = [f'#line 1 "{template}"']
        for number, line in enumerate(source.split("\n"), start=1):
            lines.append(line)
            if _CHANGES_LINE_COUNT.search(line):
                lines.append(f'#line {number + 1} "{template}"')
        return "\n".join(lines), filename, uptodate


_environment = None


def _env() -> jinja2.Environment:
    global _environment
    if _environment is None:
        _environment = jinja2.Environment(loader=_LineMarkingLoader(str(kernel_dir())),
                                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return _environment


_rendered: dict = {}
RENDERS_KEPT = 256
_PLAIN = (type(None), bool, int, float, str, np.integer, np.floating, np.bool_)


def _plain_key(value):
    """``value`` as a dictionary key where it is made of plain values (numbers, strings,
    tuples and lists of them), else None: such a render is not kept."""
    if isinstance(value, _PLAIN):
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        keys = [_plain_key(v) for v in value]
        return None if any(k is None for k in keys) else (type(value).__name__, tuple(keys))
    return None


def render(template: str, **params) -> str:
    """Render ``clgrid/cl_kernels/<template>`` with the given template variables.

    A render of plain template variables is kept (operators are set up many times with the
    same programs, and rendering a large template costs a visible part of a set-up)."""
    key = _plain_key(tuple(sorted(params.items())))
    if key is not None:
        key = (template, key)
        found = _rendered.get(key)
        if found is not None:
            return found
    source = _env().get_template(template).render(**params)
    if key is not None:
        if len(_rendered) >= RENDERS_KEPT:
            _rendered.pop(next(iter(_rendered)))          # the oldest
        _rendered[key] = source
    return source


def build_program(context: cl.Context, source: str, options: tuple = ()) -> cl.Program:
    """Build ``source`` for the context's devices, once per (context, source, options)."""
    key = (context.int_ptr, hashlib.sha256(source.encode()).hexdigest(), tuple(options))
    program = _programs.get(key)
    if program is None:
        try:
            program = cl.Program(context, source).build(options=list(options))
        except cl.RuntimeError as exc:
            path = _save_failed_source(source, key[1][:12])
            hint = ""
            if "unknown target CPU" in str(exc):
                hint = ("\nThis OpenCL compiler does not know the host CPU (PoCL from pip, on LLVM 14, "
                        "fails so on AMD Zen 5): install the system's PoCL (apt-get install "
                        "pocl-opencl-icd, which clgrid then prefers) or Intel's CPU runtime "
                        "(pip install 'clgrid[intel]', device='intel').")
            raise KernelBuildError(f"OpenCL build failed (options {list(options)}); rendered source "
                                   f"saved to {path}\n{exc}{hint}") from None
        _programs[key] = program
    return program


def _save_failed_source(source: str, digest: str) -> Path:
    """Write a source that failed to build to a new file for the error message: created
    exclusively (O_EXCL: never through a file or symlink already there) under a name no
    one can foresee, readable by the user only, in the temporary directory."""
    handle, name = tempfile.mkstemp(prefix=f"clgrid-failed-{digest}-", suffix=".cl", text=True)
    with os.fdopen(handle, "w") as file:
        file.write(source)
    return Path(name)


def kernel(program: cl.Program, name: str) -> cl.Kernel:
    """The kernel ``name`` of ``program``, one object per thread, kept.

    A kernel object holds its arguments from setting them to enqueueing, so threads must
    not share one; but a new object per launch costs pyopencl an invoker lookup in its
    on-disk cache, a visible part of a whole `Gridder.grid` call
    (docs/benchmarks/whole-calls.md).  Within one thread, enqueueing captures the arguments, so reuse is safe."""
    cache = getattr(_kernels, "cache", None)
    if cache is None:
        cache = _kernels.cache = {}
    key = (program.int_ptr, name)
    found = cache.get(key)
    if found is None:
        found = cache[key] = (cl.Kernel(program, name), program)    # the program kept alive with it
    return found[0]


# work-items per work-group of a `launch` (dimension 0), where the kernel allows as many
LAUNCH_GROUP = 256


def launch(kernel_object: cl.Kernel, queue: cl.CommandQueue, shape, *args, wait_for=None) -> cl.Event:
    """Enqueue ``kernel_object`` over at least ``shape`` work-items (an int or a tuple) in
    work-groups of up to `LAUNCH_GROUP` items along dimension 0 and one along the others,
    dimension 0's global size rounded up to whole work-groups.

    For kernels that return for ids beyond their own bounds.  Left to choose (local size
    NULL), an OpenCL runtime picks a divisor of the global size: for a size with no small
    factors (an image side of 5462 = 2 x 2731, a prime count of samples), work-groups of one
    or two items (what that costs: docs/benchmarks/large.md).

    Returns
    -------
    pyopencl.Event
        The launch's event.
    """
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    allowed = kernel_object.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, queue.device)
    group = max(1, min(LAUNCH_GROUP, int(allowed)))
    first = max(1, -(-shape[0] // group)) * group
    local = (group,) + (1,) * (len(shape) - 1)
    return kernel_object(queue, (first,) + shape[1:], local, *args, wait_for=wait_for)
