"""Arrays given for results (``out=``, ``dirty=``, ``vis=``): one check for every operator
(`clgrid.checks.check_output`), before any device work.  A wrong dtype, shape, a read-only
array or a device array of another context is refused naming the argument; nothing is
cast, truncated or written past an end (issue 26, items 1 and 3: a float32 ``out`` to
`Degridder.degrid` corrupted the heap and aborted the process; ``dirty=<int32>``
truncated the image, ``vis=<float64>`` dropped the imaginary part).  Arrays that fit
are written in place, whatever their strides or byte order."""

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clgrid

from conftest import optional, random_visibilities, relative_error, wide_field

N, CELL, W_MAX = 64, 4e-3, 100
IMAGE = dict(npix_x=32, npix_y=32, pixsize_x=2e-3, pixsize_y=2e-3)


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=4,
                                           oversample=4, max_support=8)


def tracks(rng, nbaseline=8, ntime=40):
    uvw, _ = random_visibilities(rng, nbaseline * ntime, N, CELL, W_MAX)
    return uvw.reshape(nbaseline, ntime, 3)


@pytest.mark.parametrize("method", ["gather", "moving_window"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_degrid_refuses_a_real_out_before_any_device_work(queue, rng, stack, method, dtype):
    uvw = tracks(rng)
    grid = (rng.normal(size=(1, N, N)) + 1j * rng.normal(size=(1, N, N))).astype(np.complex64)
    degridder = clgrid.Degridder(N, CELL, stack, method=method, device=queue)
    out = np.full(uvw.shape[:-1] + (1,), 7, dtype)
    with pytest.raises(TypeError, match=r"out must be a complex64 or complex128 array of shape \(8, 40, 1\), "
                                        r"got dtype"):
        degridder.degrid(grid, uvw, out=out)
    assert np.all(out == 7) and degridder.last_report is None     # untouched, nothing ran


@pytest.mark.parametrize("shape", [(8, 39, 1), (8, 40, 2), (320, 1), (8, 40)])
def test_degrid_refuses_an_out_of_another_shape(queue, rng, stack, shape):
    uvw = tracks(rng)
    grid = rng.normal(size=(1, N, N)) + 0j
    degridder = clgrid.Degridder(N, CELL, stack, device=queue)
    with pytest.raises(ValueError, match=r"out must be .* of shape \(8, 40, 1\), got shape"):
        degridder.degrid(grid, uvw, out=np.zeros(shape, np.complex64))


def test_degrid_out_with_channels_and_a_plan(queue, rng, stack):
    uvw = tracks(rng)[:, :10]
    freqs = np.array([1.0e8, 1.1e8, 1.2e8])
    grid = rng.normal(size=(2, N, N)) + 0j
    degridder = clgrid.Degridder(N, CELL, stack, device=queue, on_dropped="ignore")
    plan = degridder.plan(uvw * 299792458.0 / 1.2e8, freqs)
    with pytest.raises(ValueError, match=r"shape \(8, 10, 3, 2\)"):
        degridder.degrid(grid, plan, out=np.zeros((8, 10, 2, 2), np.complex64))
    with pytest.raises(ValueError, match=r"shape \(8, 10, 3, 2\)"):
        degridder.degrid(grid, uvw, freqs=freqs, out=np.zeros((8, 10, 3, 1), np.complex64))


def test_degrid_refuses_read_only_and_non_array_out(queue, rng, stack):
    uvw = tracks(rng)
    grid = rng.normal(size=(1, N, N)) + 0j
    degridder = clgrid.Degridder(N, CELL, stack, device=queue)
    frozen = np.zeros(uvw.shape[:-1] + (1,), np.complex64)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        degridder.degrid(grid, uvw, out=frozen)
    with pytest.raises(TypeError, match="out must be a numpy array or a pyopencl.array.Array"):
        degridder.degrid(grid, uvw, out=[[0j]] * 320)


def test_device_out_of_another_context_or_strided_is_refused(queue, rng, stack):
    uvw = tracks(rng).reshape(-1, 3)
    grid = rng.normal(size=(1, N, N)) + 0j
    degridder = clgrid.Degridder(N, CELL, stack, device=queue)
    other_context = cl.Context([queue.device])     # held: Intel's runtime drops a context nobody holds
    other = cl.CommandQueue(other_context)
    with pytest.raises(ValueError, match="out is a device array of another OpenCL context"):
        degridder.degrid(grid, uvw, out=cla.zeros(other, (320, 1), np.complex64))
    strided = cla.zeros(queue, (320, 2), np.complex64)[:, :1]
    with pytest.raises(ValueError, match="out must be a C-contiguous device array"):
        degridder.degrid(grid, uvw, out=strided)
    gridder = clgrid.Gridder(N, CELL, stack, device=queue)
    vis = rng.normal(size=(320, 1)) + 0j
    with pytest.raises(TypeError, match=r"out must be a complex64 array of shape \(1, 64, 64\), got dtype"):
        gridder.grid(uvw, vis, out=cla.zeros(queue, (1, N, N), np.complex128))
    with pytest.raises(ValueError, match="out is a device array of another OpenCL context"):
        gridder.grid(uvw, vis, out=cla.zeros(other, (1, N, N), np.complex64))


@pytest.mark.parametrize("layout", ["strided", "big-endian", "complex128"])
def test_degrid_writes_any_fitting_out_in_place(queue, rng, stack, layout):
    uvw = tracks(rng).reshape(-1, 3)
    grid = rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))
    degridder = clgrid.Degridder(N, CELL, stack, device=queue, precision="double")
    expected = degridder.degrid(grid, uvw)
    if layout == "strided":
        out = np.full((320, 4), np.nan, np.complex128)[:, ::2]
    elif layout == "big-endian":
        out = np.full((320, 2), np.nan, ">c16")
    else:
        out = np.full((320, 2), np.nan, np.complex128)
        degridder = clgrid.Degridder(N, CELL, stack, device=queue)    # single precision, written as complex128
        expected = degridder.degrid(grid, uvw)
    assert degridder.degrid(grid, uvw, out=out) is out
    np.testing.assert_array_equal(out, expected)


