"""Every warning clgrid's operators say names the caller's line, the first frame outside
clgrid, as numpy's and ducc0's do (`clgrid.call_warnings.caller_level`), not a line inside
clgrid nor a pool thread's (concurrent/futures): for each public path that can say it
(`clgrid.vis2dirty` / `dirty2vis`, `clgrid.WGridder` and its calls on one device, a
device list and facets, `clgrid.Gridder` / `Degridder`, `clgrid.reference`,
`clgrid.imaging.dirty_image`), each warning once, at the test's own line.  (The Dask
client's warnings: tests/test_dask.py.)

Before, the fixed stack levels named clgrid/imaging/engine.py, wgridding.py,
operators/gridder.py, degridder.py, operation.py; a device list's set-up warnings, said on
its pool threads, named concurrent/futures/thread.py, once per device.
"""

import os
import sys
import warnings

import numpy as np
import pytest

import clgrid
from clgrid.device import atomics, runtime
from clgrid.errors import EmptyInputWarning, KernelBuildError
from clgrid.imaging import engine as engine_module
from clgrid.strategies import base as strategy_base
from clgrid.strategies import texture as texture_module
from conftest import random_visibilities, warning_places, wide_field

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
IMAGE = dict(npix_x=64, npix_y=48, pixsize_x=4e-3, pixsize_y=5e-3)
N, CELL = 64, 4e-3
# one device, a device list (engines set up and called on pool threads), facets (operators
# called one after another)
LAYOUTS = {"one device": dict(device=DEVICE), "device list": dict(device=[DEVICE, DEVICE]),
           "facets": dict(device=DEVICE, facets=(2, 2))}


def line_of(call) -> tuple:
    """(this file, the line) of a one-line lambda: where a warning of its call should point."""
    return (__file__, call.__code__.co_firstlineno)


def assert_each_at_its_line(calls: dict, category, match: str, once: bool = True) -> None:
    """Each of ``calls`` (name: one-line lambda) says the warning at its own line: once,
    or (not ``once``: each device's message its own) at least once."""
    said = {name: warning_places(call, category, match) for name, call in calls.items()}
    wrong = {name: got for name, got in said.items()
             if (got != [line_of(calls[name])] if once else set(got) != {line_of(calls[name])})}
    assert not wrong, f"expected each once at its own line in {__file__}: {wrong}"


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=100, num_planes=4, oversample=4,
                                           max_support=8)


def unavailable_atomic_path() -> str:
    facts = runtime.device_facts(runtime.get_queue(DEVICE).device)
    missing = [p for p in atomics.ATOMIC_PATHS if atomics.atomic_unavailable(p, facts, False)]
    if not missing:
        pytest.skip(f"every atomic path is available on {facts.name}: none to fall back from")
    return missing[-1]


def available_atomic_path() -> str:
    facts = runtime.device_facts(runtime.get_queue(DEVICE).device)
    usable = [p for p in atomics.ATOMIC_PATHS if p != "cas" and not atomics.atomic_unavailable(p, facts, False)]
    if not usable:
        pytest.skip(f"{facts.name} has no atomic path but 'cas': no build of another to fail")
    return usable[0]


