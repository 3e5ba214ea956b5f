"""``clgrid image``: a Measurement Set in, WSClean's dirty images (and PSFs) out.

The steps, each printed as it is taken:

1. Check the arguments and the output paths (`argument_errors`), open the MSs and check
   they can give what is asked (column, polarisations, channels, one phase centre): every
   error is raised here, before the data are read.
2. Read each spectral window of each MS once, a block of rows at a time
   (`clgrid.imager.ms`), forming each polarisation asked for
   (`clgrid.imager.correlations`), with a progress bar; `--channels-out` divides the
   windows' channels as WSClean does (`clgrid.imager.ms.output_channels`).
3. Choose the pixel and image size from the data where not given (`clgrid.imager.defaults`).
4. For each output channel (``--channels-out``): the imaging weights
   (`clgrid.imager.weighting`, from the first polarisation's visibility weights, as
   WSClean; one grid over every window in the channel), one `clgrid.WGridder` per window
   for the channel's points (planned once; the windows' images added), then the PSF
   (with ``--make-psf``) and each polarisation's image from it.  An image is divided by
   its sum of weights; with a PSF, the PSF is scaled to 1 at its centre and the images by
   the same factor (WSClean does both); the beam is fitted to the PSF (`clgrid.imager.beam`).
5. With several output channels, the MFS images: each channel's image weighted by its sum
   of weights, as WSClean combines them.
6. Files named as WSClean names them (`output_names`), written as WSClean writes them
   (`clgrid.imager.fits`), each through a temporary file: an interrupted run leaves no
   partial FITS.

Fluxes are WSClean's: the image is not divided by n = sqrt(1 - l^2 - m^2), so a point
source off the centre keeps its flux (``divide_by_n=True`` gives ducc0's convention).
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..call_warnings import said_once
from .correlations import parse_polarizations
from .weighting import WEIGHT_MODES, Applied, WeightGrid

__all__ = ["ImagingOptions", "ImagingError", "argument_errors", "output_names", "run"]

SPEED_OF_LIGHT = 299792458.0


class ImagingError(ValueError):
    """What is wrong with the arguments or the MS, one line per problem, each naming its
    argument."""


@dataclass
class ImagingOptions:
    """``clgrid image``'s arguments, with WSClean's names and defaults where it has them.

    ``ms`` one path or a sequence of paths (imaged together, as WSClean images several
    MSs: one phase centre); ``scale`` in radians; ``size`` (nx, ny); ``polarizations`` as given to ``--pol``
    (``"I"``, ``"IQUV"``, ``"xx,yy"``) or a tuple of names; ``precision`` None picks single
    precision for ``epsilon >= 1e-5``, else double; ``readers`` the processes that read each
    MS (``--parallel-reading``; None: `clgrid.imager.ms.reader_count` chooses, 1: this
    process)."""

    ms: object
    name: str
    size: tuple | None = None
    scale: float | None = None
    weight: str = "uniform"
    robust: float = 0.0
    super_weight: float = 1.0
    mf_weighting: bool = False
    rank_filter: float = 3.0
    rank_filter_size: int = 16
    padding: float = 1.2
    data_column: str | None = None
    polarizations: object = "I"
    channels_out: int = 1
    make_psf: bool = False
    beam_fit: str = "wsclean"
    do_wgridding: bool = True
    divide_by_n: bool = False
    epsilon: float = 1e-4
    precision: str | None = None
    device: object = None
    weights_on: str = "auto"
    field_id: int = 0
    readers: int | None = None
    overwrite: bool = False
    history: tuple = field(default_factory=tuple)

    def paths(self) -> tuple:
        """The Measurement Sets, as a tuple of paths."""
        return (os.fspath(self.ms),) if isinstance(self.ms, (str, os.PathLike)) else tuple(map(os.fspath, self.ms))

    def pols(self) -> tuple:
        if isinstance(self.polarizations, str):
            return parse_polarizations(self.polarizations)
        return parse_polarizations(",".join(self.polarizations))

    def chosen_precision(self) -> str:
        return self.precision or ("single" if self.epsilon >= 1e-5 else "double")


def output_names(options: ImagingOptions, pols=None) -> dict:
    """Every file the run writes, as WSClean names them: ``{(kind, channel, pol): path}``
    with kind "dirty" or "psf", channel an index or "MFS", pol None for the PSF.

    ``NAME-dirty.fits``, ``NAME-psf.fits``; with several polarisations ``NAME-Q-dirty.fits``;
    with ``--channels-out`` K > 1 ``NAME-0000-dirty.fits`` ... and ``NAME-MFS-dirty.fits``,
    ``NAME-0000-Q-dirty.fits``, ``NAME-0000-psf.fits``, ``NAME-MFS-psf.fits``."""
    pols = pols or options.pols()
    k = options.channels_out
    channels = [f"{c:04d}" for c in range(k)] + (["MFS"] if k > 1 else [])
    names = {}
    for index, channel in enumerate(channels):
        key = index if channel != "MFS" else "MFS"
        part = options.name + (f"-{channel}" if k > 1 else "")
        for p in pols:
            names[("dirty", key, p)] = part + (f"-{p}" if len(pols) > 1 else "") + "-dirty.fits"
        if options.make_psf:
            names[("psf", key, None)] = part + "-psf.fits"
    return names


def argument_errors(options: ImagingOptions) -> list:
    """What is wrong with the arguments, each naming its option, found before the MS is
    opened: sizes, scale, weighting, accuracy, polarisations, output folder and files."""
    errors = []
    try:
        pols = options.pols()
    except ValueError as exc:
        errors.append(str(exc))
        pols = ("I",)
    if options.size is not None:
        nx, ny = options.size
        if nx < 16 or ny < 16 or nx % 2 or ny % 2:
            errors.append(f"--size: width and height must be even and at least 16, got {nx} {ny}")
    if options.scale is not None and not (options.scale > 0 and math.isfinite(options.scale)):
        errors.append(f"--scale must be a positive angle, got {options.scale!r} rad")
    if options.size is not None and options.scale is not None and not errors:
        half_x, half_y = options.size[0] * options.scale / 2, options.size[1] * options.scale / 2
        if half_x * half_x + half_y * half_y >= 1:
            errors.append(f"--size {options.size[0]} {options.size[1]} with --scale {math.degrees(options.scale):.4g} "
                          f"deg reaches past the horizon (l^2 + m^2 >= 1 in the corners)")
    if options.weight not in WEIGHT_MODES:
        errors.append(f"--weight must be natural, uniform or briggs ROBUST, got {options.weight!r}")
    if not math.isfinite(options.robust):
        errors.append(f"--weight briggs: the robustness must be a finite number, got {options.robust}")
    if not (options.super_weight > 0 and math.isfinite(options.super_weight)):
        errors.append(f"--super-weight must be a positive number, got {options.super_weight}")
    if options.rank_filter_size < 1:
        errors.append(f"--weighting-rank-filter-size must be >= 1, got {options.rank_filter_size}")
    if options.readers is not None and options.readers < 1:
        errors.append(f"--parallel-reading must be >= 1 (1: read in this process), got {options.readers}")
    if options.channels_out < 1:
        errors.append(f"--channels-out must be >= 1, got {options.channels_out}")
    if not (0 < options.epsilon < 1):
        errors.append(f"--epsilon must be in (0, 1), got {options.epsilon}")
    elif options.precision == "single" and options.epsilon < 1e-5:
        errors.append(f"--epsilon {options.epsilon:g} needs --precision double (single reaches 1e-5)")
    if options.beam_fit not in ("wsclean", "whole-box"):
        errors.append(f"--beam-fit must be wsclean or whole-box, got {options.beam_fit!r}")
    if options.weights_on not in ("auto", "device", "host"):
        errors.append(f"--weights-on must be auto, device or host, got {options.weights_on!r}")
    if options.precision not in (None, "single", "double"):
        errors.append(f"--precision must be single or double, got {options.precision!r}")
    folder = os.path.dirname(os.path.abspath(options.name))
    if not options.name or os.path.basename(options.name) in ("", ".", ".."):
        errors.append(f"-o {options.name!r}: give a name (the files are NAME-dirty.fits, ...)")
    elif not os.path.isdir(folder):
        errors.append(f"-o {options.name}: folder {folder} does not exist")
    elif not os.access(folder, os.W_OK | os.X_OK):
        errors.append(f"-o {options.name}: cannot write in {folder}")
    elif options.channels_out >= 1:
        paths = list(output_names(options, pols).values())
        folders = [p for p in paths if os.path.isdir(p)]
        existing = [p for p in paths if os.path.exists(p) and not os.path.isdir(p)]
        if folders:
            errors.append(f"-o {options.name}: {', '.join(folders)} is a folder")
        if existing and not options.overwrite:
            shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if len(existing) > 3 else "")
            errors.append(f"-o {options.name}: {shown} exist{'s' if len(existing) == 1 else ''} "
                          f"(--overwrite replaces {'it' if len(existing) == 1 else 'them'})")
    return errors


def _zero_visibilities(message: str, category) -> bool:
    """An image's warning that its visibilities times their weights are all zero."""
    return message.startswith("clgrid: every unmasked visibility times its weight is zero")


