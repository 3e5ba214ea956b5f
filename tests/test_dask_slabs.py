"""The w-plane split's bookkeeping (clgrid.dask.slabs), without a cluster: the geometry
reduced over chunks is the single operator's, each slab takes exactly the samples with a
tap on its planes (as the operators' planning places them, to the bit, points on the
slabs' edges included), every tap falls in exactly one slab, the slabs balance the work,
and the predictions go back to their samples.  The cluster runs are in tests/test_dask.py."""

import numpy as np
import pytest

pytest.importorskip("dask", reason="clgrid.dask needs dask (pip install 'clgrid[dask]')")

from clgrid.errors import NonFiniteResultError  # noqa: E402
from clgrid.dask import slabs as dask_slabs  # noqa: E402

from clgrid.planning.host import stacked_positions  # noqa: E402
from clgrid.imaging.geometry import abs_w_range as _abs_w_range, choose_geometry, imaging_work  # noqa: E402
from clgrid.imaging.wgridding import WGridder  # noqa: E402
from clgrid.planning.host import SPEED_OF_LIGHT  # noqa: E402
from conftest import wide_field  # noqa: E402

IMAGE = dict(npix_x=64, npix_y=48, pixsize_x=5e-3, pixsize_y=6e-3)
FREQS = np.array([1.0, 1.1, 1.3]) * SPEED_OF_LIGHT        # channel 0 at c: metres are wavelengths there


def options(**kw):
    """`clgrid.dask.wgridding`'s options as `geometry_of` reads them."""
    return dict(dict(epsilon=1e-5, do_wgridding=True, flip_u=False, flip_v=False, center_x=0.0, center_y=0.0,
                     sigma_min=1.1, sigma_max=2.6, precision="double", **IMAGE), **kw)


def on_edges(rng, uvw, geometry, rows, w_range):
    """``rows`` of uvw moved to w exactly where a first plane begins at channel 0 (and one
    step of rounding either side), for every plane whose w keeps the rows inside
    ``w_range`` at every channel: points on every slab edge, whatever the slabs."""
    g = geometry
    w = g.w_start + (np.arange(g.num_planes) + g.kernel.support / 2.0) * g.dw
    w = np.concatenate([w, np.nextafter(w, np.inf), np.nextafter(w, -np.inf)])
    w = w[(w > w_range[0]) & (w * (FREQS.max() / SPEED_OF_LIGHT) < w_range[1])]
    uvw[rows, 2] = rng.choice(w, len(rows)) * rng.choice([-1.0, 1.0], len(rows))
    return uvw


def geometry_for(uvw, mask, **kw):
    return choose_geometry(w_range=_abs_w_range(uvw, FREQS / SPEED_OF_LIGHT, None if mask is None else mask != 0),
                           num_kept=uvw.shape[0] * FREQS.size if mask is None else int(np.count_nonzero(mask)),
                           **{k: v for k, v in options(**kw).items() if k not in ("flip_u", "flip_v")})


def plan_first_planes(uvw, freq, mask, geometry, signs=(1.0, 1.0, 1.0)):
    """Each kept sample's first plane as the operator's planning finds it, by flat index."""
    host = stacked_positions(uvw, np.asarray(freq) / SPEED_OF_LIGHT, None if mask is None else mask != 0,
                             signs, geometry, True)
    out = np.full(len(uvw) * np.size(freq), -10**6)
    out[host["sample"]] = host["packed"][:, 3] & 0x7FFFFFFF
    return out


def test_geometry_reduced_over_chunks_is_the_single_operators(rng):
    uvw, _, _, _, mask = wide_field(rng, 2000, FREQS, weights=None, masked=0.1)
    chunks = np.array_split(np.arange(len(uvw)), 5)
    extents = [dask_slabs.extent(uvw[r], FREQS[1:], mask[r, 1:]) for r in chunks]      # channels 1: only
    extents.append(dask_slabs.extent(uvw[:0], FREQS, None))                           # an empty chunk
    geometry = dask_slabs.geometry_of(extents, options(center_x=0.01, flip_u=True))
    single = WGridder(uvw, FREQS[1:], mask=mask[:, 1:], epsilon=1e-5, do_wgridding=True, center_x=0.01,
                      flip_u=True, **IMAGE).geometry
    assert geometry == single
    assert dask_slabs.extent(uvw, FREQS, np.zeros_like(mask)) == (np.inf, -np.inf, 0)


