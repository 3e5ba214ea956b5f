"""The moving window's chunks (clgrid/strategies/track_chunks.py): cut on the device, equal
to the host's cut to the entry, on random and real-array (MeerKAT) tracks, in either order."""

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.planning.baseline_order import baseline_length
from clgrid.tools.datasets import hour_angle_range, load_layout, simulate_uvw
from clgrid.planning.plan import make_plan
from clgrid.planning.host import SPEED_OF_LIGHT
from clgrid.strategies.moving_window import window_units
from clgrid.strategies.track_chunks import (Channel, LongestFirst, SupportAndSign, TrackChunker, WidestFirst,
                                            length_class)

from oclgrind_cases import run_case

N, CELL, W_MAX = 128, 2e-3, 300.0
DU = 1.0 / (N * CELL)
FREQS = np.array([1.40e8, 1.43e8, 1.47e8, 1.50e8])


@pytest.fixture(scope="module")
def stack():
    """Supports 3 to 12 growing with |w|."""
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=8,
                                           oversample=8, max_support=12)


def random_tracks(rng, nbaseline, ntime):
    """Arcs in metres whose |w| swings through the planes and whose w changes sign."""
    angle = rng.uniform(0, 2 * np.pi, (nbaseline, 1)) + np.linspace(0, 1.2, ntime)
    radius = rng.uniform(0.15, 1.0, (nbaseline, 1)) * 50 * DU
    w = W_MAX * rng.uniform(0.3, 1.0, (nbaseline, 1)) * np.sin(angle + rng.uniform(0, np.pi, (nbaseline, 1)))
    uvw = np.stack([radius * np.cos(angle), radius * np.sin(angle), w], axis=-1)
    return uvw * SPEED_OF_LIGHT / FREQS.max()