def _progress(total, desc, unit, quiet):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=quiet, leave=False, unit_scale=True)


@dataclass
class _Metadata:
    """What the run keeps of the MSs once they are read (the first MS's where they differ,
    as WSClean: telescope, observer, field name, data column)."""

    centre: tuple
    telescope: str
    observer: str
    field_name: str
    diameter: float | None
    data_column: str


@dataclass
class _Part:
    """One band (spectral window and polarisation setup) of one MS as read: its
    visibilities (`clgrid.imager.ms.Visibilities`, one group per output channel) and
    channels."""

    label: str
    data: object
    freqs: np.ndarray
    widths: np.ndarray


@dataclass
class _Channel:
    """One output channel's results kept for the MFS images."""

    band: tuple
    image_weights: dict
    estimate: float
    counted: dict
    vis_weight_sum: dict


# MSs whose phase centres are further apart than this (radians) are not imaged together
PHASE_CENTRE_TOLERANCE = 1e-9


def _same_phase_centre(opened) -> None:
    """ImagingError naming the MSs whose phase centre is not the first's (clgrid image, as
    WSClean, images them at one phase centre and does not rotate their uvw)."""
    ra0, dec0, frame0 = opened[0].phase_centre
    errors = []
    for ms in opened[1:]:
        ra, dec, frame = ms.phase_centre
        apart = math.acos(min(1.0, math.sin(dec0) * math.sin(dec) + math.cos(dec0) * math.cos(dec) * math.cos(ra - ra0)))
        if frame != frame0 or apart > PHASE_CENTRE_TOLERANCE:
            errors.append(f"{ms.path} has its phase centre at RA {math.degrees(ra):.8g} deg, Dec {math.degrees(dec):.8g} "
                          f"deg ({frame}), {math.degrees(apart) * 3600:.4g}'' from {opened[0].path}'s (RA "
                          f"{math.degrees(ra0):.8g} deg, Dec {math.degrees(dec0):.8g} deg, {frame0}): clgrid image "
                          f"images several MSs at one phase centre (phase-rotate them to one first, e.g. with "
                          f"CASA's phaseshift or DP3)")
    if errors:
        raise ImagingError("\n".join(errors))