def test_gridder_out_strided_and_big_endian(queue, rng, stack):
    uvw, vis = random_visibilities(rng, 300, N, CELL, W_MAX)
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision="double", deterministic=True)
    expected = gridder.grid(uvw, vis)
    out = np.full((1, N, 2 * N), np.nan, np.complex128)[:, :, ::2]
    assert gridder.grid(uvw, vis, out=out) is out
    np.testing.assert_array_equal(out, expected)
    swapped = expected.astype(">c16")
    assert gridder.grid(uvw, vis, out=swapped, accumulate=True) is swapped
    np.testing.assert_array_equal(swapped, 2 * expected)
    with pytest.raises(TypeError, match=r"out must be a complex128 array of shape \(1, 64, 64\), got dtype "
                                        r"float64: results are not cast"):
        gridder.grid(uvw, vis, out=np.zeros((1, N, N)))


@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.complex128])
def test_vis2dirty_refuses_a_dirty_it_would_cast(rng, device_name, dtype):
    uvw, freq, vis, _, _ = wide_field(rng, 300, (1.0e8,), uv=800.0, w=100.0, weights=None)
    dirty = np.full((32, 32), 3, dtype)
    with pytest.raises(TypeError, match=r"dirty must be a float64 array of shape \(32, 32\), got dtype"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, dirty=dirty, epsilon=1e-6, device=device_name, **IMAGE)
    assert np.all(dirty == 3)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_dirty2vis_refuses_a_vis_it_would_cast(rng, device_name, dtype):
    uvw, freq, _, _, _ = wide_field(rng, 300, (1.0e8,), uv=800.0, w=100.0, weights=None)
    with pytest.raises(TypeError, match=r"vis must be a complex128 array of shape \(300, 1\), got dtype"):
        clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=rng.normal(size=(32, 32)), vis=np.zeros((300, 1), dtype),
                         epsilon=1e-6, pixsize_x=2e-3, pixsize_y=2e-3, device=device_name)


