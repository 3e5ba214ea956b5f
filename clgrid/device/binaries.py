"""Offline builds: a program's source with the parameters baked into it, and
precompiled binaries that are loaded only where those parameters match the call.

An FPGA compiler (Intel's ``aoc``) takes hours, so a program is emitted once
(``clgrid emit``), compiled offline and loaded later with ``binary=``
(clCreateProgramWithBinary).  A binary does not say what its source was
specialised for, so a JSON *description* sits beside it with the same name:
``grid.aocx`` is described by ``grid.json``, which ``clgrid emit`` writes beside
``grid.cl``.  Loading compares that description with the call's own and refuses
any difference, naming it.  Every strategy loads binaries through `load_binary`.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import pyopencl as cl

from .codegen import render
from ..errors import BinaryMismatchError, KernelBuildError
from .runtime import DeviceFacts
from .tuning import resolve_tuning

__all__ = ["program_description", "description_path", "load_binary", "save_binary", "offline_target",
           "emit_program", "INTEL_FPGA_PLATFORM"]

INTEL_FPGA_PLATFORM = "Intel(R) FPGA SDK for OpenCL(TM)"


def program_description(strategy: str, template: str, parameters: dict, source: str) -> dict:
    """What a program was built from: strategy, template, template variables, source hash."""
    from .. import __version__

    return {"strategy": strategy, "template": template, "parameters": parameters,
            "source_sha256": hashlib.sha256(source.encode()).hexdigest(), "clgrid_version": __version__}


def description_path(binary) -> Path:
    """The description of ``binary`` (or of emitted source): same name, suffix ``.json``."""
    return Path(binary).with_suffix(".json")


def _differences(baked: dict, wanted: dict) -> list[str]:
    unset = "unset"
    found = [f"{key} {baked.get(key, unset)!r} (this call: {wanted[key]!r})"
             for key in ("strategy", "template") if baked.get(key) != wanted[key]]
    have, need = baked.get("parameters", {}), wanted["parameters"]
    found += [f"{key}={have.get(key, unset)!r} (this call: {need.get(key, unset)!r})"
              for key in sorted(set(have) | set(need)) if have.get(key, unset) != need.get(key, unset)]
    if not found and baked.get("source_sha256") != wanted["source_sha256"]:
        found.append(f"the kernel source differs (emitted by clgrid {baked.get('clgrid_version', unset)}, "
                     f"this is clgrid {wanted['clgrid_version']})")
    return found


def load_binary(context: cl.Context, path, wanted: dict) -> cl.Program:
    """The program in ``path`` for the context's devices, if its description matches ``wanted``.

    Raises `BinaryMismatchError` naming every parameter that differs (or a missing
    description), `KernelBuildError` if the runtime rejects the binary.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"precompiled program {path} not found")
    described = description_path(path)
    if not described.is_file():
        raise BinaryMismatchError(f"{path}: its description {described.name} is missing beside it, so its "
                                  f"parameters cannot be checked; keep the .json that clgrid emit wrote")
    baked = json.loads(described.read_text())
    differences = _differences(baked, wanted)
    if differences:
        raise BinaryMismatchError(f"{path} was built for other parameters than this call: "
                                  + "; ".join(differences)
                                  + ". Emit and compile it again for this call (clgrid emit), or call "
                                    "with the binary's parameters.")
    binary = path.read_bytes()
    try:
        return cl.Program(context, context.devices, [binary] * len(context.devices)).build()
    except cl.Error as exc:
        raise KernelBuildError(f"the OpenCL runtime rejected the binary {path} (built for another "
                               f"device or runtime?): {exc}") from None


def save_binary(program: cl.Program, path, description: dict) -> Path:
    """Write the first device's binary of a built ``program`` to ``path`` and its description beside it."""
    path = Path(path)
    path.write_bytes(program.get_info(cl.program_info.BINARIES)[0])
    description_path(path).write_text(json.dumps(description, indent=2) + "\n")
    return path


def offline_target(name: str, platform: str = INTEL_FPGA_PLATFORM) -> DeviceFacts:
    """Facts of a device that is not here, enough to pick its tuning-table entries by name."""
    return DeviceFacts(platform=platform, vendor="", name=name, type="ACCELERATOR", driver="",
                       compute_units=1, global_memory=0, max_allocation=0, local_memory=0,
                       max_work_group_size=1, fp64=True, int64_atomics=False, images=False,
                       extensions=())


def emit_program(strategy, facts: DeviceFacts, precision: str, npol: int, grid_size: int, kernels,
                 output, tuning: dict | None = None, float_taps: bool = False) -> tuple[Path, Path]:
    """Write the source of ``strategy`` (a strategy class) for the device ``facts`` describe
    (with ``float_taps``, its per-point kernel values kept in float, as an imaging operator
    keeps them where `Strategy.keeps_float_taps` says so).

    ``output`` is the ``.cl`` file; its description (`program_description` plus the
    target, the precision, every tuning value and the ``aoc`` command line) goes
    beside it as ``.json``, where a binary compiled from it will look for it.
    Returns both paths.
    """
    resolved = resolve_tuning(strategy.name, tuning, facts, npol=npol, precision=precision)
    parameters = dict(strategy.program_parameters(resolved, precision, npol, grid_size, kernels),
                      **strategy.float_taps_parameters(float_taps))
    source = render(strategy.template, **parameters)
    output = Path(output)
    binary = output.with_suffix(".aocx")
    aoc = ["aoc", *resolved.get("aoc_options", []), output.name, "-o", binary.name]
    document = dict(program_description(strategy.name, strategy.template, parameters, source),
                    precision=precision, target={"platform": facts.platform, "name": facts.name},
                    tuning=resolved, aoc_command=shlex.join(aoc))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(source)
    described = description_path(output)
    described.write_text(json.dumps(document, indent=2) + "\n")
    return output, described