# -- the imaging operators -------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_input_warning_names_the_callers_line(rng, layout):
    """`EmptyInputWarning` (engine `_zero_data_warning`): nothing kept, or every kept
    value times its weight zero, from the module functions and the operator's calls in
    either direction (before: engine.py, or wgridding.py under `clgrid.vis2dirty` with
    facets)."""
    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(150, 300)))
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    none = np.zeros(vis.shape, np.uint8)
    kw = dict(epsilon=1e-4, do_wgridding=True, **IMAGE, **LAYOUTS[layout])
    op, masked = clgrid.WGridder(uvw, freq, **kw), clgrid.WGridder(uvw, freq, mask=none, **kw)
    assert_each_at_its_line({
        "clgrid.vis2dirty": lambda: clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=0 * wgt, **kw),
        "clgrid.vis2dirty, nothing kept": lambda: clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, mask=none, **kw),
        "clgrid.dirty2vis, nothing kept": lambda: clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=dirty, mask=none, **kw),
        "WGridder.vis2dirty, zero weights": lambda: op.vis2dirty(vis, 0 * wgt),
        "WGridder.vis2dirty, zero values": lambda: op.vis2dirty(0 * vis, wgt),
        "WGridder.vis2dirty, nothing kept": lambda: masked.vis2dirty(vis, wgt),
        "WGridder.dirty2vis, nothing kept": lambda: masked.dirty2vis(dirty, wgt),
    }, EmptyInputWarning, "is zero")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_host_fft_fallback_warning_names_the_callers_line(rng, monkeypatch, layout):
    """The device FFT that cannot be imported ("using the host FFT", said by each engine as
    it is set up): from the operator's constructor (a device list's engines' said once,
    not from concurrent/futures per device; facets' kept operators' once) and the module
    functions (before: wgridding.py)."""
    class NoDeviceFFT:
        def __init__(self, *args, **kwargs):
            raise ImportError("no device FFT (the test)")

    monkeypatch.setattr(engine_module, "DeviceFFT", NoDeviceFFT)
    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(150, 300)))
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    kw = dict(epsilon=1e-4, do_wgridding=True, tuning={"fft": "vkfft"}, **IMAGE, **LAYOUTS[layout])
    assert_each_at_its_line({
        "WGridder": lambda: clgrid.WGridder(uvw, freq, **kw),
        "clgrid.vis2dirty": lambda: clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, **kw),
        "clgrid.dirty2vis": lambda: clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=dirty, wgt=wgt, **kw),
    }, UserWarning, "using the host FFT")


@pytest.mark.parametrize("device", [DEVICE, [DEVICE, DEVICE]], ids=["one device", "device list"])
def test_streamed_warnings_name_the_callers_line(rng, monkeypatch, device):
    """A device too small for the points: `StreamedWarning` from the constructor and the
    module functions (before: wgridding.py, or concurrent/futures once per device of a
    list), and a streamed call's `EmptyInputWarning` (stream.py's) from the call."""
    real = engine_module.device_facts
    monkeypatch.setattr(engine_module, "device_facts",                  # 1.5 MiB of device memory
                        lambda d: __import__("dataclasses").replace(real(d), global_memory=3 << 19))
    uvw, freq, vis, wgt, _ = wide_field(rng, 1500, np.linspace(1.0e8, 1.6e8, 16))
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    kw = dict(epsilon=1e-4, do_wgridding=True, device=device, **IMAGE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", clgrid.StreamedWarning)
        op = clgrid.WGridder(uvw, freq, **kw)
    assert all(e.streamed is not None for e in op.engines)
    assert_each_at_its_line({
        "WGridder": lambda: clgrid.WGridder(uvw, freq, **kw),
        "clgrid.vis2dirty": lambda: clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, **kw),
        "clgrid.dirty2vis": lambda: clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=dirty, wgt=wgt, **kw),
    }, clgrid.StreamedWarning, "streamed through it", once=False)     # (each device's numbers)
    assert_each_at_its_line({
        "WGridder.vis2dirty, zero values": lambda: op.vis2dirty(0 * vis, wgt),
    }, EmptyInputWarning, "is zero")