def test_wgridding_outputs_of_another_shape_refused_and_fitting_ones_written(rng, device_name):
    uvw, freq, vis, _, _ = wide_field(rng, 300, (1.0e8,), uv=800.0, w=100.0, weights=None)
    ducc0 = optional("ducc0.wgridder", "compare")
    with pytest.raises(ValueError, match=r"dirty must be a float64 array of shape \(32, 32\), got shape"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, dirty=np.zeros((32, 30)), epsilon=1e-6, device=device_name,
                         **IMAGE)
    dirty = np.full((32, 64), np.nan)[:, ::2]                  # strided: written through a copy
    assert clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, dirty=dirty, epsilon=1e-9, device=device_name,
                            **IMAGE) is dirty
    assert relative_error(dirty, ducc0.vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-12, **IMAGE)) < 1e-9
    image = rng.normal(size=(32, 32))
    d2v = dict(uvw=uvw, freq=freq, dirty=image, pixsize_x=2e-3, pixsize_y=2e-3)
    with pytest.raises(ValueError, match=r"vis must be a complex128 array of shape \(300, 1\), got shape"):
        clgrid.dirty2vis(vis=np.zeros((299, 1), complex), epsilon=1e-6, device=device_name, **d2v)
    out = np.full((300, 1), np.nan, ">c16")
    assert clgrid.dirty2vis(vis=out, epsilon=1e-9, device=device_name, **d2v) is out
    assert relative_error(out, ducc0.dirty2vis(epsilon=1e-12, **d2v)) < 1e-9


def _small_wgridder(rng, device_name, devices, tuning=None):
    """(uvw, freq, a `WGridder` of 300 rows × 2 channels into 32², epsilon 1e-9, with w)
    on one device, a list of the device twice, or two facets (``devices``), with
    ``tuning``'s overrides of the table."""
    from clgrid.imaging.wgridding import WGridder

    uvw, freq, _, _, _ = wide_field(rng, 300, (1.0e8,), uv=800.0, w=100.0, weights=None)
    freq = np.array([1.0e8, 1.2e8])
    kw = dict(device=[device_name, device_name]) if devices == "list" else dict(device=device_name)
    if devices == "facets":
        kw["facets"] = (2, 1)
    return uvw, freq, WGridder(uvw, freq, 32, 32, 2e-3, 2e-3, 1e-9, True, tuning=tuning, **kw)