def _once(fn):
    """``fn`` as a callable that calls it on its first call only."""
    called = []

    def call():
        if not called:
            called.append(True)
            fn()
    return call


def _read(options, pols, say, quiet, begun=None):
    """Steps 1 and 2: open the MSs (every error here), read each band of each once;
    ``begun()`` is called once the first read has begun (its reader processes launched)."""
    from .ms import MSError, open_ms, output_channels, reader_count

    opened = []
    opening = time.perf_counter()
    try:
        for path in options.paths():
            opened.append(open_ms(path, options.data_column, options.field_id))
        _same_phase_centre(opened)
        bands = [(ms, b) for ms in opened for b in range(len(ms.bands))]
        recipes = []
        for ms, b in bands:                           # an MS that cannot form a pol: refused now, by name
            try:
                recipes.append(ms.recipes(pols, b))
            except MSError as exc:
                if len(opened) == 1 or str(exc).startswith(ms.path):
                    raise
                raise MSError(f"{ms.path}: {exc}") from None
        outputs = output_channels([(ms.bands[b].freqs, ms.bands[b].widths) for ms, b in bands],
                                  options.channels_out)
        for ms in opened:
            for index, band in enumerate(ms.bands):
                spw = f" spectral window {band.spectral_window} (DATA_DESC_ID {band.data_desc_id})" \
                    if len(ms.bands) > 1 else ""
                say(f"clgrid image: {ms.path}{spw}: {band.nrow} rows x {band.freqs.size} channels "
                    f"({band.freqs.min() / 1e6:.6g}-{band.freqs.max() / 1e6:.6g} MHz), correlations "
                    f"{' '.join(band.correlations)}")
            say(f"  data column {ms.data_column} ({ms.data_column_note}); weights from {ms.weight_column}")
        say(f"  opened in {time.perf_counter() - opening:.2f} s")
        shown = set()
        for (ms, b), recipe_of in zip(bands, recipes):
            for p in pols:
                line = recipe_of[p].describe(ms.bands[b].correlations)
                if line not in shown:
                    shown.add(line)
                    say(f"  {line}")
        if any(reader_count(options.readers, band.nrow * band.freqs.size * len(band.correlations)) > 1
               for band in (ms.bands[b] for ms, b in bands)):
            # reader processes read a large MS: this process waits meanwhile, and the FITS
            # writer's import (astropy, some tenths of a second) is done then, not at the end
            # (not for small MSs: its ~90 MiB would then count in the imaging's peak memory)
            threading.Thread(target=_import_fits_writer, daemon=True).start()
        started = time.perf_counter()
        parts = []
        counts = {"autocorrelation rows": 0, "flagged rows": 0}
        readers_used, reader_peak = 1, 0
        total = sum(ms.bands[b].nrow for ms, b in bands)
        with _progress(total, "reading", "row", quiet) as bar:
            for k, (ms, b) in enumerate(bands):
                band = ms.bands[b]
                data = ms.read(pols, [o.slices[k] for o in outputs], progress=bar.update, band=b,
                               readers=options.readers, begun=begun)
                readers_used = max(readers_used, data.readers)
                reader_peak = max(reader_peak, data.reader_peak)
                label = ms.path + (f" spectral window {band.spectral_window}" if len(ms.bands) > 1 else "")
                parts.append(_Part(label, data, band.freqs.copy(), band.widths.copy()))
                for key in counts:
                    counts[key] += data.counts[key]
        first = opened[0]
        diameters = [ms.dish_diameter for ms in opened if ms.dish_diameter]
        meta = _Metadata(first.phase_centre, first.telescope, first.observer, first.field_name,
                         max(diameters) if diameters else None, first.data_column)
    finally:
        for ms in opened:
            ms.close()
    by = f" by {readers_used} reader processes (peak {reader_peak / 2 ** 20:.0f} MiB each at most)" \
        if readers_used > 1 else ""
    say(f"  read in {time.perf_counter() - started:.2f} s{by}; left out: {counts['autocorrelation rows']} "
        f"autocorrelation row(s), {counts['flagged rows']} flagged row(s) (FLAG_ROW)")
    return parts, outputs, meta