@pytest.mark.parametrize("device", [DEVICE, [DEVICE, DEVICE]], ids=["one device", "device list"])
def test_strategy_warnings_of_the_imaging_operator_name_the_callers_line(rng, monkeypatch, device):
    """The spreading strategies' warnings under the imaging operator: an atomic path the
    device lacks (said as each engine is set up; before: engine.py, once per device of a
    list), and one whose program fails to build (said by the first call)."""
    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(150, 300)))
    kw = dict(epsilon=1e-4, do_wgridding=True, device=device, **IMAGE)
    lacking = dict(kw, tuning={"spread": "points", "atomic": unavailable_atomic_path()})
    assert_each_at_its_line({
        "WGridder": lambda: clgrid.WGridder(uvw, freq, **lacking),
        "clgrid.vis2dirty": lambda: clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, **lacking),
    }, UserWarning, "unavailable on")

    path = available_atomic_path()
    real = strategy_base.Strategy._build

    def refused(self, npol):
        if self.tuning.get("atomic", "cas") != "cas":
            raise KernelBuildError("the build refused (the test)")
        return real(self, npol)

    monkeypatch.setattr(strategy_base.Strategy, "_build", refused)
    failing = dict(kw, tuning={"spread": "points", "atomic": path})
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        made = sys._getframe().f_lineno + 1
        op = clgrid.WGridder(uvw, freq, **failing)
        called = sys._getframe().f_lineno + 1
        op.vis2dirty(vis, wgt)
    lines = [(w.filename, w.lineno) for w in said if "failed to build" in str(w.message)]
    assert lines in ([(__file__, made)], [(__file__, called)]), lines
    assert_each_at_its_line({
        "clgrid.vis2dirty": lambda: clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, **failing),
    }, UserWarning, "failed to build")


def test_dirty_image_norm_zero_warning_names_the_callers_line(stack):
    grid = np.zeros((2, N, N), np.complex64)
    assert_each_at_its_line({"clgrid.imaging.dirty_image": lambda: clgrid.imaging.dirty_image(grid, stack, [1.0, 0.0])},
                            EmptyInputWarning, "norm is 0")


# -- Gridder, Degridder, the reference -------------------------------------------------------

def test_gridder_and_degridder_empty_input_warnings_name_the_callers_line(queue, stack, rng):
    """Nothing gridded or degridded (every sample flagged), a polarisation of zero weight:
    from a call with uvw, with a `Plan`, of chunks, and streamed in chunks of rows
    (before: gridder.py, degridder.py)."""
    uvw, vis = random_visibilities(rng, int(rng.integers(150, 300)), N, CELL, 60, npol=2)
    flagged = np.ones(vis.shape, bool)
    gridder, degridder = clgrid.Gridder(N, CELL, stack, device=queue), clgrid.Degridder(N, CELL, stack, device=queue)
    streaming = clgrid.Gridder(N, CELL, stack, device=queue)
    streaming.chunk_samples = len(uvw) // 3 + 1
    model = (rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))).astype(np.complex64)
    plan, degrid_plan = gridder.plan(uvw, flags=flagged), degridder.plan(uvw, flags=flagged)
    assert_each_at_its_line({
        "Gridder.grid": lambda: gridder.grid(uvw, vis, flags=flagged),
        "Gridder.grid, a Plan": lambda: gridder.grid(plan, vis),
        "Gridder.grid_chunks": lambda: gridder.grid_chunks([(uvw[:50], vis[:50], None, flagged[:50])]),
        "Gridder.grid, streamed": lambda: streaming.grid(uvw, vis, flags=flagged),
    }, EmptyInputWarning, "no visibility was gridded")
    weights = np.column_stack([np.ones(len(uvw)), np.zeros(len(uvw))])
    assert_each_at_its_line({
        "Gridder.grid, a zero-weight polarisation": lambda: gridder.grid(uvw, vis, weights),
    }, EmptyInputWarning, "are all zero")
    assert_each_at_its_line({
        "Degridder.degrid": lambda: degridder.degrid(model, uvw, flags=flagged),
        "Degridder.degrid, a Plan": lambda: degridder.degrid(model, degrid_plan),
    }, EmptyInputWarning, "no visibility was degridded")
    streaming = clgrid.Degridder(N, CELL, stack, device=queue)
    streaming.chunk_samples = len(uvw) // 3 + 1             # streamed: each chunk of rows says it
    call = lambda: streaming.degrid(model, uvw, flags=flagged)  # noqa: E731
    assert set(warning_places(call, EmptyInputWarning, "no visibility was degridded")) == {line_of(call)}


