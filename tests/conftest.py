"""Shared test fixtures: the device under test, fresh random inputs, the error measure of
the seeds, and the rule for tests that need a tool.

Tests marked ``@pytest.mark.oclgrind`` run programs under Oclgrind.  Where the
``oclgrind`` executable is missing they are skipped with the reason, unless
``CLGRID_REQUIRE_OCLGRIND=1`` (set by .ci/run), which makes the absence an error: CI
must not go green by skipping them.  Tests of optional libraries (the ``test`` extra:
pyuvdata, finufft, ducc0) call `optional`, the same rule under ``CLGRID_REQUIRE_OPTIONAL=1``.

Tests or parameter sets marked ``slow`` (exhaustive parameter sets, whole command-line tool
runs, every Oclgrind test) are left out of the fast loop, ``python -m pytest -m "not slow"``;
the README's test command, which CI runs, runs them all.
"""

import importlib
import os
import secrets
import shutil

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.reference import relative_error  # noqa: F401  (the tests' accuracy measure)


@pytest.hookimpl(tryfirst=True)     # before ``-m`` deselects, so that "not slow" sees these marks
def pytest_collection_modifyitems(config, items):
    """Mark every Oclgrind test ``slow``: an interpreted run takes seconds where the device takes
    milliseconds, so the fast loop (``-m "not slow"``) leaves them to CI."""
    for item in items:
        if item.get_closest_marker("oclgrind"):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item):
    """Skip, or fail where the tool is required, tests whose tool is not installed."""
    if item.get_closest_marker("oclgrind") and shutil.which("oclgrind") is None:
        reason = "oclgrind is not installed (Debian/Ubuntu: apt-get install oclgrind)"
        if os.environ.get("CLGRID_REQUIRE_OCLGRIND") == "1":
            pytest.fail(f"{reason}, and CLGRID_REQUIRE_OCLGRIND=1 requires it", pytrace=False)
        pytest.skip(reason)


def optional(module: str, extra: str):
    """Import an optional library, or skip with the reason (fail under CLGRID_REQUIRE_OPTIONAL=1)."""
    if os.environ.get("CLGRID_REQUIRE_OPTIONAL") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install 'clgrid[{extra}]')")


@pytest.fixture
def rng(request):
    """A generator with a fresh seed each run; the seed is printed if the test fails."""
    seed = int(os.environ.get("CLGRID_TEST_SEED", secrets.randbits(32)))
    print(f"random seed {seed} (set CLGRID_TEST_SEED={seed} to repeat)")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def queue():
    """The device under test: PoCL on the CPU (CI has no GPU), or $CLGRID_TEST_DEVICE."""
    return clgrid.device.runtime.get_queue(os.environ.get("CLGRID_TEST_DEVICE", "pocl"))


@pytest.fixture(scope="session")
def device_name(queue):
    """A ``device=`` string that selects the device under test (for the command line)."""
    return f"{queue.device.platform.name} {queue.device.name}"


def random_visibilities(rng, n, grid_size, cell_size, w_max, npol=1, fill=0.8):
    """Uniform uvw filling ``fill`` of the grid's half-width, Gaussian complex visibilities."""
    du = 1.0 / (grid_size * cell_size)
    uv_max = fill * (grid_size // 2) * du
    uvw = np.column_stack([rng.uniform(-uv_max, uv_max, (n, 2)), rng.uniform(-w_max, w_max, n)])
    vis = rng.normal(size=(n, npol)) + 1j * rng.normal(size=(n, npol))
    return uvw, vis


def poison(gridder, npol):
    """Fill the device grid with NaN so a missed zeroing or a missed cell shows up."""
    buf = gridder.grid_buffer(npol)
    cl.enqueue_fill_buffer(gridder.queue, buf, np.array([np.nan], gridder.strategy.real_dtype),
                           0, buf.size).wait()


def poisoned_buffers(monkeypatch):
    """Every OpenCL buffer made from here on (the device weights' density, imaging grid,
    partial sums, uploads) starts as bytes 0xFF: NaN as floats, -1 as integers, so a
    missed zeroing or write shows."""
    import pyopencl as cl

    made = cl.Buffer

    def poisoned(context, flags, size=0, hostbuf=None):
        buffer = made(context, flags, size, hostbuf) if hostbuf is not None else made(context, flags, size)
        if hostbuf is None:
            queue = cl.CommandQueue(context)
            cl.enqueue_fill_buffer(queue, buffer, np.array([255], np.uint8), 0, buffer.size).wait()
        return buffer

    monkeypatch.setattr(cl, "Buffer", poisoned)
