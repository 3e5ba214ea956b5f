"""Run a command under Oclgrind, the OpenCL device simulator, and read what it reports.

Oclgrind (Debian/Ubuntu package ``oclgrind``) interprets every work-item and
checks every memory access: it reports out-of-bounds accesses, data races
(``--data-races``) and uses of uninitialised values (``--uninitialized``), and with
``--inst-counts`` prints how many instructions of each kind each kernel ran.
``oclgrind python3 ...`` intercepts the OpenCL calls of the whole process, so the
command sees one device, "Oclgrind Simulator" (pick it with ``device="oclgrind"``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["OclgrindRun", "run_under_oclgrind", "CHECKS"]

CHECKS = ("--data-races", "--uninitialized")

_COUNT = re.compile(r"^\s*(\d+) - (.+?)\s*$")
_KERNEL = re.compile(r"^Instructions executed for kernel '(\w+)':")


@dataclass
class OclgrindRun:
    """What one run reported: its exit status and output, Oclgrind's diagnostics (one
    message per entry; empty means no error found) and, with ``inst_counts``,
    instructions executed per kernel (name -> {instruction: count})."""

    returncode: int
    output: str
    diagnostics: list = field(default_factory=list)
    instructions: dict = field(default_factory=dict)


def _instruction_counts(stdout: str) -> dict:
    """Parse ``--inst-counts`` histograms, summed over launches of the same kernel."""
    counts, kernel = {}, None
    for line in stdout.splitlines():
        if match := _KERNEL.match(line):
            kernel = counts.setdefault(match.group(1), {})
        elif kernel is not None and (match := _COUNT.match(line)):
            kernel[match.group(2)] = kernel.get(match.group(2), 0) + int(match.group(1))
        elif not line.strip():
            kernel = None
    return counts


def run_under_oclgrind(argv: list, inst_counts: bool = False, timeout: float = 600,
                       extra_options: tuple = (), checks: tuple = CHECKS) -> OclgrindRun:
    """Run ``argv`` under ``oclgrind`` with the memory checks and ``checks`` (races and
    initialisation by default)."""
    executable = shutil.which("oclgrind")
    if executable is None:
        raise FileNotFoundError("oclgrind is not installed (Debian/Ubuntu: apt-get install oclgrind)")
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "oclgrind.log"
        command = [executable, *checks, "--log", str(log), *(["--inst-counts"] if inst_counts else []),
                   *extra_options, *map(str, argv)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        messages = log.read_text() if log.is_file() else ""
    diagnostics = [m.strip() for m in re.split(r"\n\s*\n", messages) if m.strip()]
    return OclgrindRun(done.returncode, done.stdout + done.stderr, diagnostics,
                       _instruction_counts(done.stdout) if inst_counts else {})