@pytest.mark.parametrize("nslabs", [1, 3, 7])
def test_each_slab_takes_exactly_the_samples_with_a_tap_on_its_planes(rng, nslabs):
    uvw, _, _, _, mask = wide_field(rng, 2000, FREQS, weights=None, masked=0.1)
    freq = FREQS
    geometry = geometry_for(uvw, mask)
    w_range = _abs_w_range(uvw, freq / SPEED_OF_LIGHT, mask != 0)
    aw = np.abs(uvw[:, 2])
    inside = (aw * (freq.max() / SPEED_OF_LIGHT) < w_range[1]) & (aw > w_range[0])     # no sample an extreme
    uvw = on_edges(rng, uvw, geometry, rng.choice(np.flatnonzero(inside), 600, replace=False), w_range)
    assert geometry_for(uvw, mask) == geometry                                  # the same geometry
    counts = [dask_slabs.plane_counts(uvw[r], freq, mask[r], geometry) for r in np.array_split(np.arange(2000), 3)]
    bounds = dask_slabs.slab_bounds(counts, geometry, nslabs)
    assert bounds[0][0] == 0 and bounds[-1][1] == geometry.num_planes and len(bounds) == nslabs
    assert all(a[1] == b[0] for a, b in zip(bounds[:-1], bounds[1:]))         # a partition, in order

    vis = rng.normal(size=mask.shape) + 1j * rng.normal(size=mask.shape)
    wgt = rng.uniform(0.5, 1.0, mask.shape)
    out = dask_slabs.select(uvw, freq, vis, wgt, mask, geometry, bounds, indices=True)
    parts, taken = out[:nslabs], out[nslabs:]
    first = plan_first_planes(uvw, freq, mask, geometry)
    W = geometry.kernel.support
    kept = np.flatnonzero(mask.reshape(-1))
    edge = geometry.plane_positions(np.abs(uvw[:, 2])) - W / 2.0
    assert np.count_nonzero(edge == np.round(edge)) > 100      # exactly where a plane (and a slab) begins
    taps = np.zeros(first.size, int)
    for (lo, hi), part, flat in zip(bounds, parts, taken):
        expected = kept[(first[kept] < hi) & (first[kept] + W > lo)]
        np.testing.assert_array_equal(flat, expected)
        np.testing.assert_array_equal(part.values, vis.reshape(-1)[flat] * wgt.reshape(-1)[flat])
        assert len(part.uvw) == len(np.unique(flat // freq.size)) and part.chan.dtype == np.uint8
        # the slab's operator plans its points (wavelengths, freq = c) on the same planes
        points = dask_slabs.points_of([part])
        np.testing.assert_array_equal(plan_first_planes(points, [SPEED_OF_LIGHT], None, geometry), first[flat])
        taps[flat] += np.clip(np.minimum(first[flat] + W, hi) - np.maximum(first[flat], lo), 0, None)
    assert np.all(taps[kept] == W)                     # every tap of every kept sample in one slab
    assert not np.any(taps[np.flatnonzero(mask.reshape(-1) == 0)])


def test_slabs_balance_the_work_and_trailing_ones_are_empty(rng):
    uvw, _, _, _, mask = wide_field(rng, 500, FREQS, weights=None, masked=0.1)
    g = geometry_for(uvw, mask)
    W, P = g.kernel.support, g.num_planes
    crowded = np.zeros(P, np.int64)
    crowded[0] = 10**6                                     # every sample's taps on planes 0 .. W-1
    bounds = dask_slabs.slab_bounds([crowded], g, P + 5)
    assert bounds == [(k, k + 1) for k in range(W - 1)] + [(W - 1, P)] + [(P, P)] * (P + 5 - W)
    counts = rng.integers(0, 10**5, P)
    taps = np.convolve(counts, np.ones(W, np.int64))[:P]
    work = imaging_work(taps * float(W) ** 2, taps > 0, g.nu, g.nv)
    low = np.where(np.arange(P) < P // 2, counts, 0)        # two chunks' histograms, summed
    for nslabs in (2, 3, 5):
        bounds = dask_slabs.slab_bounds([low, counts - low], g, nslabs)
        largest = max(work[lo:hi].sum() for lo, hi in bounds)
        assert largest <= work.sum() / nslabs + work.max()             # within a plane of an even cut
    assert dask_slabs.slab_bounds([np.zeros(P, np.int64)], g, 3) == [(0, 0)] * 3


def test_predictions_go_back_to_their_samples_weighted(rng):
    shape, dtype = (50, 3), np.complex64
    mask = rng.random(shape) > 0.2
    wgt = rng.uniform(0.5, 1.0, shape).astype(np.float32)
    wgt[~mask] = np.nan                                   # masked: never read
    kept = np.flatnonzero(mask.reshape(-1))
    taken = [kept[: len(kept) // 2 + 5], kept[len(kept) // 2:]]               # overlapping, as slabs do
    shares = [(rng.normal(size=len(t)) + 1j * rng.normal(size=len(t))).astype(dtype) for t in taken]
    out = dask_slabs.assemble(shape, taken, shares, wgt, mask, dtype)
    expected = np.zeros(shape[0] * shape[1], dtype)
    for t, s in zip(taken, shares):
        np.add.at(expected, t, s)
    expected[kept] *= wgt.reshape(-1)[kept]
    np.testing.assert_array_equal(out.reshape(-1), expected)
    assert out.dtype == dtype and not np.any(out[~mask])
    parts = [np.zeros(n) for n in (3, 0, 4)]                # anything with a length: Parts in use
    assert [len(p) for p in dask_slabs.split(np.arange(7), parts)] == [3, 0, 4]


def test_predictions_assembled_on_threads_have_one_threads_bits(rng):
    """`assemble` on several host threads (each its own range of the chunk's samples):
    the same bits as on one, and as adding each slab's share at its samples in slab order
    then weighting; a slab taking every sample (None) and no weights too; a non-finite
    weight where kept refused."""
    shape, dtype = (30_000, 4), np.complex64
    n = shape[0] * shape[1]
    mask = rng.random(shape) > 0.1
    wgt = rng.uniform(0.5, 1.0, shape).astype(np.float32)
    wgt[~mask] = np.nan                                   # masked: never read
    kept = np.flatnonzero(mask.reshape(-1))
    taken = [np.sort(rng.choice(kept, len(kept) * 2 // 3, replace=False)).astype(np.int32),
             np.sort(rng.choice(kept, len(kept) // 2, replace=False)).astype(np.int32)]
    shares = [(rng.normal(size=len(t)) + 1j * rng.normal(size=len(t))).astype(dtype) for t in taken]
    expected = np.zeros(n, dtype)
    for t, sh in zip(taken, shares):
        expected[t] += sh
    expected[kept] *= wgt.reshape(-1)[kept]
    one = dask_slabs.assemble(shape, taken, shares, wgt, mask, dtype, threads=1)
    many = dask_slabs.assemble(shape, taken, shares, wgt, mask, dtype, threads=5)
    np.testing.assert_array_equal(one.reshape(-1).view(np.uint64), expected.view(np.uint64))
    np.testing.assert_array_equal(many.view(np.uint64), one.view(np.uint64))
    every = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dtype)
    whole = dask_slabs.assemble(shape, [None, taken[1]], [every, shares[1]], None, None, dtype, threads=3)
    plain = every.copy()
    plain[taken[1]] += shares[1]
    np.testing.assert_array_equal(whole.reshape(-1).view(np.uint64), plain.view(np.uint64))
    wgt[np.unravel_index(kept[7], shape)] = np.inf
    with pytest.raises(ValueError, match=r"wgt has NaN or infinite entries where not masked \(1\)"):
        dask_slabs.assemble(shape, taken, shares, wgt, mask, dtype, threads=4)


def _assembled_simply(n, taken, shares, wgt, kept, dtype) -> np.ndarray:
    """`assemble`'s contract, one whole array at a time: the shares added at their samples
    in slab order (the first whole one copied), then the kept samples weighted."""
    out = None
    for flat, share in zip(taken, shares):
        if flat is None:
            out = share.copy() if out is None else out + share
            continue
        out = np.zeros(n, dtype) if out is None else out
        out[flat] += share
    out = np.zeros(n, dtype) if out is None else out
    if wgt is not None:
        w = wgt.reshape(-1)
        if kept is None:
            out *= w.astype(out.real.dtype)
        else:
            out[kept] *= w[kept].astype(out.real.dtype)
    return out


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_predictions_assembled_in_blocks_have_the_bits_of_one_pass(rng, dtype):
    """`assemble` walks each thread's range in blocks (each finished in cache before the
    next): for blocks of any size (odd sizes whose edges fall inside every selection,
    the whole range: 0), on one thread or several, random ascending selections,
    a slab taking the chunk whole first or none, with and without weights and a mask,
    the same bits as the shares added and weighted one whole array at a time; a
    non-finite value counted over all blocks is reported with its count."""
    shape = (8_200, 8)                      # (at least 2**16 samples: on threads)
    n = shape[0] * shape[1]
    for case in range(6):
        masked, weighted, whole = case % 3 == 0, case % 2 == 0, case >= 3 and case % 3 != 0
        mask = (rng.random(shape) > 0.15).astype(np.uint8) if masked else None
        kept = np.flatnonzero(mask.reshape(-1)) if masked else np.arange(n)
        wgt = rng.uniform(0.5, 2.0, shape) if weighted else None             # float64: rounded per sample
        if weighted and masked:
            wgt[mask == 0] = np.nan                                           # masked: never read
        taken = [np.sort(rng.choice(kept, int(len(kept) * f), replace=False)).astype(np.intp)
                 for f in (0.6, 0.02, 0.3)]
        if whole:
            taken[0] = None
        shares = [(rng.normal(size=n if t is None else len(t)) + 1j * rng.normal(size=n if t is None else len(t)))
                  .astype(dtype) for t in taken]
        expected = _assembled_simply(n, taken, shares, wgt, kept if masked else None, dtype)
        for threads, block in ((1, None), (1, 7 if case == 0 else 501), (3, 1021), (4, 4096), (5, 0)):
            got = dask_slabs.assemble(shape, taken, shares, wgt, mask, dtype, threads, block=block)
            np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), expected.view(np.uint8),
                                          err_msg=f"case {case}, threads {threads}, block {block}")
    bad = [s.copy() for s in shares]
    bad[-1][[3, len(bad[-1]) // 2, -1]] = np.inf
    with pytest.raises(NonFiniteResultError, match=r"^3 values"):
        dask_slabs.assemble(shape, taken, bad, None, None, dtype, 3, block=100)


@pytest.mark.parametrize("block", [0, 333])
def test_sums_and_weights_that_overflow_are_counted_once_per_sample(rng, block):
    """The shares are finite (their operators refuse others): `assemble` counts what its
    sums and weights make non-finite, each sample once however many later shares add to
    it (an inf stays inf, or becomes NaN), whether the shares meet only at picks (where
    only the picks are looked at again), a whole share is added to another, or weights
    overflow a finite sum."""
    shape, dtype = (70_000, 1), np.complex64
    n = shape[0]
    big = np.float32(3e38)
    whole = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dtype)
    picks = [np.sort(rng.choice(n, n // 10, replace=False)) for _ in range(2)]
    common = np.intersect1d(*picks)[:4]                    # samples both later slabs add to
    shares = [p.astype(np.float32).astype(dtype) for p in picks]
    whole[common] = big
    for p, s in zip(picks, shares):
        s[np.searchsorted(p, common)] = big                # 3e38 + 3e38: inf, then inf + 3e38: inf
    alone = np.setdiff1d(picks[0], picks[1])[:2]           # samples only the first later slab adds to
    whole[alone] = big + 1j * big
    shares[0][np.searchsorted(picks[0], alone)] = big * 1j     # the imaginary part overflows
    with pytest.raises(NonFiniteResultError, match=r"^6 values"):
        dask_slabs.assemble(shape, [None] + picks, [whole] + shares, None, None, dtype, 4, block=block)
    with pytest.raises(NonFiniteResultError, match=r"^6 values"):       # a whole share added: every value
        dask_slabs.assemble(shape, [None, None] + picks, [np.zeros(n, dtype), whole] + shares, None, None, dtype,
                            4, block=block)
    finite = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dtype)
    finite[:5] = 1e38
    wgt = np.ones(shape, np.float32)
    wgt[:7] = 10                                            # the first 5 overflow, the next 2 do not
    with pytest.raises(NonFiniteResultError, match=r"^5 values"):
        dask_slabs.assemble(shape, [None], [finite], wgt, None, dtype, 4, block=block)
    ok = dask_slabs.assemble(shape, [None] + picks, [finite] + [s * 0 for s in shares], None, None, dtype, 4,
                             block=block)
    np.testing.assert_array_equal(ok.reshape(-1), finite)


def test_values_are_picked_on_threads_with_the_bits_of_one_pass(rng):
    """`values_at` on threads: the values (selected or all, weighted or not, float64
    weights rounded as astype would) have the bits of numpy's one pass, into ``out`` or a
    new array, and the non-finite ones of vis and of wgt are counted over every share."""
    n = 50_003
    vis = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(np.complex64)
    wgt = rng.uniform(0.1, 2.0, n)                                 # float64: rounded to float32
    flat = np.flatnonzero(rng.random(n) < 0.7).astype(np.int32)
    for taken in (flat, None):
        picked = vis if taken is None else vis[taken]
        for w, expected in ((None, picked), (wgt, picked * (wgt if taken is None else wgt[taken]).astype(np.float32))):
            for threads in (1, 3):
                out = np.full(len(picked), np.nan, np.complex64)
                got = dask_slabs.values_at(vis, w, taken, threads, out=out)
                assert got is out
                np.testing.assert_array_equal(got.view(np.uint64), expected.view(np.uint64))
                new = dask_slabs.values_at(vis, w, taken, threads)
                np.testing.assert_array_equal(new.view(np.uint64), expected.view(np.uint64))
    bad = vis.copy()
    bad[[3, flat[-1], n - 1]] = [np.nan, np.inf, np.nan]               # n - 1: outside some selections
    every, selected = np.count_nonzero(~np.isfinite(bad)), np.count_nonzero(~np.isfinite(bad[flat]))
    with pytest.raises(ValueError, match=rf"vis has NaN or infinite entries where not masked \({every}\)"):
        dask_slabs.values_at(bad, None, None, 3)
    with pytest.raises(ValueError, match=rf"vis has NaN or infinite entries where not masked \({selected}\)"):
        dask_slabs.values_at(bad, None, flat, 2)
    w = wgt.copy()
    w[flat[::1000]] = np.inf
    with pytest.raises(ValueError, match=rf"wgt has NaN or infinite entries where not masked \({len(flat[::1000])}\)"):
        dask_slabs.values_at(vis, w, flat, 3, out=np.empty(len(flat), np.complex64))


def test_bad_values_are_refused_naming_them(rng):
    uvw, _, _, _, mask = wide_field(rng, 40, FREQS, weights=None, masked=0.1)
    g = choose_geometry(w_range=_abs_w_range(uvw, FREQS / SPEED_OF_LIGHT, None), num_kept=uvw.shape[0] * 3,
                        **{k: v for k, v in options().items() if k not in ("flip_u", "flip_v")})
    vis = np.ones(mask.shape, np.complex64)
    vis[3, 1] = np.nan
    bounds = [(0, g.num_planes)]
    with pytest.raises(ValueError, match=r"vis has NaN or infinite entries where not masked \(1\)"):
        dask_slabs.select(uvw, FREQS, vis, None, None, g, bounds)
    mask[3, 1] = 0
    dask_slabs.select(uvw, FREQS, vis, None, mask, g, bounds)                   # masked: fine
    with pytest.raises(ValueError, match="wgt has NaN"):
        dask_slabs.select(uvw, FREQS, np.ones(mask.shape, np.complex64), np.full(mask.shape, np.inf), None, g, bounds)
    uvw[5, 0] = np.nan
    with pytest.raises(ValueError, match="uvw has NaN"):
        dask_slabs.select(uvw, FREQS, np.ones(mask.shape, np.complex64), None, None, g, bounds)


@pytest.mark.parametrize("cap", [1, 700, "three chunks", 10**9])
def test_chunk_groups_count_what_select_takes_and_stay_within_the_cap(rng, cap):
    """A slab's chunks in groups for its tasks: the sizes from the chunks' histograms are
    `select`'s parts' lengths exactly; the groups partition the chunks in order, each
    within ``cap`` unless it is one chunk's samples, and each as large as the cap allows
    (the next chunk did not fit); an empty slab takes nothing, in one group."""
    uvw, _, _, _, mask = wide_field(rng, 2000, FREQS, weights=None, masked=0.1)
    g = geometry_for(uvw, mask)
    rows = np.array_split(np.arange(len(uvw)), 8)
    counts = [dask_slabs.plane_counts(uvw[r], FREQS, mask[r], g) for r in rows]
    bounds = dask_slabs.slab_bounds(counts, g, 3) + [(g.num_planes, g.num_planes)]
    sizes = [[len(p) for p in dask_slabs.select(uvw[r], FREQS, None, None, mask[r], g, bounds)] for r in rows]
    assert [dask_slabs.slab_sizes(c, g, bounds) for c in counts] == sizes
    if cap == "three chunks":      # of slab 0, whatever this draw of the tracks puts there
        cap = 3 * max(chunk[0] for chunk in sizes)
        assert sum(chunk[0] for chunk in sizes) > cap
        multiple = True
    else:
        multiple = False
    groups = dask_slabs.chunk_groups(counts, g, bounds, cap)
    for s, slab_groups in enumerate(groups):
        taken = [chunk[s] for chunk in sizes]
        edges = [a for a, _ in slab_groups] + [slab_groups[-1][1]]
        assert edges[0] == 0 and edges[-1] == len(rows) and all(np.diff(edges) > 0)
        assert all(sum(taken[a:b]) <= cap or np.count_nonzero(taken[a:b]) == 1 for a, b in slab_groups)
        assert all(sum(taken[a:b]) + taken[b] > cap for a, b in slab_groups[:-1])
    assert sizes[0][-1] == 0 and groups[-1] == [(0, len(rows))]
    assert len(groups[0]) == {1: 8, 10**9: 1}.get(cap, len(groups[0]))
    if multiple:
        assert len(groups[0]) > 1 and any(b - a > 1 for a, b in groups[0])       # several chunks in a group


@pytest.mark.parametrize("masked", ["none", "all kept", "some"])
def test_a_slab_takes_a_chunk_whole_where_it_holds_most_of_its_samples(rng, masked):
    """`chunk_selection` keeps None (the chunk whole: values copied, not picked) for a
    slab with at least SPARSE_SHARE of a chunk whose every sample is kept, and the flat
    indices otherwise; `slab_sizes` with the chunk's total counts exactly that, so the
    shared-memory places and the groups match what the chunks' tasks send; a masked chunk
    is never taken whole.  Here the first slab takes most but not all samples, so a whole
    chunk holds samples without a tap on its planes (its operator drops them)."""
    from clgrid.dask.chunks import Chunk
    from clgrid.dask.tasks import chunk_selection
    from clgrid.imaging.engine import SPARSE_SHARE

    uvw, _, _, _, mask = wide_field(rng, 2000, FREQS, weights=None, masked=0.1)
    uvw[:, 2] *= 4 * rng.random(len(uvw)) ** 3      # most samples at small |w|, some far out
    mask = {"none": None, "all kept": np.ones_like(mask), "some": mask}[masked]
    g = geometry_for(uvw, mask)
    rows = np.array_split(np.arange(len(uvw)), 4)
    counts = [dask_slabs.plane_counts(uvw[r], FREQS, None if mask is None else mask[r], g) for r in rows]
    bounds = dask_slabs.slab_bounds(counts, g, 2)
    wholes = 0
    for i, (r, c) in enumerate(zip(rows, counts)):
        total = len(r) * FREQS.size
        m = None if mask is None else mask[r]
        chunk = Chunk(i, (int(r[0]), int(r[-1]) + 1), (0, FREQS.size))
        taken = chunk_selection(chunk, uvw[r], FREQS, m, g, bounds)
        exact = [len(p) for p in dask_slabs.select(uvw[r], FREQS, None, None, m, g, bounds)]
        sizes = dask_slabs.slab_sizes(c, g, bounds, total)
        for flat, n, size in zip(taken, exact, sizes):
            if flat is None:
                wholes += 1
                assert masked != "some" and size == total and SPARSE_SHARE * total <= n < total
            else:
                assert len(flat) == n == size and (masked == "some" or n < SPARSE_SHARE * total)
    assert wholes == (0 if masked == "some" else len(rows))


def test_dask_is_told_what_a_slabs_points_weigh(rng):
    """`dask.sizeof` of a chunk's `Part` s and of a slab task's kept points is their arrays'
    bytes, not an object header's: Dask's scheduler weighs moving a slab task by it (told a
    few bytes, its work stealing ran slab tasks away from their points, where the slab's
    operator was built again)."""
    from dask.sizeof import sizeof
    from clgrid.dask.tasks import SlabPoints

    uvw, freq, vis, wgt, mask = wide_field(rng, 400, np.array([1.0e8, 1.1e8, 1.2e8]), precision="single", masked=0.2)
    flat = [np.flatnonzero(mask.reshape(-1))[::2], np.flatnonzero(mask.reshape(-1))[1::3]]
    parts = dask_slabs.parts_at(uvw, freq, flat, [dask_slabs.values_at(vis, wgt, f) for f in flat])
    arrays = [sum(a.nbytes for a in (p.uvw, p.row, p.chan, p.scale, p.values)) for p in parts]
    assert all(sizeof(p) >= n > 1000 for p, n in zip(parts, arrays))
    assert sizeof(SlabPoints(parts)) >= sum(arrays)
    assert sizeof(SlabPoints(parts)) < sum(arrays) + 4096


@pytest.mark.parametrize("masked", [None, 0.3])
def test_threads_and_whole_chunks_give_the_same_selection_parts_and_points(rng, masked):
    """The first pass on several host threads (a share of rows each: counts, selections,
    the slab's points) gives what one thread gives, index for index and bit for bit; a
    chunk taken whole is the `Part` that every flat index makes; a NaN uvw row is refused
    where kept (counting its samples) and ignored where masked."""
    freq = FREQS
    uvw, _, _, _, mask = wide_field(rng, 3001, freq, weights=None, masked=masked or 0.0)
    mask = None if masked is None else mask
    geometry = geometry_for(uvw, mask if mask is not None else np.ones((len(uvw), freq.size), bool))
    counts = dask_slabs.plane_counts(uvw, freq, mask, geometry)
    np.testing.assert_array_equal(dask_slabs.plane_counts(uvw, freq, mask, geometry, threads=3), counts)
    bounds = dask_slabs.slab_bounds([counts], geometry, 4)
    one = dask_slabs.selection(uvw, freq, mask, geometry, bounds)
    three = dask_slabs.selection(uvw, freq, mask, geometry, bounds, threads=3)
    assert all(a.dtype == b.dtype == np.intp and np.array_equal(a, b) for a, b in zip(one, three))
    parts = dask_slabs.parts_at(uvw, freq, one)
    np.testing.assert_array_equal(dask_slabs.points_of(parts, threads=3), dask_slabs.points_of(parts))
    every = np.arange(uvw.shape[0] * freq.size)
    whole, = dask_slabs.parts_at(uvw, freq, [None])
    picked = dask_slabs._part(uvw, freq / SPEED_OF_LIGHT, every, None)
    for name in ("uvw", "row", "chan", "scale"):
        a, b = getattr(whole, name), getattr(picked, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert whole.whole and not picked.whole
    for threads in (1, 3):                      # a whole chunk's points by rows: the same products
        np.testing.assert_array_equal(dask_slabs.points_of([parts[0], whole, parts[1]], threads),
                                      np.concatenate([parts[0].points(), picked.points(), parts[1].points()]))
    bad = uvw.copy()
    bad[17, 1] = np.nan
    if mask is None:
        with pytest.raises(ValueError, match=rf"uvw has NaN or infinite entries where not masked \({freq.size} samples\)"):
            dask_slabs.selection(bad, freq, mask, geometry, bounds, threads=3)
    else:
        quiet = mask.copy()
        quiet[17] = False
        dask_slabs.selection(bad, freq, quiet, geometry, bounds, threads=3)
        loud = mask.copy()
        loud[17, :2] = True
        with pytest.raises(ValueError, match=r"where not masked \(\d+ samples\)"):
            dask_slabs.plane_counts(bad, freq, loud, geometry, threads=3)


def test_recycled_arrays_come_back_when_dropped_and_never_while_held(monkeypatch):
    """`clgrid.dask.recycled`: an array dropped (every view of it) gives its buffer back,
    and the next array of its size is made over it; one still held, or seen through a
    view, never is; at most ``KEPT_FREE`` free buffers a size; small arrays and
    `forget_recycled` as said."""
    from clgrid.dask import recycled

    monkeypatch.setattr(recycled, "RECYCLED_BYTES", 1024)
    recycled.forget_recycled()
    try:
        small = recycled.recycled_empty(10, np.complex64)
        assert not isinstance(small.base, recycled.LentBlock) and recycled.recycled_counts()["made"] == 0
        a = recycled.recycled_empty((200, 3), np.complex64)
        a[...] = np.nan
        address = a.ctypes.data
        view = a[5:]
        del a
        assert recycled.free_buffers() == {}                     # (the view holds it)
        held = recycled.recycled_empty((200, 3), np.complex64)
        assert held.ctypes.data != address
        del view
        assert recycled.free_buffers() == {4800: 1}
        again = recycled.recycled_empty((600,), np.complex64)     # any shape of that size
        assert again.ctypes.data == address and again.shape == (600,) and again.flags.c_contiguous
        assert not np.shares_memory(again, held)
        assert recycled.recycled_counts() == {"made": 2, "reused": 1}
        many = [recycled.recycled_empty(4800, np.uint8) for _ in range(recycled.KEPT_FREE + 2)]
        del many, again, held
        assert recycled.free_buffers() == {4800: recycled.KEPT_FREE}
        kept = recycled.recycled_empty(4800, np.uint8)
        recycled.forget_recycled()
        del kept
        assert recycled.free_buffers() == {} and recycled.recycled_counts() == {"made": 0, "reused": 0}
    finally:
        recycled.forget_recycled()


@pytest.mark.parametrize("threads", [1, 3])
def test_predictions_assembled_over_a_recycled_buffer_write_every_sample(rng, monkeypatch, threads):
    """`assemble`'s output over a recycled buffer (an earlier chunk's, here all NaN): each
    of its samples written, whether the first slab takes the chunk whole (copied), takes
    only picks (zeros first), or no slab gives anything; the buffer is the earlier one."""
    from clgrid.dask import recycled

    monkeypatch.setattr(recycled, "RECYCLED_BYTES", 1024)
    recycled.forget_recycled()
    shape, dtype = (2000, 4), np.complex64
    n = shape[0] * shape[1]
    picks = np.sort(rng.choice(n, n // 50, replace=False)).astype(np.intp)
    whole = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(dtype)
    share = (rng.normal(size=len(picks)) + 1j * rng.normal(size=len(picks))).astype(dtype)
    try:
        for taken, shares in (([None, picks], [whole, share]), ([picks], [share]), ([np.zeros(0, np.intp)],
                                                                                   [np.zeros(0, dtype)])):
            poisoned = recycled.recycled_empty(shape, dtype)
            poisoned[...] = np.nan
            address = poisoned.ctypes.data
            del poisoned
            out = dask_slabs.assemble(shape, taken, shares, None, None, dtype, threads)
            assert out.ctypes.data == address
            expected = _assembled_simply(n, taken, shares, None, None, dtype)
            np.testing.assert_array_equal(out.reshape(-1).view(np.uint64), expected.view(np.uint64))
            del out
    finally:
        recycled.forget_recycled()


_COLLECTED_UNDER_THE_LOCK = """
import gc
from clgrid.dask import recycled

real, under = recycled._give_back, []
def spy(buffer, generation):
    under.append(True)
    real(buffer, generation)
recycled._give_back = spy

def cycle():
    c = [recycled.recycled_empty(recycled.RECYCLED_BYTES, "u1")]
    c.append(c)
    return c

# a recycled array in a reference cycle (an exception's traceback through the frame that
# held it, say), old enough that only the collection of the next generation frees it,
# which the allocations inside free_buffers' locked block set off
gc.collect()
gc.disable()
keep = cycle()
gc.collect(0)
del keep
gc.set_threshold(1, 1, 100000)
gc.enable()
recycled.free_buffers()
gc.set_threshold(700, 10, 10)
gc.collect()
assert under and recycled.free_buffers() == {recycled.RECYCLED_BYTES: 1}, (under, recycled.free_buffers())
print("ended")
"""


def test_a_recycled_array_collected_inside_the_pools_lock_comes_back_without_a_deadlock():
    """A recycled array freed by the cyclic collector gives its buffer back from wherever
    the collection ran, which may be inside the pool's own locked block (an allocation
    there sets it off): the lock is reentrant (as `clgrid.dask.delivery`'s and the pinned
    pools'), so the process goes on and the buffer is back."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run([sys.executable, "-c", _COLLECTED_UNDER_THE_LOCK], capture_output=True, text=True,
                              timeout=20, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("the pool's lock, taken again by the collected array's give-back on its own thread, never ended")
    assert done.returncode == 0 and "ended" in done.stdout, done.stderr