def meerkat_tracks(rng, nbaseline=60, ntime=50):
    """MeerKAT baselines over 4 hours, scaled to the test grid, in metres."""
    layout = load_layout("meerkat")
    subset = np.sort(rng.choice(layout.num_baselines, nbaseline, replace=False))
    uvw = simulate_uvw(layout, declination=-0.6, hour_angles=hour_angle_range(4.0, 300.0)[:ntime],
                       baseline_subset=subset)
    uvw[..., :2] *= 0.75 * (N // 2) * DU / np.abs(uvw[..., :2]).max()
    uvw[..., 2] *= 0.95 * W_MAX / np.abs(uvw[..., 2]).max()
    return uvw * SPEED_OF_LIGHT / FREQS.max()


def flags_for(rng, shape):
    """Random flags, one baseline flagged whole."""
    flags = rng.random(shape) < 0.1
    flags[1] = True
    return flags


def device_plan(queue, stack, uvw, flags, where="device"):
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", device=queue, on_dropped="ignore")
    plan = make_plan(queue, gridder.geometry, uvw, FREQS, flags, on_dropped="ignore", where=where)
    assert plan.planned_on == where
    return plan


def download(queue, buffer, shape):
    out = np.empty(shape, np.int32)
    if out.size:
        cl.enqueue_copy(queue, out, buffer)
    return out


def downloaded(queue, chunked):
    """(packed, source, chunk table) of a ChunkedPlan as host arrays."""
    return (download(queue, chunked.packed, (chunked.num_vis, 4)),
            download(queue, chunked.source, chunked.num_vis),
            download(queue, chunked.chunks, (chunked.num_chunks, 4)))


KEYS = {"support_and_sign": SupportAndSign, "channel": lambda stack: Channel()}
ORDERS = {"longest": LongestFirst, "widest": WidestFirst}
STRATEGIES = {"support_and_sign": LongestFirst, "channel": WidestFirst}   # the moving windows' pairs


@pytest.mark.parametrize("tracks", [random_tracks, meerkat_tracks])
@pytest.mark.parametrize("key", sorted(KEYS))
@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("max_length, wg", [(3, 1), pytest.param(17, 64, marks=pytest.mark.slow), pytest.param(17, 5, marks=pytest.mark.slow),
                                            pytest.param(4096, 64, marks=pytest.mark.slow)])
def test_device_chunks_equal_the_hosts(queue, rng, stack, tracks, key, order, max_length, wg):
    uvw = tracks(rng, 24, 40)
    plan = device_plan(queue, stack, uvw, flags_for(rng, uvw.shape[:-1] + (FREQS.size,)))
    chunker = TrackChunker(queue, stack, KEYS[key](stack), ORDERS[order], max_length, wg)
    positions = plan.host()
    order, chunks = chunker.on_host(positions, plan)
    device = chunker.on_device(plan)
    packed, source, table = downloaded(queue, device)
    np.testing.assert_array_equal(table, chunks)
    np.testing.assert_array_equal(source, positions.sample[order])
    np.testing.assert_array_equal(packed, positions.packed()[order])
    host = chunker.upload(positions, order, chunks)
    np.testing.assert_array_equal(device.supports, host.supports)
    np.testing.assert_array_equal(device.per_support, host.per_support)
    assert device.per_support.sum() == device.num_chunks == len(chunks)
    if max_length < 40:
        assert chunks[:, 1].max() == max_length, "runs long enough to be cut"


@pytest.mark.parametrize("key", sorted(KEYS))
def test_chunks_are_runs_of_one_key_in_the_samples_order(queue, rng, stack, key):
    uvw = random_tracks(rng, 16, 60)
    plan = device_plan(queue, stack, uvw, flags_for(rng, uvw.shape[:-1] + (FREQS.size,)))
    chunker = TrackChunker(queue, stack, KEYS[key](stack), STRATEGIES[key], 11, 64)
    positions = plan.host()
    order, chunks = chunker.on_host(positions, plan)
    sample = positions.sample[order]
    support, conj = positions.support[order], positions.conj[order]
    assert np.array_equal(np.sort(order), np.arange(positions.num_kept))
    assert np.array_equal(np.sort(chunks[:, 0]), np.r_[0, np.cumsum(chunks[np.argsort(chunks[:, 0]), 1])[:-1]])
    for first, count, widest, conjugated in chunks:
        run = slice(first, first + count)
        assert 1 <= count <= 11 and np.all(np.diff(sample[run]) > 0), "the samples' order: time, then channel"
        assert np.unique(sample[run] // baseline_length(plan)).size == 1
        assert widest == support[run].max() and conjugated == conj[first]
        if key == "channel":
            assert np.unique(sample[run] % FREQS.size).size == 1
        else:
            assert np.all(support[run] == widest) and np.all(conj[run] == conjugated)
    if key == "support_and_sign":
        baseline = sample // baseline_length(plan)
        crossing = [(np.unique(support[baseline == b]).size > 1, np.unique(conj[baseline == b]).size > 1)
                    for b in np.unique(baseline)]
        supports_crossed, signs_crossed = np.sum(crossing, axis=0)   # 12+ and 1+ in 300 seeds
        assert supports_crossed >= 8 and signs_crossed >= 1, "tracks must cross supports and the sign of w"


@pytest.mark.parametrize("key", sorted(KEYS))
def test_plans_made_on_the_host_are_cut_on_the_host_alike(queue, rng, stack, key):
    """`TrackChunker.arrange` by where the plan was made: the same buffers either way."""
    uvw = meerkat_tracks(rng, 20, 30)
    flags = flags_for(rng, uvw.shape[:-1] + (FREQS.size,))
    chunker = TrackChunker(queue, stack, KEYS[key](stack), STRATEGIES[key], 9, 16)
    made = [chunker.arrange(device_plan(queue, stack, uvw, flags, where)) for where in ("device", "host")]
    for a, b in zip(*(downloaded(queue, m) for m in made)):
        np.testing.assert_array_equal(a, b)


def test_one_baseline_and_single_time_steps(queue, rng, stack):
    """uvw with a single row axis is one baseline (the degridder's tracks by channel), and
    tracks of one time step are runs of one sample per channel."""
    for uvw in (random_tracks(rng, 6, 30).reshape(-1, 3), random_tracks(rng, 30, 1)):
        plan = device_plan(queue, stack, uvw, None)
        chunker = TrackChunker(queue, stack, Channel(), WidestFirst, 7, 64)
        order, chunks = chunker.on_host(plan.host(), plan)
        np.testing.assert_array_equal(downloaded(queue, chunker.on_device(plan))[2], chunks)


def test_length_classes_are_sixteenths_of_an_octave():
    count = np.arange(1, 1 << 16)
    classes = length_class(count)
    assert np.all(np.diff(classes) >= 0) and list(classes[:5]) == [0, 16, 24, 32, 36]
    assert np.unique(classes[15:]).size == 16 * 12       # 16 per octave from 16 on
    for c in np.unique(classes):
        members = count[classes == c]
        assert members.max() < (1 + 1 / 16) * members.min()


@pytest.mark.parametrize("key", sorted(KEYS))
def test_real_array_chunks_in_the_strategies_orders(queue, rng, stack, key):
    """MeerKAT tracks, cut as the moving windows cut them: the gridder's chunks longest
    first (a later chunk less than 1 + 1/16 times as long as any before it, within a length
    class in the runs' order), the degridder's widest support first (in the runs' order
    within a support), on the device as on the host."""
    uvw = meerkat_tracks(rng, 60, 50)
    plan = device_plan(queue, stack, uvw, flags_for(rng, uvw.shape[:-1] + (FREQS.size,)))
    chunker = TrackChunker(queue, stack, KEYS[key](stack), STRATEGIES[key], 64, 64)
    table = downloaded(queue, chunker.on_device(plan))[2]
    np.testing.assert_array_equal(table, chunker.on_host(plan.host(), plan)[1])
    first, count, support = table[:, 0], table[:, 1], table[:, 2]
    if STRATEGIES[key] is LongestFirst:
        assert np.unique(count).size > 20 and np.unique(support).size > 2, "chunks of many lengths and supports"
        assert np.all(count < (1 + 1 / 16) * np.minimum.accumulate(count)), "longest first"
        group = length_class(count)
        assert np.all(np.diff(group) <= 0)
        assert not np.all(np.diff(support) <= 0), "supports mixed: not widest first"
    else:
        group = support
        assert np.all(np.diff(support) <= 0), "widest first"
    same = np.diff(group) == 0
    assert np.all(np.diff(first)[same] > 0), "the runs' order within a class"


def test_work_list_has_every_tile_once_in_chunk_order(queue, rng, stack):
    uvw = random_tracks(rng, 12, 40)
    plan = device_plan(queue, stack, uvw, None)
    chunker = TrackChunker(queue, stack, SupportAndSign(stack), LongestFirst, 13, 64)
    chunked = chunker.on_device(plan)
    tiles = -(-window_units(2 * chunked.supports + 1, 2, 2) // 16)
    assert tiles.max() > 1, "windows of several tiles"
    work, rows = chunker.work_list(chunked, tiles)
    work = download(queue, work, (rows, 2))
    table = downloaded(queue, chunked)[2]
    tiles_of_chunk = dict(zip(chunked.supports, tiles))
    expected = [(c, t) for c in range(len(table)) for t in range(tiles_of_chunk[table[c, 2]])]
    assert rows == len(expected) and list(map(tuple, work)) == expected


def test_gridding_and_degridding_through_device_chunks_match_the_reference(queue, rng, stack):
    """MeerKAT tracks, four channels, flags, chunks cut short: both moving windows against the
    float64 reference, through plans made (and cut) on the device."""
    uvw = meerkat_tracks(rng, 30, 40)
    flags = flags_for(rng, uvw.shape[:-1] + (FREQS.size,))
    vis = rng.normal(size=flags.shape + (2,)) + 1j * rng.normal(size=flags.shape + (2,))
    gridder = clgrid.Gridder(N, CELL, stack, method="moving_window", device=queue, on_dropped="ignore",
                             tuning={"chunk_visibilities": 5})
    degridder = clgrid.Degridder(N, CELL, stack, method="moving_window", device=queue, on_dropped="ignore",
                                 tuning={"steps_per_group": 6})
    plan = gridder.plan(uvw, freqs=FREQS, flags=flags)
    assert plan.planned_on == "device"
    grid = gridder.grid(plan, vis)
    every_pol = np.repeat(flags[..., None], 2, axis=-1)
    ref = clgrid.reference.grid(uvw, vis, N, CELL, stack, freqs=FREQS, flags=every_pol, on_dropped="ignore")
    assert clgrid.reference.relative_error(grid, ref) <= 1e-5
    model = rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))
    out = degridder.degrid(model, plan)
    ref = clgrid.reference.degrid(model, uvw, N, CELL, stack, freqs=FREQS, flags=every_pol, on_dropped="ignore")
    assert clgrid.reference.relative_error(out, ref) <= 1e-5


@pytest.mark.oclgrind
@pytest.mark.parametrize("key, wg", [("support_and_sign", 8), ("channel", 1)])
def test_chunk_kernels_under_oclgrind(rng, tmp_path, key, wg):
    """No race, out-of-bounds access or unset read in the chunk kernels, and Oclgrind's cut
    equal to the host's."""
    out = tmp_path / "chunks.npz"
    run, used = run_case("oclgrind_chunks_case.py", out, "--seed", int(rng.integers(1 << 31)), "--key", key,
                        "--wg", wg)
    assert used == ("--data-races", "--uninitialized")
    assert run.returncode == 0, run.output[-3000:]
    assert run.diagnostics == [], "\n\n".join(run.diagnostics[:3])
    case = np.load(out)
    np.testing.assert_array_equal(case["device"], case["host"])
    assert [tuple(row) for row in case["work"]] == [(c, t) for c in range(len(case["host"]))
                                                     for t in range(case["tiles"][c])]
