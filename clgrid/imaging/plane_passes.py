"""The w-plane loops of an imaging engine, both directions (`PlanePasses`, a mixin of
`clgrid.imaging.engine.ImagingEngine`): each active plane spread on the device, transformed
and accumulated into the image (vis2dirty), or made from the image, transformed and
interpolated (dirty2vis).  Two paths, as the tuning table's ``[wgridding] fft`` chooses:

- the host FFT (``fft = "host"``): the grid mapped to the host, scipy.fft or ducc0.fft in
  place on it (`clgrid.imaging.fft.HostFFT`), the crop as views, the w phases, tilt and
  grid correction per pixel on the host threads (`_vis2dirty_host`, `_dirty2vis_host`);
- a device FFT (``"mapped"`` or ``"vkfft"``, the engine's ``device_fft``): the crop, w
  phase and correction by device kernels (clgrid/cl_kernels/wgrid_planes.cl, set up by
  `_setup_planes`), one image up or down per call (`_vis2dirty_device`, `_dirty2vis_device`).
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from ..device.codegen import build_program, launch, render
from ..device.host_threads import in_slices, let_others_run
from ..device.runtime import fill_zeros
from ..device.transfer import download, host_empty, shared_staging, upload, upload_pinned
from ..operators.checks import check_finite_result
from ..strategies.base import read_only_buffer
from .fft import clear_outside
from .pixels import pixel_blocks
from .prefetch import transfer_queue

__all__ = ["PlanePasses"]


class PlanePasses:
    """The plane loops of `clgrid.imaging.engine.ImagingEngine`, on the host FFT or a device
    FFT, as a mixin: they read the engine's geometry, pixel model (``pixels``), grid buffer,
    FFTs (``fft``, ``device_fft``) and ``regions``, and call its ``_active``,
    ``_launch_spread``, ``_launch_interp`` and ``_check_image``.  Each returns or leaves what
    the engine's `vis2dirty` / `dirty2vis` expect; the values' own checks are the engine's.
    """

    def _setup_planes(self, facts):
        """The image side on the device (device FFT): per-pixel correction and w phases
        (computed there with fp64, sent by the host without), accumulator."""
        g, ctx, mf = self.geometry, self.queue.context, cl.mem_flags
        phase_double = bool(facts.fp64)
        source = render("wgrid_planes.cl", double=self.precision == "double", use_w=g.do_wgridding,
                        phase_double=phase_double)
        program = build_program(ctx, source)
        self._planes_program = program        # its kernels: _accumulate, _finish, _load_plane

        def copy(a, dtype):
            return read_only_buffer(ctx, np.asarray(a, dtype))

        if phase_double:
            self._pixel_args = self.pixels.device_model(copy)
        else:
            host = self.pixels.host
            t = host.t_small[np.ix_(*host.radial)] if host.t_small is not None else np.zeros((g.npix_x, g.npix_y))
            if host.tilt is not None:
                t = t + host.tilt[0][:, None] + host.tilt[1][None, :]
            self._pixel_args = (copy(np.mod(g.w_start * t, 1.0), np.float32), copy(g.dw * t, np.float32),
                                copy(1.0 / self.pixels.correction_rows(slice(None)), self.real))
        npix_bytes = g.npix_x * g.npix_y * np.dtype(self.real).itemsize
        self._image_acc = cl.Buffer(ctx, mf.READ_WRITE, npix_bytes)
        self._image_out = cl.Buffer(ctx, mf.READ_WRITE, npix_bytes)
        self._npix_bytes = npix_bytes

    def _vis2dirty_host(self, progress, out=None):
        """Spread every plane on the device, transform it and accumulate on the host; the
        corrected image written into ``out`` (a C-contiguous array of the image's shape
        and dtype) where given, else into a new array; returned."""
        g = self.geometry
        image = np.zeros((g.npix_x, g.npix_y), np.float64)
        phase, step = self.pixels.plane_phases()
        tilt = self.pixels.tilt_phases()
        for plane in self.planes:
            if self._active(plane):
                zero = fill_zeros(self.queue, self._grid, self._grid_bytes, self.real)
                event = self._launch_spread(plane, [zero])
                grid = self._map_grid([event])
                blocks = self.fft.backward(grid, g.npix_x, g.npix_y, self._region(plane))

                def rows(r, blocks=blocks):
                    scratch = self.pixels.scratch()
                    for (bi, bj), view in blocks:
                        for a, b in pixel_blocks(r, bi, g.npix_y):
                            part = view[a - bi.start:b - bi.start]
                            if phase is not None:
                                np.multiply(part, self.pixels.phases_at(phase, a, b, bj, scratch), out=part)
                            if tilt is not None:
                                part *= tilt[0][a:b, None]
                                part *= tilt[2][None, bj]
                            image[a:b, bj] += part.real

                in_slices(self._workers, g.npix_x, rows)
                del blocks
                grid.base.release(self.queue)
            self.pixels.advance(phase, step)
            self.pixels.advance_tilt(tilt)
            if progress is not None and plane in self._call_planes:
                progress(1)
        if out is None:
            out = np.empty((g.npix_x, g.npix_y), self.real)
        not_finite = []

        def corrected(r):
            with np.errstate(over="ignore", invalid="ignore"):
                np.divide(image[r], self.pixels.correction_rows(r), out=out[r])
            not_finite.append(np.count_nonzero(~np.isfinite(out[r])))

        in_slices(self._workers, g.npix_x, corrected)
        self._check_image(sum(not_finite))
        return out

    def _plane_args(self, plane):
        g = self.geometry
        return (np.int32(g.nu), np.int32(g.nv), np.int32(g.npix_x), np.int32(g.npix_y), np.int32(plane))

    def _vis2dirty_device(self, progress, into=None):
        """Spread, transform and crop every plane on the device; one image comes back (into
        ``into`` = (out, after) where given: written, or with ``after`` added once
        ``after()`` returned, as `ImagingEngine.vis2dirty`'s ``out`` and ``after``)."""
        g, q = self.geometry, self.queue
        fill_zeros(q, self._image_acc, self._npix_bytes, self.real)
        fill_zeros(q, self._tally, 12, np.int32)
        for plane in self.planes:
            if self._active(plane):
                zero = fill_zeros(q, self._grid, self._grid_bytes, self.real)
                self._launch_spread(plane, [zero])
                self.device_fft.backward(self._grid, **self._region_of(plane))
                launch(self._accumulate, q, (g.npix_y, g.npix_x), self._grid, self._image_acc, *self._pixel_args,
                       *self._plane_args(plane))
                let_others_run()            # (the loop only enqueues: another device's copies go on)
            if progress is not None and plane in self._call_planes:
                q.finish()
                progress(1)
        image, after = (host_empty((g.npix_x, g.npix_y), self.real, self.staging), None) if into is None else into
        sent = None
        if after is not None:
            # the image of the devices after this one (in ``image`` once ``after()`` returns)
            # goes up on the transfer queue while this device's planes run, and the finish
            # adds it: one image comes down, the sum.  The planes issued first: OpenCL may
            # hold enqueued commands until a flush, and they must run during the wait
            q.flush()
            after()
            transfers = transfer_queue(q)
            sent = upload_pinned(transfers, image, self._image_out, shared_staging(transfers), self.pinned_portable)
        launch(self._finish, q, (g.npix_y, g.npix_x), self._image_acc, self._image_out, *self._pixel_args,
               np.int32(g.npix_x), np.int32(g.npix_y), self._tally, np.int32(sent is not None),
               wait_for=None if sent is None else [sent])
        not_finite = np.empty(3, np.int32)
        cl.enqueue_copy(q, not_finite, self._tally)
        download(self.queue, self._image_out, image, self.staging, portable=self.pinned_portable)
        # (summed: a pixel non-finite in this image or the sum's others is a non-finite sum)
        self._check_image(int(not_finite[0]) + int(not_finite[1]) if sent is None else int(not_finite[2]))
        return image

    def _dirty2vis_device(self, dirty):
        """The dirty image up once, checked and divided by the correction there; each plane
        made from it, transformed and interpolated on the device."""
        g, q = self.geometry, self.queue
        upload(self.queue, np.asarray(dirty, self.real), self._image_acc, self.staging)
        fill_zeros(q, self._tally, 12, np.int32)
        launch(self._finish, q, (g.npix_y, g.npix_x), self._image_acc, self._image_out, *self._pixel_args,
               np.int32(g.npix_x), np.int32(g.npix_y), self._tally, np.int32(0))
        not_finite = np.empty(3, np.int32)
        cl.enqueue_copy(q, not_finite, self._tally)
        if not_finite[0]:        # NaN or inf in the caller's image, or beyond the precision's range
            if not np.all(np.isfinite(dirty)):
                raise ValueError("dirty has NaN or infinite entries")
            check_finite_result(int(not_finite[0]), f"dirty in {np.dtype(self.real).name}", self.precision,
                                double="a float64 image", inputs="the image")
        check_finite_result(int(not_finite[1]), "dirty divided by the grid correction", self.precision,
                            double="a float64 image", inputs="the image")
        for plane in self.planes:
            if self._active(plane):
                fill_zeros(q, self._grid, self._grid_bytes, self.real)
                launch(self._load_plane, q, (g.npix_y, g.npix_x), self._image_out, *self._pixel_args, self._grid,
                       *self._plane_args(plane))
                self.device_fft.forward(self._grid, **self._region_of(plane))
                self._launch_interp(plane)
                let_others_run()

    def _dirty2vis_host(self, dirty):
        """Each plane made on the host, transformed there and sent to the device."""
        g = self.geometry
        image = np.empty((g.npix_x, g.npix_y), np.float64)

        def corrected(r):
            np.divide(dirty[r], self.pixels.correction_rows(r), out=image[r])

        in_slices(self._workers, g.npix_x, corrected)
        phase, step = self.pixels.plane_phases()
        tilt = self.pixels.tilt_phases(conjugate=True)
        if phase is not None:                    # the conjugate phases, advanced in place
            np.conjugate(phase, out=phase)
            step = step.conj()
        for plane in self.planes:
            if self._active(plane):
                grid = self._map_grid()
                blocks = self.fft.image_blocks(grid, g.npix_x, g.npix_y)

                def rows(r):
                    clear_outside(grid, g.npix_x, g.npix_y, r)    # the last plane's transform is there
                    scratch = self.pixels.scratch()
                    for (bi, bj), view in blocks:
                        for a, b in pixel_blocks(r, bi, g.npix_y):
                            part = view[a - bi.start:b - bi.start]
                            if phase is None:
                                part[...] = image[a:b, bj]
                                continue
                            np.multiply(self.pixels.phases_at(phase, a, b, bj, scratch), image[a:b, bj], out=part)
                            if tilt is not None:
                                part *= tilt[0][a:b, None]
                                part *= tilt[2][None, bj]

                in_slices(self._workers, g.npix_x, rows)
                self.fft.forward(grid, g.npix_x, g.npix_y, self._region(plane))
                del blocks
                grid.base.release(self.queue)
                self._launch_interp(plane).wait()
            self.pixels.advance(phase, step)
            self.pixels.advance_tilt(tilt)

    def _region(self, plane: int):
        """Where plane ``plane`` holds taps (a `clgrid.imaging.regions.Region`), or None."""
        return self.regions.at(plane) if self.regions is not None else None

    def _region_of(self, plane: int) -> dict:
        """The device FFT's keywords for plane ``plane``: the region for the mapped host FFT."""
        return {"region": self.regions.at(plane)} if self.regions is not None else {}

    def _map_grid(self, wait_for=None):
        """The device grid as a host array (mapped: on a CPU device no copy is made; on a
        GPU the driver moves it).  Release with ``grid.base.release(queue)``."""
        g = self.geometry
        grid, _ = cl.enqueue_map_buffer(self.queue, self._grid, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                        (g.nu, g.nv), self.complex, wait_for=wait_for, is_blocking=True)
        return grid