class _Imaging:
    """Steps 4 to 6 for one run: the images of each output channel, then the MFS images."""

    def __init__(self, options, pols, parts, outputs, meta, scale, size, say, quiet):
        self.options, self.pols, self.parts, self.outputs, self.meta = options, pols, parts, outputs, meta
        self.scale, (self.nx, self.ny) = scale, size
        self.say, self.quiet = say, quiet
        self.precision = options.chosen_precision()
        self.names = output_names(options, pols)
        self.several = len(outputs) > 1
        self.weighting = {"natural": "natural", "uniform": "uniform"}.get(options.weight,
                                                                          f"Briggs'({options.robust:g})")
        ra, dec, frame = meta.centre
        starts = [part.data.time_range[0] for part in parts if part.data.uvw.shape[0]]
        self.describe = dict(npix_x=self.nx, npix_y=self.ny, pixsize_x=scale, pixsize_y=scale, ra=ra, dec=dec,
                             frame=frame, date_obs=min(starts) if starts else float("nan"),
                             telescope=meta.telescope, observer=meta.observer, field_name=meta.field_name,
                             data_column=meta.data_column, weighting=self.weighting, history=options.history)
        self.written, self.channels = [], []
        shape = (self.ny, self.nx)
        self.mfs = {p: np.zeros(shape) for p in pols} if self.several else None
        self.mfs_psf = np.zeros(shape) if self.several and options.make_psf else None
        self.shared = None
        from .device_weighting import weights_device

        try:
            self.weights_device, where = weights_device(options.device, options.weights_on)
        except ValueError as exc:
            raise ImagingError(str(exc)) from None
        say(f"  imaging weights on {where}")
        if options.mf_weighting and options.weight != "natural":
            self.shared = self._weight_grid()
            for g in range(len(outputs)):
                for part, channels in self._active(g):
                    self.shared.add(part.data.uvw, part.freqs[channels], part.data.wgt[pols[0]][g])
            self.shared.finish()

    def _active(self, g: int) -> list:
        """``(part, channel slice)`` of each band with channels in output channel ``g``."""
        return [(part, channels) for part, channels in zip(self.parts, self.outputs[g].slices)
                if channels.stop > channels.start and part.data.uvw.shape[0]]

    def _weight_grid(self):
        o = self.options
        return WeightGrid(o.weight, self.nx, self.ny, self.scale, self.scale, o.robust, o.padding,
                          o.super_weight, o.rank_filter, o.rank_filter_size, device=self.weights_device)

    def _write(self, key, image, **extra):
        from . import fits

        path = self.names[key]
        started = time.perf_counter()
        fits.write_image(path, image, fits.ImageDescription(**self.describe, **extra),
                         overwrite=self.options.overwrite)
        self.written.append(path)
        self.say(f"  wrote {path} in {time.perf_counter() - started:.2f} s")

    def _fit(self, psf, estimate):
        from .beam import fit_beam

        return fit_beam(psf, self.scale, self.scale, estimate, self.options.beam_fit == "whole-box")

    def _weights(self, g, label, active):
        """Step 4's imaging weights, in place, over every band of output channel ``g`` (one
        weight grid for them all): each band's weights and mask of samples any polarisation
        uses, and what `WeightGrid.apply` kept of each polarisation, the bands' together."""
        first = self.pols[0]
        weights = [{p: part.data.wgt[p][g] for p in self.pols} for part, _ in active]
        grid = self.shared
        if grid is None:
            grid = self._weight_grid()
            for (part, channels), w in zip(active, weights):
                grid.add(part.data.uvw, part.freqs[channels], w[first])
            grid.finish()
        kept = [np.zeros(w[first].shape, bool) for w in weights]
        applied = {p: Applied() for p in self.pols}
        for (part, channels), w, used in zip(active, weights, kept):
            for p in self.pols:
                a = grid.apply(part.data.uvw, part.freqs[channels], w[p], used=used)
                total = applied[p]
                total.before += a.before
                total.kept += a.kept
                total.visibility_weight_sum += a.visibility_weight_sum
                total.weight_sum += a.weight_sum
                total.longest = max(total.longest, a.longest)
        dropped = {}
        for p in self.pols:
            a = applied[p]
            if a.kept < a.before:
                dropped.setdefault((a.before - a.kept, a.before), []).append(p)
        for (lost, before), which in dropped.items():
            self.say(f"  {label}, {', '.join(which)}: {lost} of {before} visibilities lie beyond the uv grid "
                     f"({self.nx} x {self.ny} pixels of {math.degrees(self.scale) * 3600:.4g}''): left out, as "
                     f"WSClean leaves them out")
        return weights, applied, kept

    def channel(self, g: int) -> None:
        """Step 4 for output channel ``g``: one operator per band (one for an MS of one
        spectral window), the bands' images added before they are normalised."""
        o, first = self.options, self.pols[0]
        band = self.outputs[g].band
        label = f"channel {g} ({band[0] / 1e6:.6g}-{band[1] / 1e6:.6g} MHz)" if self.several else "image"
        key = g if self.several else 0
        active = self._active(g)
        started = time.perf_counter()
        weights, applied, kept = self._weights(g, label, active)
        image_weight = {p: applied[p].weight_sum for p in self.pols}
        counted = {p: applied[p].kept for p in self.pols}
        vis_weight_sum = {p: applied[p].visibility_weight_sum for p in self.pols}
        if not any(image_weight.values()):
            raise ImagingError(f"{label}: no visibility with non-zero weight")
        self.say(f"  {label}: weights in {time.perf_counter() - started:.2f} s")
        cplx = np.complex64 if self.precision == "single" else np.complex128
        real = np.float32 if self.precision == "single" else np.float64
        estimate = 1.0 / applied[first].longest if applied[first].longest > 0 else math.inf
        together = len(active) > 1              # several bands: their images are added, then written
        summed = {p: None for p in self.pols}
        psf_sum = None
        elapsed = {p: 0.0 for p in self.pols}
        state = {"psf_factor": 1.0, "beam": None}

        def finish_psf(psf):
            psf = _transposed(psf, np.float64)
            centre = psf[self.ny // 2, self.nx // 2]
            state["psf_factor"] = image_weight[first] / centre if centre != 0 else 0.0
            psf /= centre if centre != 0 else 1.0
            beam = state["beam"] = self._fit(psf, estimate)
            self.say(f"  {label}: PSF; beam {beam.major * 206264.806:.4g}'' x {beam.minor * 206264.806:.4g}'', "
                     f"PA {beam.angle:.4g} deg")
            self._write(("psf", key, None), psf, band=band, polarization=first, beam=beam,
                        image_weight=image_weight[first], visibilities=counted[first],
                        visibility_weight_sum=vis_weight_sum[first])
            if self.mfs_psf is not None:
                self.mfs_psf += psf * image_weight[first]

        def finish_image(p, dirty):
            dirty = _transposed(dirty, dirty.dtype)
            # divided by the sum of weights; with a PSF, also by its centre (WSClean's normalisation)
            dirty *= (state["psf_factor"] if o.make_psf else 1.0) / image_weight[p] if image_weight[p] else 0.0
            peak = np.unravel_index(np.argmax(np.abs(dirty)), dirty.shape)
            self.say(f"  {label}, {p}: imaged in {elapsed[p]:.2f} s; peak {dirty[peak]:.4g} "
                     f"Jy/beam at pixel (x {peak[1]}, y {peak[0]}), rms {float(np.std(dirty)):.3g}")
            self._write(("dirty", key, p), dirty, band=band, polarization=p, beam=state["beam"],
                        image_weight=image_weight[p], visibilities=counted[p],
                        visibility_weight_sum=vis_weight_sum[p])
            if self.mfs is not None:
                self.mfs[p] += dirty * image_weight[p]

        for index, ((part, channels), w, used) in enumerate(zip(active, weights, kept)):
            op = self._operator(part, channels, used, label if not together else f"{label}, {part.label}")
            del used
            if o.make_psf:
                with _progress(len(op.planes), f"{label}: PSF", "plane", self.quiet) as bar:
                    psf = op.vis2dirty(w[first].astype(cplx), None, progress=bar.update)
                if not together:
                    finish_psf(psf)
                else:
                    psf_sum = psf.astype(np.float64) if psf_sum is None else psf_sum + psf
                del psf
            for n, p in enumerate(self.pols):
                t = time.perf_counter()
                # visibilities that are all zero (Stokes V of an unpolarised sky, say) make a zero
                # image, rightly: no news here (the call's other warnings said once, from here)
                with _progress(len(op.planes), f"{label}: {p}", "plane", self.quiet) as bar, \
                        said_once(leaving_out=_zero_visibilities):
                    dirty = op.vis2dirty(part.data.vis[p][g].astype(cplx, copy=False), w[p].astype(real, copy=False),
                                         progress=bar.update)
                elapsed[p] += time.perf_counter() - t
                if n == len(self.pols) - 1:
                    # the operator's buffers (host memory on a CPU device) go before the last image
                    # is transposed and written, not after (it has no reference cycles: freed here)
                    del op
                if not together:
                    finish_image(p, dirty)
                else:
                    summed[p] = dirty.astype(np.float64) if summed[p] is None else summed[p] + dirty
                del dirty
        if together:
            if o.make_psf:
                finish_psf(psf_sum)
                del psf_sum
            for p in self.pols:
                finish_image(p, summed.pop(p))
        self.channels.append(_Channel(band, image_weight, estimate, counted, vis_weight_sum))

    def _operator(self, part, channels, used, label):
        """The operator of one band's samples in an output channel (``used``: the samples
        kept), planned, with a line saying so."""
        from .. import WGridder

        o = self.options
        started = time.perf_counter()
        op = WGridder(part.data.uvw, part.freqs[channels], self.nx, self.ny, self.scale, self.scale, o.epsilon,
                      do_wgridding=o.do_wgridding, mask=used.view(np.uint8), flip_v=True,
                      divide_by_n=o.divide_by_n, precision=self.precision, device=o.device)
        geometry = op.geometry
        self.say(f"  {label}: {int(np.count_nonzero(used))} visibilities planned in "
                 f"{time.perf_counter() - started:.2f} s: support {geometry.kernel.support}, grid {geometry.nu} x "
                 f"{geometry.nv}, {geometry.num_planes} w-plane(s), on {op.devices[0].name.strip()}")
        return op

    def combine(self) -> None:
        """Step 5: the MFS images, each channel weighted by its sum of weights."""
        if self.mfs is None:
            return
        band = (min(c.band[0] for c in self.channels), max(c.band[1] for c in self.channels))
        first, beam = self.pols[0], None
        if self.mfs_psf is not None:
            total = sum(c.image_weights[first] for c in self.channels)
            self.mfs_psf /= total
            beam = self._fit(self.mfs_psf, self.channels[-1].estimate)
            self.say(f"  MFS: beam {beam.major * 206264.806:.4g}'' x {beam.minor * 206264.806:.4g}'', "
                     f"PA {beam.angle:.4g} deg")
            self._write(("psf", "MFS", None), self.mfs_psf, band=band, polarization=first, beam=beam,
                        image_weight=total, **self._totals(first))
        for p in self.pols:
            total = sum(c.image_weights[p] for c in self.channels)
            self._write(("dirty", "MFS", p), self.mfs[p] / total, band=band, polarization=p, beam=beam,
                        image_weight=total, **self._totals(p))

    def _totals(self, p) -> dict:
        """An MFS image's visibility count and weight sum: the channels' together."""
        return dict(visibilities=sum(c.counted[p] for c in self.channels),
                    visibility_weight_sum=sum(c.vis_weight_sum[p] for c in self.channels))


def _transposed(image, dtype):
    """``image.T`` as a new C-ordered array of ``dtype``, its rows copied on the host threads
    (a 4096^2 transpose is a tenth of a second on one core)."""
    from ..device.host_threads import in_slices

    out = np.empty(image.shape[::-1], dtype)

    def part(rows):
        out[rows] = image[:, rows].T

    in_slices(os.cpu_count() or 1, out.shape[0], part)
    return out


def _import_fits_writer() -> None:
    try:
        from astropy.io import fits  # noqa: F401
    except ImportError:
        pass


def _warm_up(options, size) -> None:
    """Open the device and build the imaging programs on a few points while the MS is read
    (the first operator of a process spends most of a second there); the real operator then
    finds them built.  Any error is left for the real operator to raise."""
    from .. import WGridder

    try:
        nx, ny = size or (256, 256)
        scale = options.scale or 1e-5
        points = np.array([[10.0, 20.0, 1.0], [-300.0, 150.0, -20.0], [700.0, -800.0, 60.0]])
        WGridder(points, np.array([1e9]), nx, ny, scale, scale, options.epsilon,
                 do_wgridding=options.do_wgridding, flip_v=True, divide_by_n=options.divide_by_n,
                 precision=options.chosen_precision(), device=options.device)
    except Exception:
        pass


def run(options: ImagingOptions, say=print, quiet: bool = False) -> list:
    """Make the images; returns the paths written.  ImagingError (or
    `clgrid.imager.ms.MSError`) before any work for bad arguments or an MS that cannot give
    what is asked; ``say`` prints each step, ``quiet`` hides the progress bars."""
    from .defaults import image_defaults

    errors = argument_errors(options)
    if errors:
        raise ImagingError("\n".join(errors))
    pols = options.pols()
    started = time.perf_counter()
    warming = threading.Thread(target=_warm_up, args=(options, options.size), daemon=True)
    # the device's set-up starts once the MSs are open and their reading has begun (reader
    # processes launched): it holds the interpreter's lock in long driver calls, which would
    # hold up the opening and the launches on the critical path
    start_warming = _once(warming.start)
    parts, outputs, meta = _read(options, pols, say, quiet, begun=start_warming)
    start_warming()
    first = pols[0]
    weights = [np.concatenate([part.data.wgt[first][g] for g in range(len(outputs))], axis=1)
               if len(outputs) > 1 else part.data.wgt[first][0] for part in parts]
    if not any(np.any(w) for w in weights):
        raise ImagingError(f"every sample of {first} is flagged, an autocorrelation or has zero weight: "
                           f"nothing to image")
    freqs = [np.concatenate([part.freqs[o.slices[k]] for o in outputs]) for k, part in enumerate(parts)]
    scale, size, notes = image_defaults([part.data.uvw for part in parts], freqs, meta.diameter, options.scale,
                                        options.size, weights)
    del weights
    for note in notes:
        say(f"  {note}")
    if (size[0] * scale / 2) ** 2 + (size[1] * scale / 2) ** 2 >= 1:
        raise ImagingError(f"--size {size[0]} {size[1]} with pixels of {math.degrees(scale):.4g} deg reaches "
                           f"past the horizon")
    waiting = time.perf_counter()
    warming.join()
    waited = time.perf_counter() - waiting
    if waited >= 0.01:
        say(f"  waited {waited:.2f} s for the device's set-up (begun while the MS was read)")
    imaging = _Imaging(options, pols, parts, outputs, meta, scale, size, say, quiet)
    say(f"  weighting {imaging.weighting}{' (MF weighting)' if options.mf_weighting else ''}, "
        f"{'w-correction' if options.do_wgridding else 'no w-correction'}, epsilon {options.epsilon:g} "
        f"({imaging.precision}), fluxes {'divided by n (ducc0)' if options.divide_by_n else 'not divided by n (WSClean)'}")
    for g in range(len(outputs)):
        imaging.channel(g)
    imaging.combine()
    say(f"clgrid image: {len(imaging.written)} file(s) in {time.perf_counter() - started:.2f} s")
    return imaging.written