@pytest.mark.parametrize("devices", ["one", "list", "facets"])
def test_wgridder_dirty2vis_writes_its_out(rng, device_name, devices, monkeypatch):
    """`WGridder.dirty2vis(out=)`: a poisoned C-contiguous out written directly (one
    device, a device list: the engines get it, or its rows, and the device's values come
    down into it, not into an array copied there after; facets through a copy), a
    strided or big-endian one through a copy; each the array returned, equal to the call
    without ``out`` and to ducc0 at 1e-12 to epsilon; a wrong dtype refused naming
    ``out``, before it is written.  (A direct write that fell back to a copy in the
    engine, the output made afresh and copied into ``out``, downloads nothing into
    ``out`` and copies into it: both are counted.)"""
    from clgrid.imaging import engine as engine_module

    given, downloads, copies = [], [], []
    real = engine_module.ImagingEngine.dirty2vis

    def spy(self, dirty, wgt=None, out=None, after=None):
        given.append(out)
        return real(self, dirty, wgt, out=out, after=after)

    def downloading(queue, buffer, host, *args, **kwargs):        # where the device's values come down
        downloads.append(host)
        return real_download(queue, buffer, host, *args, **kwargs)

    def copying(dst, src, *args, **kwargs):                         # the engine's host copies
        copies.append(dst)
        return real_copy(dst, src, *args, **kwargs)

    real_download, real_copy = engine_module.download, engine_module.parallel_copy
    monkeypatch.setattr(engine_module.ImagingEngine, "dirty2vis", spy)
    monkeypatch.setattr(engine_module, "download", downloading)
    monkeypatch.setattr(engine_module, "parallel_copy", copying)

    ducc0 = optional("ducc0.wgridder", "compare")
    uvw, freq, op = _small_wgridder(rng, device_name, devices)
    image = rng.normal(size=(32, 32))
    fresh = op.dirty2vis(image)
    assert relative_error(fresh, ducc0.dirty2vis(uvw=uvw, freq=freq, dirty=image, pixsize_x=2e-3, pixsize_y=2e-3,
                                                 epsilon=1e-12, do_wgridding=True)) < 1e-9
    for out in (np.full((300, 2), np.nan, complex), np.full((2, 300), np.nan, complex).T,
                np.full((300, 2), np.nan, ">c16")):
        given.clear(), downloads.clear(), copies.clear()
        assert op.dirty2vis(image, out=out) is out
        assert relative_error(out, fresh) < 1e-14
        direct = out.flags.c_contiguous and out.dtype.isnative and devices != "facets"
        assert given and all((g is not None and np.shares_memory(g, out)) == direct for g in given)
        # written directly: the first device's values come down into out itself (the others'
        # shares, into arrays of their own, are added there), and nothing is copied into it
        assert any(np.shares_memory(d, out) for d in downloads) == direct
        assert not any(np.shares_memory(c, out) for c in copies)
    wrong = np.full((300, 2), 7, np.complex64)
    with pytest.raises(TypeError, match=r"out must be a complex128 array of shape \(300, 2\)"):
        op.dirty2vis(image, out=wrong)
    assert np.all(wrong == 7)


@pytest.mark.parametrize("fft", ["host", "mapped"])
@pytest.mark.parametrize("devices", ["one", "list", "facets"])
def test_wgridder_vis2dirty_writes_its_out(rng, device_name, devices, fft, monkeypatch):
    """`WGridder.vis2dirty(out=)`: a poisoned C-contiguous out handed to the engines (one
    device, a device list: the first device's image, or the sum, is written there, not
    into an array copied there after, on the host FFT's path as on a device FFT's;
    facets through a copy), a strided or big-endian one through a copy; each the array
    returned, equal to the call without ``out`` and within epsilon of ducc0 at 1e-12; a
    wrong dtype or one sharing memory with ``vis`` refused naming ``out``, before it is
    written.  (The host FFT's image made afresh and copied into ``out``, as before
    pocl-worker-40, is an image's copy more per call: a Dask task's image into the
    client's box.)"""
    from clgrid.imaging import engine as engine_module

    given, copies = [], []
    real, real_copy = engine_module.ImagingEngine.vis2dirty, engine_module.parallel_copy

    def spy(self, vis, wgt=None, progress=None, out=None, after=None):
        given.append(out)
        return real(self, vis, wgt, progress, out=out, after=after)

    def copying(dst, src, *args, **kwargs):                         # the engine's host copies
        copies.append(dst)
        return real_copy(dst, src, *args, **kwargs)

    monkeypatch.setattr(engine_module.ImagingEngine, "vis2dirty", spy)
    monkeypatch.setattr(engine_module, "parallel_copy", copying)
    ducc0 = optional("ducc0.wgridder", "compare")
    uvw, freq, op = _small_wgridder(rng, device_name, devices, {"fft": fft})
    assert all(e.fft_mode == fft for e in op.engines)
    vis = rng.normal(size=(300, 2)) + 1j * rng.normal(size=(300, 2))
    fresh = op.vis2dirty(vis)
    assert relative_error(fresh, ducc0.vis2dirty(uvw=uvw, freq=freq, vis=vis, npix_x=32, npix_y=32, pixsize_x=2e-3,
                                                 pixsize_y=2e-3, epsilon=1e-12, do_wgridding=True)) < 1e-9
    for out in (np.full((32, 32), np.nan), np.full((32, 32), np.nan).T, np.full((32, 32), np.nan, ">f8")):
        given.clear(), copies.clear()
        assert op.vis2dirty(vis, out=out) is out
        assert relative_error(out, fresh) < 1e-14
        direct = out.flags.c_contiguous and out.dtype.isnative and devices != "facets"
        assert given and all((g is not None and np.shares_memory(g, out)) == direct for g in given)
        assert not any(np.shares_memory(c, out) for c in copies)
    for wrong, error, match in ((np.full((32, 32), 7, np.float32), TypeError, r"out must be a float64 array"),
                                (np.full((32, 31), 7.0), ValueError, r"out must be a float64 array of shape \(32, 32\)")):
        with pytest.raises(error, match=match):
            op.vis2dirty(vis, out=wrong)
        assert np.all(wrong == 7)
    shared = np.zeros(1200)
    with pytest.raises(ValueError, match=r"out"):
        op.vis2dirty(shared.view(complex).reshape(300, 2), out=shared[:1024].reshape(32, 32))