def test_dropped_visibilities_warning_names_the_callers_line(queue, stack, rng):
    """Visibilities off the grid: planned on the device and on the host (a linear
    interpolation's plan), by `plan`, `grid`, `degrid` and the reference (before:
    operation.py where the call planned)."""
    uvw, vis = random_visibilities(rng, int(rng.integers(150, 300)), N, CELL, 60)
    uvw[: len(uvw) // 2, 0] *= 50                              # half of them far off the grid
    gridder, degridder = clgrid.Gridder(N, CELL, stack, device=queue), clgrid.Degridder(N, CELL, stack, device=queue)
    linear = clgrid.Gridder(N, CELL, stack, device=queue, method="atomic", interpolation="linear")
    assert linear.strategy.host_planning
    model = (rng.normal(size=(1, N, N)) + 1j * rng.normal(size=(1, N, N))).astype(np.complex64)
    assert_each_at_its_line({
        "Gridder.plan": lambda: gridder.plan(uvw),
        "Gridder.grid": lambda: gridder.grid(uvw, vis),
        "Gridder.plan, on the host": lambda: linear.plan(uvw),
        "Gridder.grid, planned on the host": lambda: linear.grid(uvw, vis),
        "Degridder.degrid": lambda: degridder.degrid(model, uvw),
        "clgrid.reference.grid": lambda: clgrid.reference.grid(uvw, vis, N, CELL, stack),
        "clgrid.reference.degrid": lambda: clgrid.reference.degrid(model.astype(np.complex128), uvw, N, CELL, stack),
    }, UserWarning, "not (gridded|degridded)")


def test_strategy_warnings_of_gridder_and_degridder_name_the_callers_line(queue, stack, rng, monkeypatch):
    """A strategy's fallbacks said from the operator's constructor (an atomic path the
    device lacks, the image sampler it cannot give, a flush that is wrong by design) or
    from its first call (an atomic path's program that fails to build); before:
    gridder.py and degridder.py."""
    missing = unavailable_atomic_path()
    assert_each_at_its_line({
        "Gridder, atomic": lambda: clgrid.Gridder(N, CELL, stack, device=queue, tuning={"atomic": missing}),
        "Gridder, moving_window": lambda: clgrid.Gridder(N, CELL, stack, device=queue, method="moving_window",
                                                         tuning={"atomic": missing}),
    }, UserWarning, "unavailable on")
    assert_each_at_its_line({
        "Gridder, moving_window": lambda: clgrid.Gridder(N, CELL, stack, device=queue, method="moving_window", tuning={"flush": "plain"}),
    }, UserWarning, "flush='plain'")
    monkeypatch.setattr(texture_module, "cube_image_format", lambda *args: (None, "no image format (the test)"))
    assert_each_at_its_line({
        "Gridder, texture": lambda: clgrid.Gridder(N, CELL, stack, device=queue, method="atomic", interpolation="linear", tuning={"sampler": "image"}),
        "Degridder, texture": lambda: clgrid.Degridder(N, CELL, stack, device=queue, method="gather", interpolation="linear", tuning={"sampler": "image"}),
    }, UserWarning, "sampler 'image' unavailable")

    path, real = available_atomic_path(), strategy_base.Strategy._build

    def refused(self, npol):
        if self.tuning.get("atomic", "cas") != "cas":
            raise KernelBuildError("the build refused (the test)")
        return real(self, npol)

    monkeypatch.setattr(strategy_base.Strategy, "_build", refused)
    uvw, vis = random_visibilities(rng, int(rng.integers(150, 300)), N, CELL, 60)
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, method="atomic", tuning={"atomic": path})
    assert_each_at_its_line({"Gridder.grid": lambda: gridder.grid(uvw, vis)}, UserWarning, "failed to build")
