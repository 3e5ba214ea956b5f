"""Imaging accurate to ``epsilon``: `vis2dirty` / `dirty2vis` with ducc0.wgridder's keywords,
meaning and normalisation, and `WGridder`, the operator behind them kept for major cycles.

Conventions (measured against ducc0 0.42 with a direct sum; tests/test_vis2dirty.py holds
them).  With ``u, v, w = uvw * freq / c`` (wavelengths) after the flips (``flip_u`` negates
u, ...), pixel ``(ix, iy)`` of the ``(npix_x, npix_y)`` image is at

    x = (ix - npix_x // 2) * pixsize_x + s_u * center_x,   y = (iy - npix_y // 2) * pixsize_y + s_v * center_y

with ``s_u = -1`` when ``flip_u`` (so a flip mirrors the image about its centre, centre
offset included), ``n = sqrt(1 - x^2 - y^2)``, and

    vis2dirty:  dirty[ix, iy] = Re sum_k wgt_k vis_k exp(+2 pi i (u_k x + v_k y - w_k (n - 1))) / n
    dirty2vis:  vis_k = wgt_k sum_{ix, iy} dirty[ix, iy] exp(-2 pi i (u_k x + v_k y - w_k (n - 1))) / n

(the adjoint pair).  The ``/ n`` is there with ``divide_by_n`` and ``do_wgridding``; without
``do_wgridding`` the w term and ``/ n`` are both absent.  The image is not divided by the
sum of weights.  x goes with u and the first axis; y with v and the second.  Masked
(mask == 0) or zero-weight visibilities do not count; dirty2vis returns 0 for them.

How: the kernel (clgrid.sources.accuracy) spreads each visibility over W x W cells of a grid
padded by sigma, and with w over W of a stack of w-planes spaced so that the image's
range of ``n - 1`` is oversampled by sigma too (w-gridding, "improved w-stacking": Ye et
al. 2021, Arras et al. 2021).  Each plane is transformed, multiplied by its w phase and
summed; the sum is divided by the kernel's Fourier transform in u, v and w.  Points
with w < 0 are moved to (-u, -v, -w) and conjugated first (the image is real), which
halves the range of w the planes cover.

The points are planned once per operator, on the device (`clgrid.planning.stacking`: first
cells, offsets and plane in float64, sorted by plane and by bin or row).  Where the
work runs is the tuning table's ``[wgridding]`` choice (clgrid/platforms/*.toml, or
``tuning=``): ``spread = "bins"`` (a work-group per bin of cells and piece of its points,
accumulating in local memory: GPUs), ``"atomic"`` (a work-item per visibility, float
atomic adds) or ``"rows"`` (a work-item per grid row, no atomics, kernel values computed
once per operator: CPUs); ``fft = "host"`` (scipy.fft in place on the grid mapped to the host,
the crop as views, per-pixel work on ``nthreads`` threads), ``"mapped"`` (the same FFT,
with crop, w phase and correction by device kernels, clgrid/cl_kernels/wgrid_planes.cl) or
``"vkfft"`` (pyvkfft on the device with those kernels: nothing per plane crosses to the
host; with fp64 the correction and w phases are computed per pixel there as well).  Kernel values come from per-tap polynomials (clgrid.sources.accuracy.horner_coefficients).
"""

from __future__ import annotations

import os
import threading
from functools import partial

import numpy as np

from ..planning.host import SPEED_OF_LIGHT
from ..operators.checks import check_apart, check_output, precision_of
from ..device.transfer import host_empty
from .devices import check_devices, sample_weight, sparse_share, device_list, on_devices, queues_for, share_bytes
from .engine import ImagingEngine, check_samples
from ..call_warnings import gathering, say_gathered
from .facets import faceted_operator
from .geometry import DIRECTIONS, ImageGeometry, abs_w_range, check_geometry, choose_geometry, flip_signs, \
    image_fields, plane_ranges
from .split import SPLITS, active_planes, direction_slabs, first_planes, plane_counts, row_bounds, touching
from ..device.runtime import get_queue
from ..planning.device_points import abs_w_range as device_w_range, check_device_uvw, is_device_array

__all__ = ["WGridder", "vis2dirty", "dirty2vis"]

# An off-centre image's w term tilted towards its centre (geometry.recentre_tilt): fewer
# w-planes, ducc0 0.42's count
RECENTRE = True