def test_check_output_is_the_one_check(queue):
    """The function each operator calls: its errors name the argument and the expectation."""
    from clgrid.operators.checks import check_output
    check_output(np.zeros((2, 3), ">f4"), "x", (2, 3), np.float32)
    assert check_output(np.zeros((2, 3), np.complex128), "x", (2, 3), (np.complex64, np.complex128)) \
        == np.complex128
    with pytest.raises(TypeError, match="x must be a numpy array \\(a float32 array of shape"):
        check_output(cla.zeros(queue, (2, 3), np.float32), "x", (2, 3), np.float32)   # no context: host only
    with pytest.raises(TypeError, match="got list"):
        check_output([1.0], "x", (1,), np.float32)


@pytest.mark.parametrize("devices", ["one", "list", "facets"])
def test_an_output_that_shares_memory_with_an_input_is_refused(rng, device_name, devices):
    """`WGridder.dirty2vis(out=)` and `clgrid.dirty2vis(vis=)` refuse, naming both, an
    output that shares memory with ``wgt`` (``wgt=out.real``, or a view of its rows
    reversed) or ``dirty`` (a view of its bytes), before it is written: a device list
    split by planes adds each device's share into the output after the one before it,
    each uploading its weights again, so the weights were read overwritten (predicted
    with the first device's share for weights: wrong by far).  Interleaved views of one
    block (every other row the output, the rows between the weights) share its bounds,
    not its memory: taken, and right (`numpy.shares_memory`, not `may_share_memory`)."""
    uvw, freq, _, wgt, _ = wide_field(rng, 300, (1.0e8, 1.2e8), uv=800.0, w=100.0)
    kw = dict(device=[device_name, device_name], split="planes") if devices == "list" else dict(device=device_name)
    if devices == "facets":
        kw["facets"] = (2, 1)
    op = clgrid.WGridder(uvw, freq, 32, 32, 2e-3, 2e-3, 1e-9, True, **kw)
    assert devices != "list" or (op.split == "planes" and len(op.engines) == 2)
    image = rng.normal(size=(32, 32))
    expected = op.dirty2vis(image, wgt)
    out = np.full(wgt.shape, np.nan, complex)
    out.real[...] = wgt
    for given, names in ((dict(wgt=out.real), "out shares memory with wgt"),
                         (dict(wgt=out.imag[::-1]), "out shares memory with wgt"),
                         (dict(dirty=out.reshape(-1).view(np.float64)[:1024].reshape(32, 32)),
                          "out shares memory with dirty")):
        args = {"dirty": image, "wgt": wgt, **given}
        before = out.copy()
        with pytest.raises(ValueError, match=names):
            op.dirty2vis(args["dirty"], args["wgt"], out=out)
        np.testing.assert_array_equal(out.view(np.float64), before.view(np.float64))     # not written
    d2v = dict(uvw=uvw, freq=freq, dirty=image, pixsize_x=2e-3, pixsize_y=2e-3, epsilon=1e-9, do_wgridding=True,
               **{k: v for k, v in kw.items() if k != "split"})               # (a list: planes, as "auto" takes)
    with pytest.raises(ValueError, match="vis shares memory with wgt"):
        clgrid.dirty2vis(vis=out, wgt=out.real, **d2v)
    block = np.full((2 * wgt.shape[0], wgt.shape[1]), np.nan, complex)
    rows, between = block[::2], block[1::2].real
    between[...] = wgt
    assert np.may_share_memory(rows, between) and not np.shares_memory(rows, between)
    assert op.dirty2vis(image, between, out=rows) is rows
    assert relative_error(rows, expected) < 1e-14
    assert relative_error(clgrid.dirty2vis(vis=rows, wgt=between, **d2v), expected) < 1e-9


