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
import threading
import warnings
from typing import NamedTuple

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


class WideField(NamedTuple):
    """What `wide_field` draws: ducc0's wgridder shapes, metres and Hz."""

    uvw: np.ndarray
    freq: np.ndarray
    vis: np.ndarray
    wgt: np.ndarray | None
    mask: np.ndarray | None


def wide_field(rng, nrow, freq=(1.0e8, 1.3e8), *, uv=2500.0, w=600.0, precision="double", weights=(0.2, 1.0),
               masked=None):
    """Random visibilities of a wide field for `vis2dirty` / `dirty2vis` / `WGridder` tests.

    Drawn in this order (a seed gives the same data whatever the caller unpacks): uvw, vis,
    wgt (if asked), mask (if asked).

    Parameters
    ----------
    rng : numpy.random.Generator
        The test's generator (the ``rng`` fixture: a fresh seed each run).
    nrow : int
        Rows.
    freq : sequence of float
        Channel frequencies in Hz (copied; ``nchan = len(freq)``).
    uv, w : float
        Extents in metres: u and v uniform in ``[-uv, uv)``, w uniform in ``[-w, w)``, each
        independent (the defaults, |w| up to a quarter of the longest |u|, are the tests'
        usual wide field).
    precision : {"double", "single"}
        complex128 / float64 or complex64 / float32 vis and wgt (uvw and freq stay float64).
    weights : (float, float) or None
        wgt uniform in ``[low, high)``, shape (nrow, nchan); None: no wgt drawn, ``wgt`` is None.
    masked : float or None
        The fraction of samples masked out: ``mask`` (nrow, nchan) uint8 is 0 with this
        probability, else 1; None: no mask drawn, ``mask`` is None.

    Returns
    -------
    WideField
        ``(uvw, freq, vis, wgt, mask)``: uvw (nrow, 3) float64, freq (nchan,) float64, vis
        (nrow, nchan) with real and imaginary parts standard normal, wgt and mask as above.
    """
    if precision not in ("double", "single"):
        raise ValueError(f"precision must be 'double' or 'single', got {precision!r}")
    complex_dtype, real_dtype = (np.complex64, np.float32) if precision == "single" else (np.complex128, np.float64)
    freq = np.array(freq, np.float64).reshape(-1)
    shape = (nrow, freq.size)
    uvw = rng.uniform(-1, 1, (nrow, 3)) * np.array([uv, uv, w])
    vis = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(complex_dtype)
    wgt = None if weights is None else rng.uniform(weights[0], weights[1], shape).astype(real_dtype)
    mask = None if masked is None else (rng.random(shape) > masked).astype(np.uint8)
    return WideField(uvw, freq, vis, wgt, mask)


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


def held_until(owner, name: str, calling: threading.Event, until: threading.Event, timeout: float = 60.0) -> None:
    """``owner``'s method ``name`` replaced, on ``owner`` alone (an instance attribute), by
    one that sets ``calling`` and then waits for ``until`` (failing after ``timeout``
    seconds) before it calls the method: how the tests of concurrent calls
    (`warnings_of_two_threads`) hold one call's work (a device's engine, a facet's
    operator, a worker's gridder) until the other call has got so far.

    Parameters
    ----------
    owner : object
        The object whose method is held (not its class: other instances are untouched).
    name : str
        The method's name, e.g. ``"vis2dirty"``.
    calling, until : threading.Event
        Set when a call of it begins; waited for before the call goes on.
    timeout : float
        Seconds to wait for ``until``; past them the held call fails its assertion.
    """
    real = getattr(owner, name)

    def held(*args, **kwargs):
        calling.set()
        assert until.wait(timeout), f"{name} was held {timeout} s: the other call never got there"
        return real(*args, **kwargs)

    setattr(owner, name, held)


def warnings_of_two_threads(first, second, timeout: float = 120.0) -> list:
    """``first()`` and ``second()`` run at once on two threads (daemons, each joined within
    ``timeout`` seconds), every warning said meanwhile recorded (``warnings.simplefilter
    ("always")``): how the tests of concurrent calls check that each call says its own
    warnings, once.  The callers force the interleaving with events.

    Returns
    -------
    said : list of warnings.WarningMessage
        In the order said.
    """
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=f, daemon=True) for f in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
    return said


def warning_places(call, category, match: str) -> list:
    """``call()`` with every warning recorded (``warnings.simplefilter("always")``): the
    ``(filename, lineno)`` of each of ``category`` whose message ``re.search``-es
    ``match``, in the order said: how tests check that a warning names the caller's line
    (tests/test_warning_lines.py)."""
    import re

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        call()
    return [(w.filename, w.lineno) for w in said if issubclass(w.category, category) and re.search(match, str(w.message))]