# samples the planes split balances its slabs on (rows drawn at random, `_balance_rows`), with
# the planes the exact |w| range reaches: the devices' planning then selects each slab's
# samples exactly
BALANCE_SAMPLES = 1 << 16


class WGridder:
    """The imaging operator for one set of points: ``vis2dirty(vis, wgt)`` and
    ``dirty2vis(dirty, wgt)``, with the plan, device program, grid and FFT kept between
    calls (a major cycle calls both many times).  Calls on one device are serialised by
    a lock (they share its buffers).

    It checks the keywords, chooses the geometry (or takes one) and drives the work of
    its devices, one `clgrid.imaging.engine.ImagingEngine` each.

    ``uvw`` (nrow, 3) metres may be a float64 C-contiguous `pyopencl.array.Array` (points
    already on the device, as cuFINUFFT's ``setpts`` takes them): it is planned where it is,
    with no copy through the host, on ``device`` (which must share its context; None: its
    own queue); one device only.  ``freq`` may be a device array too (it is read back).

    ``device``: one device (a name, a pyopencl Device, Context or CommandQueue, or None:
    `clgrid.device.runtime`), or a list of them (a device may appear twice: two queues on
    it).  With a list the samples are shared out once, here, by ``split``
    (`clgrid.imaging.split`): ``"planes"`` gives each device a slab of the w-planes (of
    about equal work) and the samples with a tap on it, ``"rows"`` a range of rows with
    about equal numbers of samples, ``"auto"`` (the default) takes ``"planes"`` with
    w-gridding and ``"rows"`` without.  Each call drives the devices at once from host
    threads and sums their shares into one host array in a fixed order (`dirty2vis`: the
    first device writes, each next adds once the one before is done; `vis2dirty`: the
    last writes, each one before adds its own to the sum so far), so the result does not
    depend on which finishes first.  A device given no share (more
    devices than slabs of planes with samples, or rows) is left out: ``devices`` lists
    those used.  A device that cannot do the precision or hold its share is refused,
    naming it.

    ``geometry`` (an `ImageGeometry` from `choose_geometry`; None: chosen from these points)
    lets operators over parts of one data set share one padded grid, kernel and stack of
    w-planes; it must agree with the image keywords and hold every tap of the points
    (refused otherwise, naming what differs).  ``planes`` = (lo, hi) restricts the
    operator to w-planes lo..hi-1: it spreads, transforms and interpolates only the taps
    that fall on them, so over a partition of the planes the images add up to the whole
    image, and the visibilities to the whole visibilities; points whose taps all fall
    outside add nothing.  ``planes`` = {"vis2dirty": (lo, hi), "dirty2vis": (lo, hi)}
    gives each direction its own planes (lo == hi: none): the operator holds the samples
    with a tap on either, and each call takes only its own direction's planes (operators
    over two partitions, one per direction, whose directions balance at other planes:
    `clgrid.imaging.split.direction_slabs`; a `clgrid.dask` slab task's); a device list
    cuts each direction's planes between its devices (split by rows: each device takes
    them all).  Any number of samples: more than one part's 32-bit counts
    (2^31 - 1) go through in parts of rows onto one grid (a row of more channels is refused).
    ``deterministic``: the same image bits from run to run, for a
    price: the points planned on the host and spread by rows (no atomics).  A device
    list repeats its own bits (its shares summed in a fixed order), which are not one
    device's: the planes' images are summed in another order (1e-6 relative apart in
    single precision).

    ``prefetch``: None, or ``{"vis": vis, "wgt": wgt or None}``, the values the first
    `vis2dirty` call will be given (as `clgrid.vis2dirty` gives them for its one call): on a
    discrete device they are sent up while the points are planned
    (`clgrid.imaging.prefetch`), not after.  They are taken by the first `vis2dirty`
    given these very arrays (the same memory, shape, strides and dtype), so they must not
    be changed in place before it: that call would image the values as they were (or as
    the background copy found them).  The operator holds them until then.  It is checked
    (refused by name unless of that form and the data's shape) also where facets leave it
    unused.

    ``facets``: None (or "auto") images the whole field on one padded grid where that
    fits the device (its largest buffer and half its memory) and facets would not cost at
    most half as much, else as facets (`clgrid.imaging.facets.plan_facets`); (fx, fy) asks
    for fx x fy facets, (1, 1) for one grid.  Each facet is its own operator, geometry and
    w-planes, within ``epsilon`` of the whole (`clgrid.imaging.facets`).  An image or data set the host's memory cannot hold is
    refused (`clgrid.HostMemoryError`, naming the sizes) before any work."""

    def __init__(self, uvw, freq, npix_x: int, npix_y: int, pixsize_x: float, pixsize_y: float,
                 epsilon: float, do_wgridding: bool = False, mask=None, flip_u: bool = False,
                 flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
                 center_x: float = 0.0, center_y: float = 0.0, sigma_min: float = 1.1,
                 sigma_max: float = 2.6, precision: str = "double", device=None, nthreads: int = 0,
                 verbosity: int = 0, tuning: dict | None = None, geometry: ImageGeometry | None = None,
                 planes: tuple | dict | None = None, deterministic: bool = False, split: str = "auto",
                 facets=None, prefetch=None):
        if is_device_array(freq):
            freq = freq.get()                  # nchan numbers: the host chooses the geometry with them
        on_device = is_device_array(uvw)
        if on_device:                          # points already on the device (device_points.py)
            device = _device_for_points(uvw, device)
        else:
            uvw = np.asarray(uvw, np.float64)
        freq = np.asarray(freq, np.float64).reshape(-1) if np.ndim(freq) else np.asarray([freq], np.float64)
        if uvw.ndim != 2 or uvw.shape[1] != 3:
            raise ValueError(f"uvw must have shape (nrow, 3), got {uvw.shape}")
        if freq.size == 0 or not np.all(np.isfinite(freq)) or np.any(freq <= 0):
            raise ValueError("freq must be a non-empty array of positive frequencies in Hz")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
        devices = device_list(device)
        signs = flip_signs(flip_u, flip_v, flip_w)
        recentre = geometry.tilted if geometry is not None else RECENTRE
        fields, _ = image_fields(npix_x, npix_y, pixsize_x, pixsize_y, do_wgridding, signs, center_x, center_y,
                                 recentre)
        self.nrow, self.nchan = uvw.shape[0], freq.size
        self.shape = (self.nrow, self.nchan)
        check_samples(self.nchan)        # more samples than 32 bits count: parts of rows (the engine's)
        self.npix_x, self.npix_y = fields["npix_x"], fields["npix_y"]
        self.precision = precision
        self.verbosity = verbosity
        keep = None
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != self.shape:
                raise ValueError(f"mask must have shape (nrow, nchan) = {self.shape}, got {mask.shape}")
            keep = mask != 0
        scale = freq / SPEED_OF_LIGHT
        num_kept = self.nrow * self.nchan if keep is None else int(np.count_nonzero(keep))
        # With w-gridding every point goes to w >= 0 (the image is real, so V at (u, v, w)
        # is conj(V) at (-u, -v, -w)): the planes cover |w| only, half the range.
        workers = int(nthreads) if nthreads and nthreads > 0 else (os.cpu_count() or 1)
        self._workers = workers
        w_range = None
        if do_wgridding and num_kept:
            w_range = device_w_range(device, uvw, scale, keep) if on_device else abs_w_range(uvw, scale, keep, workers)
        given = geometry is not None or planes is not None
        if geometry is None:
            geometry = choose_geometry(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, w_range,
                                       num_kept, flip_u, flip_v, center_x, center_y, sigma_min, sigma_max, precision,
                                       recentre)
        else:
            check_geometry(geometry, fields, w_range)
        self.geometry = geometry
        self.planes, calls = plane_ranges(planes, geometry)
        # checked here, before facets: a faceted operator does not prefetch, but junk is refused
        prefetch = _checked_prefetch(prefetch, {"vis": self.shape, "wgt": self.shape})
        # an image whose grid does not fit the device (or facets= asked): facets (facets.py)
        keywords = dict(npix_x=self.npix_x, npix_y=self.npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
                        epsilon=epsilon, do_wgridding=do_wgridding, flip_u=flip_u, flip_v=flip_v, center_x=center_x,
                        center_y=center_y, sigma_min=sigma_min, sigma_max=sigma_max, precision=precision,
                        recentre=recentre)
        self.faceted = faceted_operator(facets, geometry, keywords, w_range, num_kept, self.nrow * self.nchan,
                                        device, lambda f, g, eps: WGridder(
                                            uvw, freq, f.npix_x, f.npix_y, pixsize_x, pixsize_y, eps, do_wgridding,
                                            mask, flip_u, flip_v, flip_w, divide_by_n, f.center_x, f.center_y,
                                            sigma_min, sigma_max, precision, device, nthreads, verbosity, tuning,
                                            geometry=g, deterministic=deterministic, split=split, facets=(1, 1)),
                                        given, verbosity)
        if self.faceted is not None:
            self.split, self.engines, self.engine = None, [], None
            return
        divide = bool(divide_by_n) and bool(do_wgridding)
        engine = dict(scale=scale, signs=signs, geometry=geometry, precision=precision, divide_by_n=divide,
                      tuning=tuning, deterministic=bool(deterministic), epsilon=float(epsilon))
        if devices is None:
            self.split = None
            self._rows = [slice(None)]
            self.engines = [ImagingEngine(uvw=uvw, keep=keep, planes=self.planes, device=device, workers=workers,
                                          prefetch=prefetch, direction_planes=calls, **engine)]
        else:
            self._setup_devices(devices, split, uvw, keep, num_kept, engine, workers, prefetch, w_range, calls)
        self.engine = self.engines[0]
        if verbosity:
            g, choice = geometry, geometry.kernel
            for i, e in enumerate(self.engines):
                print(f"clgrid.WGridder: {e.num_kept} visibilities (planned on the {e.planned_on}), "
                      f"grid {g.nu}x{g.nv}, support {choice.support}, sigma {choice.sigma}, beta {choice.beta:.3f}, "
                      f"w-planes {e.planes.start}:{e.planes.stop} of {g.num_planes}, spread {e.spread_mode}, "
                      f"fft {e.fft_mode}" + (f", device {e.queue.device.name.strip()}" if len(self.engines) > 1
                                             else ""))

    def _setup_devices(self, devices, split, uvw, keep, num_kept, engine, workers, prefetch=None,
                       w_range=None, calls=None):
        """Share the samples out between ``devices`` (module `clgrid.imaging.split`), check
        that each device can take its share, and build an engine on each (at once).
        ``calls``: None, or each direction's planes (`plane_ranges`), each cut between the
        devices (split by planes) or taken by every device (split by rows)."""
        g, queues = self.geometry, queues_for(devices)
        if split == "auto":
            split = "planes" if g.do_wgridding else "rows"
        if split == "planes" and not g.do_wgridding:
            raise ValueError("split='planes' needs do_wgridding=True: without w there is one plane to share")
        self.split = split
        shares = []                     # (device index, rows, keep, planes held, kept, each direction's planes)
        if split == "planes":
            # the slabs balanced on a sample of the rows; each device's planning keeps,
            # exactly, the samples with a tap on its slab (plan_stacked's planes)
            sampled = _balance_rows(self.nrow, self.nchan)
            taken = self.nrow if isinstance(sampled, slice) else sampled.size
            # (on one thread: for this few samples, threads cost more than they save)
            first = first_planes(uvw[sampled], engine["scale"], None if keep is None else keep[sampled], g)
            counts = plane_counts(first, g) * (self.nrow / taken)
            active = None if isinstance(sampled, slice) or w_range is None else active_planes(w_range, g)
            # each direction's slabs; a device holds the samples of both of its own and each
            # call spreads or interpolates its direction's
            weights = {d: sample_weight(queues[0], engine["tuning"], d) for d in DIRECTIONS}
            del first
            planes = np.arange(g.num_planes)
            for i, ((lo, hi), slabs) in enumerate(direction_slabs(counts, g, len(queues), weights,
                                                                  calls or self.planes, active)):
                if lo < hi:        # a slab the sample finds empty may still hold samples: kept
                    kept = int(counts[touching(planes, lo, hi, g.kernel.support)].sum())     # about
                    shares.append((i, slice(None), keep, range(lo, hi), kept, plane_ranges(slabs, g)[1]))
        else:
            for i, (a, b) in enumerate(row_bounds(keep, self.nrow, self.nchan, len(queues))):
                part = None if keep is None else keep[a:b]
                kept = (b - a) * self.nchan if part is None else int(np.count_nonzero(part))
                if kept:
                    shares.append((i, slice(a, b), part, self.planes, kept, calls))
        if not shares:                                    # nothing kept: the first device says so when called
            shares = [(0, slice(None), keep, self.planes, 0, calls)]
        samples = [len(range(*rows.indices(self.nrow))) * self.nchan for _, rows, *_ in shares]   # its rows, all channels
        needs = [None] * len(queues)
        for (i, _, _, _, kept, _), n in zip(shares, samples):
            needs[i] = share_bytes(n, kept, g, engine["precision"])
        check_devices(queues, engine["precision"], needs)
        each = max(1, workers // len(shares))
        self._rows = [rows for _, rows, *_ in shares]
        # one call at a time: each device's engine lock is held while it waits for another
        # device of the same call, and vis2dirty and dirty2vis chain the devices in opposite
        # orders, so two calls at once could each hold the lock the other waits for
        self._one_call = threading.Lock()
        # the values sent up during the planning only to shares that will hold all their rows'
        # samples (about: the engine makes sure); those whose values the host picks pick
        # and send them at the end of their set-up, while the others still plan
        whole = [kept >= sparse_share(queues[i], engine["tuning"]) * n
                 for (i, _, _, _, kept, _), n in zip(shares, samples)]
        early = [None if prefetch is None else {k: None if a is None else a[rows] for k, a in prefetch.items()}
                 for _, rows, *_ in shares]
        said = [[] for _ in shares]        # each engine's set-up warnings, said once from the caller's line
        self.engines = on_devices(_gathered(said, [
            partial(ImagingEngine, uvw=uvw[rows], keep=part, planes=planes, device=queues[i], workers=each, prefetch=p,
                    prefetch_whole=w, direction_planes=calls, **engine)
            for (i, rows, part, planes, _, calls), p, w in zip(shares, early, whole)]))
        say_gathered(said, stacklevel=None)

    @property
    def devices(self) -> list:
        """The OpenCL devices the operator uses, one per engine (a device twice where it was
        named twice)."""
        if self.faceted is not None:
            return self.faceted.devices
        return [e.queue.device for e in self.engines]

    @property
    def queue(self):
        """The command queue of the operator's (first) device."""
        return self.engines[0].queue if self.faceted is None else self.faceted.queue

    @property
    def plans(self) -> list:
        """The planned points (`clgrid.planning.plan.Plan`), device by device, one per part
        of the rows that fits a device's buffers (with facets: every kept facet operator's)."""
        if self.faceted is not None:
            return self.faceted.plans
        return [plan for e in self.engines for plan in e.plans]

    def _check(self, name, a, shape):
        if a is not None and np.shape(a) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {np.shape(a)}")

    def vis2dirty(self, vis, wgt=None, progress=None, out=None) -> np.ndarray:
        """The dirty image (npix_x, npix_y) of ``vis`` (nrow, nchan), in ducc0's normalisation.
        ``progress(n)``, if given, is called after each w-plane with n = 1 (a progress bar's
        ``update``); there are as many as the call's w-planes (``planes``, or with planes
        given per direction, this direction's; split by rows: as the device furthest on
        gets through them).

        ``out``: None (a new array), or a writeable (npix_x, npix_y) array of the image's
        dtype (float32 in single precision, float64 in double) to write it into, returned
        (a C-contiguous one in native byte order is written directly, without a copy: a
        file mapping in shared memory, a pinned block; any other, or any with facets,
        through one).  Checked before any work (refused where it shares memory with
        ``vis`` or ``wgt``, `clgrid.operators.checks.check_apart`); a call refused later
        (a NaN visibility, counted on the device) may leave it partly written."""
        if out is not None:
            check_output(out, "out", (self.npix_x, self.npix_y), np.float64 if self.precision == "double"
                         else np.float32)
            check_apart(out, "out", {"vis": vis, "wgt": wgt})
            if not (out.flags.c_contiguous and out.dtype.isnative) or self.faceted is not None:
                out[...] = self.vis2dirty(vis, wgt, progress)
                return out
        if self.faceted is not None:
            return self.faceted.vis2dirty(vis, wgt, progress)
        if self.split is None:
            return self.engines[0].vis2dirty(vis, wgt, progress, out=out)
        vis = np.asarray(vis)
        self._check("vis", vis, self.shape)
        wgt = None if wgt is None else np.asarray(wgt)
        self._check("wgt", wgt, self.shape)
        reports = _progress_reports(progress, len(self.engines), self.split == "planes")
        # one image: the last device writes its own, each one before it adds its own once
        # the one after it is done (a device FFT: the sum so far sent up and added there as
        # its image is finished; else on the host): a fixed order (last to first, so the
        # first device, which holds most samples of a planes split and ends last, adds as
        # it ends), the same sum whichever ends first.  Pinned for the first device, which
        # brings the whole sum down last.
        first = self.engines[0]
        image = host_empty((self.npix_x, self.npix_y), first.real, first.staging) if out is None else out

        def share(k, after):
            e, r = self.engines[k], self._rows[k]
            e.vis2dirty(vis[r], None if wgt is None else wgt[r], reports[k], out=image, after=after)

        self._on_each_device(share, +1, "vis2dirty")
        return image

    def dirty2vis(self, dirty, wgt=None, out=None) -> np.ndarray:
        """Visibilities (nrow, nchan) of the image ``dirty`` (npix_x, npix_y): the adjoint.

        ``out``: None (a new array), or a writeable (nrow, nchan) array of the
        visibilities' dtype (complex64 in single precision, complex128 in double) to write
        them into, returned (a C-contiguous one in native byte order is written directly,
        without a copy: a file mapping in shared memory, a pinned block; any other, or
        any with facets, through one).  Checked before any work (refused where it shares
        memory with ``dirty`` or ``wgt``, `clgrid.operators.checks.check_apart`: it may be
        written before they are read); a call refused later (a weight NaN or infinite,
        counted on the device; an overflow) may leave it partly written."""
        if out is not None:
            check_output(out, "out", self.shape, np.complex128 if self.precision == "double" else np.complex64)
            check_apart(out, "out", {"dirty": dirty, "wgt": wgt})
            if not (out.flags.c_contiguous and out.dtype.isnative) or self.faceted is not None:
                out[...] = self.dirty2vis(dirty, wgt)
                return out
        if self.faceted is not None:
            return self.faceted.dirty2vis(dirty, wgt)
        if self.split is None:
            return self.engines[0].dirty2vis(dirty, wgt, out=out)
        dirty = np.asarray(dirty)
        self._check("dirty", dirty, (self.npix_x, self.npix_y))
        wgt = None if wgt is None else np.asarray(wgt)
        self._check("wgt", wgt, self.shape)
        # one output: the first device writes its share, each next one adds its own once
        # the one before it is done (a fixed order, so the same sum whichever ends first);
        # split by rows, each device writes its own rows
        e0 = self.engines[0]
        out = host_empty(self.shape, e0.complex, e0.staging) if out is None else out
        ordered = self.split == "planes"

        def share(k, after):
            e, r = self.engines[k], self._rows[k]
            e.dirty2vis(dirty, None if wgt is None else wgt[r], out=out[r], after=after)

        if not ordered:                  # rows no device took (none kept there) stay zero
            taken = np.zeros(self.nrow, bool)
            for r in self._rows:
                taken[r] = True
            out[~taken] = 0
        self._on_each_device(share, -1 if ordered else 0, "dirty2vis")
        return out

    def _on_each_device(self, share, step: int, direction: str) -> None:
        """One call of a device list: ``share(k, after)`` on every device k with planes in
        ``direction``'s calls (a planes split's device whose slab of that direction is
        empty sits the call out: it holds samples for the other direction only), in
        `_in_order`'s chain (``step``), one call at a time, each device's warnings gathered
        on its thread and said once for the call (`clgrid.call_warnings`), from the
        caller's line (the first frame outside clgrid: the caller of `vis2dirty` /
        `dirty2vis`, or of `clgrid.vis2dirty`)."""
        # (none where the operator's planes for ``direction`` are none: the first, whose
        # call then writes zeros)
        taking = [k for k, e in enumerate(self.engines)
                  if self.split != "planes" or len(e.direction_planes[direction])] or [0]
        said = [[] for _ in self.engines]

        def gathered(i, after):
            k = taking[i]
            with gathering(said[k]):
                share(k, after)

        with self._one_call:
            _in_order(len(taking), gathered, step)
        say_gathered(said, stacklevel=None)


def _gathered(sinks: list, calls: list) -> list:
    """``calls`` (for `on_devices`), each saying its warnings into its own of ``sinks``
    (`clgrid.call_warnings.gathering`, on the thread it runs on)."""
    def gathering_into(sink, call):
        with gathering(sink):
            return call()
    return [partial(gathering_into, sink, call) for sink, call in zip(sinks, calls)]


class _ShareAbandoned(Exception):
    """A device's share left out of the sum: the share it comes after failed (that error is
    the one raised)."""


def _in_order(count: int, share, step: int) -> None:
    """``share(k, after)`` for each device k at once (`on_devices`), where ``after`` (None
    for ``step`` 0 and for the chain's first) returns once device ``k + step`` has ended:
    the fixed order in which a device list sums its shares into one output.  A device
    whose predecessor failed raises `_ShareAbandoned` from ``after`` and adds nothing (its
    output is not there to add to; an overflow counted on it would hide the real error);
    the first real failure is raised once all have ended.  Each device is started after
    the one it waits for, so waiting devices can never hold every thread of the pool
    while the one they wait for waits for a thread."""
    done = [threading.Event() for _ in range(count)]
    failed = [False] * count

    def waiting_for(j):
        def after():
            done[j].wait()
            if failed[j]:
                raise _ShareAbandoned
        return after

    def run(k):
        j = k + step
        try:
            share(k, waiting_for(j) if step and 0 <= j < count else None)
        except _ShareAbandoned:
            failed[k] = True
        except BaseException:
            failed[k] = True
            raise
        finally:
            done[k].set()

    order = range(count - 1, -1, -1) if step > 0 else range(count)
    on_devices([partial(run, k) for k in order])


def _balance_rows(nrow: int, nchan: int):
    """The rows whose samples balance a planes split: all (a slice) where they are few, else
    about `BALANCE_SAMPLES` samples' worth drawn at random with a fixed seed (the same for
    the same data), in order.  Not every k-th row: rows come time by time, baseline by
    baseline, and a stride sharing a factor with the number of baselines would see a few
    baselines only (|w| belongs to the baseline)."""
    wanted = max(1, BALANCE_SAMPLES // max(nchan, 1))
    if nrow <= wanted:
        return slice(None)
    return np.sort(np.random.default_rng(0x5EED).integers(0, nrow, wanted))


def _checked_prefetch(prefetch, shapes: dict):
    """``prefetch`` ({"vis": ..., "wgt": ... or None}) as arrays of their ``shapes``, or None;
    refused by name otherwise."""
    if prefetch is None:
        return None
    if not isinstance(prefetch, dict) or "vis" not in prefetch or set(prefetch) - set(shapes):
        raise ValueError('prefetch must be {"vis": ..., "wgt": ...}, got '
                         f"{type(prefetch).__name__} {sorted(prefetch) if isinstance(prefetch, dict) else ''}")
    out = {"wgt": None}                                       # (no weights: None, as the call gives them)
    for name, a in prefetch.items():
        out[name] = None if a is None else np.asarray(a)
        if out[name] is not None and out[name].shape != shapes[name]:
            raise ValueError(f"prefetch's {name} must have shape {shapes[name]}, got {out[name].shape}")
    return out


def _device_for_points(uvw, device):
    """The one device (its queue) that plans device ``uvw``: ``device``, or None for uvw's own
    queue; ``uvw`` checked there (`clgrid.planning.device_points.check_device_uvw`)."""
    if isinstance(device, (list, tuple)) or (device is None and device_list(None) is not None):
        raise ValueError("uvw is a device array: it is planned on its own device, but device= (or $CLGRID_DEVICE) "
                         "names several; pass a host array to share the samples out between devices")
    queue = uvw.queue if device is None else get_queue(device)
    if queue is None:
        raise ValueError("uvw is a device array without a queue: pass device= (a queue on its context)")
    check_device_uvw(uvw, queue.context, rows=True)
    return queue


def _progress_reports(progress, engines: int, each_plane_once: bool) -> list:
    """One callback per device for ``progress``, called under one lock (the devices report
    from their threads): with ``each_plane_once`` (slabs: each plane is one device's) every
    report goes on; otherwise (rows: every device does every plane) a report goes on when
    a device gets further than any before it."""
    if progress is None:
        return [None] * engines
    lock, done, furthest = threading.Lock(), [0] * engines, [0]

    def reporter(k):
        def report(n):
            with lock:
                if each_plane_once:
                    progress(n)
                    return
                done[k] += n
                if done[k] > furthest[0]:
                    progress(done[k] - furthest[0])
                    furthest[0] = done[k]
        return report

    return [reporter(k) for k in range(engines)]


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x, npix_y, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              dirty=None, device=None, tuning=None, facets=None, **ignored):
    """ducc0.wgridder.vis2dirty's call on an OpenCL device; see the module docstring.

    ``vis`` complex64 or complex128 sets the precision; the image is float32 or float64
    (npix_x, npix_y).  ``dirty``, if given, receives the result (refused where it shares
    memory with an input: `clgrid.operators.checks.check_apart`).  ``allow_nshift`` and
    ``double_precision_accumulation`` are accepted and have no effect.  ``device`` and
    ``tuning`` (overrides of the table's ``[wgridding]`` section: ``spread``, ``fft``) and
    ``facets`` (see `WGridder`) are clgrid's own.
    """
    _refuse_unknown(ignored)
    vis = np.asarray(vis)
    check_apart(dirty, "dirty", {"vis": vis, "wgt": wgt, "uvw": uvw, "freq": freq, "mask": mask})
    precision = precision_of(vis.dtype, "vis", {"single": np.complex64, "double": np.complex128})
    wgt = _checked_wgt(wgt, vis.real.dtype)
    op = WGridder(uvw, freq, npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, mask, flip_u,
                  flip_v, flip_w, divide_by_n, center_x, center_y, sigma_min, sigma_max, precision,
                  device, nthreads, verbosity, tuning, facets=facets,
                  prefetch={"vis": vis, "wgt": wgt} if np.shape(vis) == (np.shape(uvw)[0], np.size(freq)) else None)
    if dirty is not None:
        check_output(dirty, "dirty", (op.npix_x, op.npix_y), vis.real.dtype.newbyteorder("="))
    return op.vis2dirty(vis, wgt, out=dirty)


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              vis=None, device=None, npix_x=0, npix_y=0, tuning=None, facets=None, **ignored):
    """ducc0.wgridder.dirty2vis's call on an OpenCL device: visibilities (nrow, nchan) of
    ``dirty`` (float32 or float64, which sets the precision); ``vis`` receives them if given
    (written directly: a call refused after its checks, as for a NaN weight or an
    overflow, may leave it partly written, as `WGridder.dirty2vis`'s ``out``; refused
    where it shares memory with an input, ``wgt=vis.real`` say:
    `clgrid.operators.checks.check_apart`)."""
    _refuse_unknown(ignored)
    dirty = np.asarray(dirty)
    check_apart(vis, "vis", {"dirty": dirty, "wgt": wgt, "uvw": uvw, "freq": freq, "mask": mask})
    precision = precision_of(dirty.dtype, "dirty", {"single": np.float32, "double": np.float64})
    if dirty.ndim != 2:
        raise ValueError(f"dirty must be 2-D (npix_x, npix_y), got shape {dirty.shape}")
    for name, n, have in (("npix_x", npix_x, dirty.shape[0]), ("npix_y", npix_y, dirty.shape[1])):
        if n and n != have:
            raise ValueError(f"{name}={n} does not match dirty's shape {dirty.shape}")
    op = WGridder(uvw, freq, dirty.shape[0], dirty.shape[1], pixsize_x, pixsize_y, epsilon, do_wgridding,
                  mask, flip_u, flip_v, flip_w, divide_by_n, center_x, center_y, sigma_min, sigma_max,
                  precision, device, nthreads, verbosity, tuning, facets=facets)
    if vis is not None:
        check_output(vis, "vis", op.shape, np.complex128 if precision == "double" else np.complex64)
    return op.dirty2vis(dirty, _checked_wgt(wgt, dirty.dtype), out=vis)


def _checked_wgt(wgt, real_dtype):
    """``wgt`` as an array of floats (NaN and infinities are counted where they matter, on
    the device, among the unmasked visibilities)."""
    if wgt is None:
        return None
    wgt = np.asarray(wgt)
    if not np.issubdtype(wgt.dtype, np.floating):
        raise TypeError(f"wgt must be a float array, got {wgt.dtype}")
    return wgt


def _refuse_unknown(ignored):
    unknown = set(ignored) - {"allow_nshift", "double_precision_accumulation"}
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