def test_every_output_is_refused_where_it_shares_memory_with_an_input(queue, rng, stack, device_name):
    """The same rule for every other output (`clgrid.operators.checks.check_apart`),
    before any work: `clgrid.vis2dirty(dirty=)` over ``vis``, `Degridder.degrid(out=)`
    over the grid, `Gridder.grid(out=)` over the visibilities."""
    uvw, freq, vis, _, _ = wide_field(rng, 600, (1.0e8,), uv=800.0, w=100.0, weights=None)
    dirty = vis.view(np.float64).reshape(-1)[:1024].reshape(32, 32)
    with pytest.raises(ValueError, match="dirty shares memory with vis"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, dirty=dirty, epsilon=1e-6, device=device_name, **IMAGE)
    tracked = tracks(rng).reshape(-1, 3)
    grid = rng.normal(size=(1, N, N)) + 1j * rng.normal(size=(1, N, N))
    degridder = clgrid.Degridder(N, CELL, stack, device=queue, precision="double")
    with pytest.raises(ValueError, match="out shares memory with grid"):
        degridder.degrid(grid, tracked, out=grid.reshape(-1)[N:N + len(tracked)].reshape(-1, 1))
    assert degridder.last_report is None                               # nothing ran
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision="double")
    values = np.zeros((1, N, N), complex)
    with pytest.raises(ValueError, match="out shares memory with vis"):
        gridder.grid(tracked, values.reshape(-1)[:len(tracked)].reshape(-1, 1), out=values)


def test_a_device_out_over_a_device_input_is_refused(queue, rng, stack):
    """A device ``out`` whose bytes overlap a device input's in one buffer (a view of it,
    or a sub-buffer of the same parent) is refused by name before any work; one beside it
    in the same buffer, and any host input, pass (`check_apart`'s device rule)."""
    from clgrid.operators.checks import check_apart

    tracked = tracks(rng).reshape(-1, 3)
    n = len(tracked)
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision="double")
    size = N * N
    pool = cla.zeros(queue, size + 2 * n, np.complex128)
    out = pool[:size].reshape(1, N, N)
    item = np.dtype(np.complex128).itemsize

    def view(start):                                                    # (n, 1) from element ``start`` of the pool
        return cla.Array(queue, (n, 1), np.complex128, data=pool.base_data, offset=start * item)

    with pytest.raises(ValueError, match="out may share memory with vis"):
        gridder.grid(tracked, view(size - n // 2), out=out)
    assert gridder.last_report is None                                 # nothing ran
    check_apart(out, "out", {"vis": view(size), "weights": np.ones(n)})    # beside it: taken
    align = queue.device.mem_base_addr_align // 8                      # (bits) bytes a sub-buffer starts at
    whole = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 64 * align)
    first = cla.Array(queue, (4 * align,), np.uint8, data=whole.get_sub_region(0, 4 * align))
    second = cla.Array(queue, (4 * align,), np.uint8, data=whole.get_sub_region(2 * align, 4 * align))
    third = cla.Array(queue, (4 * align,), np.uint8, data=whole.get_sub_region(4 * align, 4 * align))
    with pytest.raises(ValueError, match="out may share memory with grid"):
        check_apart(first, "out", {"grid": second})
    check_apart(first, "out", {"grid": third, "flags": np.zeros(3)})
