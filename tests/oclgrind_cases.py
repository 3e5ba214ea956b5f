"""The one way the tests run a case under Oclgrind: skipped, with the reason, where
Oclgrind is not installed (an error under ``CLGRID_REQUIRE_OCLGRIND=1``); a run Oclgrind aborted on an instruction it cannot check
(Oclgrind 21.10's uninitialised-value plugin stops at LLVM's ``freeze`` and still
exits 0) is detected and rerun without that plugin, never taken as a clean pass."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from clgrid.tools.oclgrind import CHECKS, run_under_oclgrind

UNSUPPORTED = "Unsupported instruction"


def require_oclgrind() -> None:
    """Skip the calling test, saying why, when the oclgrind executable is missing; fail
    instead under ``CLGRID_REQUIRE_OCLGRIND=1`` (set by CI), as tests/conftest.py does for
    tests marked ``oclgrind``."""
    if shutil.which("oclgrind") is None:
        reason = "oclgrind is not installed (apt-get install oclgrind): the kernels were not simulated"
        if os.environ.get("CLGRID_REQUIRE_OCLGRIND") == "1":
            pytest.fail(f"{reason}, and CLGRID_REQUIRE_OCLGRIND=1 requires it", pytrace=False)
        pytest.skip(reason)


def run_case(script: str, *arguments, checks=CHECKS, timeout: float = 300):
    """Run ``tests/<script>`` under Oclgrind with ``checks``; returns ``(run, checks_used)``.

    If Oclgrind aborted a kernel on an instruction one of its plugins does not support,
    the case runs again with the data-race check alone (the out-of-bounds check is always
    on), so the caller still gets a full run, and learns which checks it had."""
    require_oclgrind()
    argv = [sys.executable, Path(__file__).with_name(script), *arguments]
    run = run_under_oclgrind(argv, timeout=timeout, checks=checks)
    if UNSUPPORTED in run.output or any(UNSUPPORTED in d for d in run.diagnostics):
        assert "freeze" in run.output + "".join(run.diagnostics), run.output[-2000:]
        checks = ("--data-races",)
        run = run_under_oclgrind(argv, timeout=timeout, checks=checks)
        assert UNSUPPORTED not in run.output, run.output[-2000:]
    return run, checks
