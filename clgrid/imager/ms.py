"""Measurement Sets read directly with python-casacore: what the imager needs, in blocks of rows.

`open_ms` checks the path and reads the metadata (spectral window, correlations in the
MS's order with their names, phase centre, telescope, observer, field), all from the MS's
own tables: nothing is looked up elsewhere, so it works offline, with an empty ``FEED``
table and without ``OBSERVATION::TELESCOPE_LOCATION`` (CASA writes neither).  The data
column is chosen as WSClean chooses it: ``CORRECTED_DATA`` where the MS has one, else
``DATA``; the weights are ``WEIGHT_SPECTRUM`` where it is present and defined, else
``WEIGHT`` repeated over the channels.

`MeasurementSet.read` then makes one pass over the rows, a block at a time
(``block_rows``), reading only the correlations the polarisations need
(``getcolslicenp`` into buffers reused from block to block) and forming each polarisation
straight into its output arrays: memory is the output (8 + 4 bytes a visibility per
polarisation, 24 bytes a row of uvw) plus one block.  Autocorrelations, flagged samples,
rows with ``FLAG_ROW`` and non-finite data get weight 0.  Rows of field ``field`` only
(WSClean's default, field 0).  A large MS on a machine of several cores is read by
several processes at once, each a range of rows, into shared memory (``readers``,
`reader_count`, `clgrid.imager.parallel_reading`): the same loop
(`clgrid.imager.ms_rows`), the same values.  An MS whose rows use several spectral windows or
polarisation setups (``DATA_DESC_ID``) has one `Band` each, read one at a time
(``read(..., band=b)``), each with its own channel frequencies and correlations;
`output_channels` divides the channels of every band of every MS among the output
channels as WSClean does.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import numpy as np

from ..device.host_threads import in_background, in_slices
from .correlations import CODE_NAMES, Recipe, recipe
from .ms_rows import RowSpec, read_rows

__all__ = ["MSError", "MeasurementSet", "Band", "Visibilities", "OutputChannel", "open_ms", "channel_groups",
           "output_channels", "reader_count"]

SPEED_OF_LIGHT = 299792458.0
_REQUIRED_COLUMNS = ("UVW", "ANTENNA1", "ANTENNA2", "FLAG", "TIME")
_REQUIRED_TABLES = ("SPECTRAL_WINDOW", "POLARIZATION", "DATA_DESCRIPTION", "FIELD")
# about this many samples (row x channel x correlation) read at a time
_BLOCK_SAMPLES = 1 << 20
# whole cells (every correlation) are read where they hold at most this many times the
# correlations needed: casacore copies a strided slice several times slower than a whole
# cell (docs/benchmarks/imaging.md, "Reading the MS"); 0 reads slices always
WHOLE_CELLS_UP_TO = 2


# reader processes: each starts in a tenth of a second or two of one core (a fresh
# interpreter, numpy, casacore) and all start at once, so they pay from about this many
# samples (row x channel x correlation) read in all, on a machine with at least
# READER_MIN_CORES cores (fewer: the main process's own work at the same time, the device
# programs built while the MS is read, takes the cores); each reader gets at least
# READER_MIN_SAMPLES
READER_FROM_SAMPLES = 1 << 24
READER_MIN_SAMPLES = 1 << 21
READER_MIN_CORES = 4


def reader_count(readers: int | None, samples: int) -> int:
    """How many processes read ``samples`` (row x channel x correlation): ``readers`` where
    given (>= 1); for None, one per core this process may use when there are at least
    ``READER_MIN_CORES`` and ``READER_FROM_SAMPLES`` samples, each reader at least
    ``READER_MIN_SAMPLES``, else 1 (this process).  Always 1 where shared memory for the
    readers is not available (``os.memfd_create``: Linux) or no interpreter can be started
    (``sys.executable`` empty)."""
    if readers is not None and int(readers) < 1:
        raise MSError(f"--parallel-reading must be >= 1 reader, got {readers}")
    if not hasattr(os, "memfd_create") or not sys.executable:
        return 1
    if readers is not None:
        return int(readers)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores < READER_MIN_CORES or samples < READER_FROM_SAMPLES:
        return 1
    return max(1, min(cores, samples // READER_MIN_SAMPLES))


class MSError(ValueError):
    """The Measurement Set cannot be imaged as asked; the message says why and names the
    argument (``--data-column``, ``--pol``, ...) where one is at fault."""


def channel_groups(freqs, channels_out: int) -> list:
    """The MS channels (as slices of its channel axis) of each of ``channels_out`` output
    channels, as WSClean divides them: the channels sorted by frequency and cut into
    ``channels_out`` runs, run ``i`` holding sorted channels ``i n / K`` to
    ``(i + 1) n / K - 1``."""
    freqs = np.asarray(freqs, np.float64)
    n = freqs.size
    if channels_out < 1 or channels_out > n:
        raise MSError(f"--channels-out must be between 1 and the MS's {n} channel(s), got {channels_out}")
    steps = np.diff(freqs)
    if n > 1 and not (np.all(steps > 0) or np.all(steps < 0)):
        raise MSError("the MS's channel frequencies neither only increase nor only decrease; "
                      "clgrid image (like WSClean) needs them monotonic")
    groups = []
    for i in range(channels_out):
        lo, hi = i * n // channels_out, (i + 1) * n // channels_out
        if n > 1 and steps[0] < 0:                    # decreasing: sorted index k is channel n - 1 - k
            lo, hi = n - hi, n - lo
        groups.append(slice(lo, hi))
    return groups


@dataclass
class OutputChannel:
    """One output channel (``--channels-out``): ``slices[i]`` the channels of input band
    ``i`` it takes (a slice of that band's channel axis, empty where none), ``band`` its
    (start, end) frequencies in Hz, as WSClean writes them (the lowest channel's frequency
    less half its width, the highest's plus half its width)."""

    slices: list
    band: tuple


def output_channels(bands, channels_out: int) -> list:
    """The `OutputChannel` of each of ``channels_out`` output channels over ``bands``
    (``(freqs, widths)`` of each band of each MS, in Hz), as WSClean divides them: the
    bands' distinct channels (frequency and width) sorted by frequency, cut into
    ``channels_out`` runs of ``n / K`` (run ``i``: sorted channels ``i n / K`` to
    ``(i + 1) n / K - 1``), each output channel taking every band's channels whose
    frequency lies from its run's lowest to its highest.  Each band's frequencies must
    only increase or only decrease (MSError otherwise)."""
    channels = set()
    for index, (freqs, widths) in enumerate(bands):
        freqs = np.asarray(freqs, np.float64)
        steps = np.diff(freqs)
        if freqs.size > 1 and not (np.all(steps > 0) or np.all(steps < 0)):
            which = f"spectral window {index}'s" if len(bands) > 1 else "the MS's"
            raise MSError(f"{which} channel frequencies neither only increase nor only decrease; "
                          "clgrid image (like WSClean) needs them monotonic")
        channels.update(zip(freqs.tolist(), np.abs(np.asarray(widths, np.float64)).tolist()))
    ordered = sorted(channels)
    n = len(ordered)
    if channels_out < 1 or channels_out > n:
        where = "the MS's" if len(bands) == 1 else "the distinct channels of all spectral windows:"
        raise MSError(f"--channels-out must be between 1 and {where} {n} channel(s), got {channels_out}")
    out = []
    for i in range(channels_out):
        low, high = ordered[i * n // channels_out], ordered[(i + 1) * n // channels_out - 1]
        slices = []
        for freqs, _ in bands:
            taken = np.flatnonzero((np.asarray(freqs) >= low[0]) & (np.asarray(freqs) <= high[0]))
            slices.append(slice(int(taken.min()), int(taken.max()) + 1) if taken.size else slice(0, 0))
        out.append(OutputChannel(slices, (low[0] - low[1] / 2, high[0] + high[1] / 2)))
    return out


@dataclass
class Band:
    """One spectral window and polarisation setup of an MS (a ``DATA_DESC_ID`` its rows of
    the field use): ``freqs`` and ``widths`` (Hz, the MS's channel order), ``correlations``
    (names in the MS's order), ``nrow`` its rows of the field."""

    data_desc_id: int
    spectral_window: int
    freqs: np.ndarray
    widths: np.ndarray
    correlations: tuple
    nrow: int


@dataclass
class Visibilities:
    """What `MeasurementSet.read` returns.

    ``uvw`` (nrow, 3) float64 in metres, as the MS stores it; ``vis[pol][g]`` complex64 and
    ``wgt[pol][g]`` float32, each (nrow, nchan of group g), the polarisation formed from the
    correlations (`clgrid.imager.correlations`) and its visibility weight (0: not used);
    ``groups`` the channel slices; ``time_range`` (first, last) TIME in MJD seconds;
    ``counts`` what was left out and why; ``readers`` the processes that read them and
    ``reader_peak`` the largest peak resident memory of one of them (bytes; 0 for this
    process)."""

    uvw: np.ndarray
    vis: dict
    wgt: dict
    groups: list
    time_range: tuple
    counts: dict = field(default_factory=dict)
    readers: int = 1
    reader_peak: int = 0


class MeasurementSet:
    """An open Measurement Set (use `open_ms`); ``close()`` or a ``with`` block closes it.

    Attributes: ``path``, ``nrow`` (rows of the field imaged), ``data_column`` and
    ``data_column_note`` (why it was chosen), ``weight_column``, ``bands`` (a `Band` for
    each spectral window / polarisation setup the field's rows use, by DATA_DESC_ID),
    ``phase_centre`` (ra, dec radians, frame name), ``telescope``, ``observer``,
    ``field_name``, ``dish_diameter`` (metres, the largest; None if absent)."""

    def __init__(self, path, data_column: str | None = None, field_id: int = 0):
        from casacore.tables import table, tableexists

        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise MSError(f"{self.path}: no such file or folder")
        if not os.path.isdir(self.path) or not tableexists(self.path):
            raise MSError(f"{self.path} is not a Measurement Set (not a casacore table folder)")
        self._main = table(self.path, ack=False)
        self._tables = []
        try:
            self._describe(data_column, field_id, table)
        except BaseException:
            self.close()
            raise

    def _describe(self, data_column, field_id, table):
        main = self._main
        columns = set(main.colnames())
        keywords = main.getkeywords()
        missing = [c for c in _REQUIRED_COLUMNS if c not in columns] + \
                  [t for t in _REQUIRED_TABLES if t not in keywords]
        if missing:
            raise MSError(f"{self.path} is not a Measurement Set: it has no {', '.join(missing)}")
        data_columns = [c for c in ("DATA", "CORRECTED_DATA", "MODEL_DATA") if c in columns]
        if data_column is None:
            if "CORRECTED_DATA" in columns:
                self.data_column = "CORRECTED_DATA"
                self.data_column_note = "the MS has one: WSClean's default; --data-column DATA for the other"
            elif "DATA" in columns:
                self.data_column = "DATA"
                self.data_column_note = "the MS has no CORRECTED_DATA"
            else:
                raise MSError(f"{self.path} has no DATA or CORRECTED_DATA column; give --data-column "
                              f"(its columns: {', '.join(sorted(columns))})")
        else:
            if data_column not in columns:
                raise MSError(f"--data-column {data_column}: {self.path} has no such column (it has "
                              f"{', '.join(data_columns) or 'no data column'})")
            self.data_column = data_column
            self.data_column_note = "given"
        self.weight_column = "WEIGHT"
        if "WEIGHT_SPECTRUM" in columns and main.nrows() and main.iscelldefined("WEIGHT_SPECTRUM", 0):
            self.weight_column = "WEIGHT_SPECTRUM"
        elif "WEIGHT" not in columns:
            raise MSError(f"{self.path} has neither WEIGHT nor WEIGHT_SPECTRUM")

        def sub(name):
            t = table(f"{self.path}::{name}", ack=False)
            self._tables.append(t)
            return t

        dd = sub("DATA_DESCRIPTION")
        fields = sub("FIELD")
        if fields.nrows() <= field_id:
            raise MSError(f"{self.path}: no field {field_id} (the FIELD table has {fields.nrows()} row(s))")
        ids = self._row_ids(("DATA_DESC_ID", "FIELD_ID"), columns)
        if field_id not in ids["FIELD_ID"]:
            raise MSError(f"{self.path}: no rows of field {field_id} (fields in the rows: "
                          f"{sorted(ids['FIELD_ID'])})")
        descriptions = sorted(ids["DATA_DESC_ID"]) if ids["DATA_DESC_ID"] else [0]
        missing = [d for d in descriptions if d >= dd.nrows()]
        if missing:
            raise MSError(f"{self.path}: DATA_DESC_ID {missing} ha{'s' if len(missing) == 1 else 've'} no row in "
                          f"DATA_DESCRIPTION")
        spw, pol = sub("SPECTRAL_WINDOW"), sub("POLARIZATION")
        field_queries = []
        if len(ids["FIELD_ID"]) > 1:
            field_queries = [f"FIELD_ID=={int(field_id)}"]
            self._main = main.query(field_queries[0])
            self._tables.append(main)
        # each band's rows: a table, and the TaQL conditions that select them (for reader processes)
        self.bands, self._band_tables, self._band_queries = [], {}, {}
        for desc in descriptions:
            spw_id = int(dd.getcell("SPECTRAL_WINDOW_ID", desc))
            pol_id = int(dd.getcell("POLARIZATION_ID", desc))
            codes = [int(c) for c in np.asarray(pol.getcell("CORR_TYPE", pol_id)).reshape(-1)]
            unknown = [c for c in codes if c not in CODE_NAMES]
            if unknown:
                raise MSError(f"{self.path}: correlation types {unknown} (CORR_TYPE) are not ones clgrid "
                              f"image forms images from ({' '.join(CODE_NAMES.values())})")
            rows, queries = self._main, list(field_queries)
            if len(descriptions) > 1:
                queries.append(f"DATA_DESC_ID=={int(desc)}")
                rows = self._main.query(queries[-1])
                self._tables.append(rows)
            self.bands.append(Band(int(desc), spw_id,
                                   np.asarray(spw.getcell("CHAN_FREQ", spw_id), np.float64).reshape(-1),
                                   np.abs(np.asarray(spw.getcell("CHAN_WIDTH", spw_id), np.float64).reshape(-1)),
                                   tuple(CODE_NAMES[c] for c in codes), rows.nrows()))
            self._band_tables[len(self.bands) - 1] = rows
            self._band_queries[len(self.bands) - 1] = queries
        if len(self.bands) > 1:                       # a spectral window only other fields' rows use
            kept = [i for i, b in enumerate(self.bands) if b.nrow]
            self.bands = [self.bands[i] for i in kept]
            self._band_tables = {new: self._band_tables[old] for new, old in enumerate(kept)}
            self._band_queries = {new: self._band_queries[old] for new, old in enumerate(kept)}
        self.nrow = self._main.nrows()
        phase_dir = np.asarray(fields.getcell("PHASE_DIR", field_id), np.float64).reshape(-1, 2)[0]
        measinfo = fields.getcolkeywords("PHASE_DIR").get("MEASINFO", {})
        self.phase_centre = (float(phase_dir[0]), float(phase_dir[1]), str(measinfo.get("Ref", "J2000")))
        self.field_name = str(fields.getcell("NAME", field_id)) if "NAME" in fields.colnames() else ""
        self.telescope, self.observer = "", ""
        if "OBSERVATION" in keywords:
            obs = sub("OBSERVATION")
            if obs.nrows():
                self.telescope = str(obs.getcell("TELESCOPE_NAME", 0)) if "TELESCOPE_NAME" in obs.colnames() else ""
                self.observer = str(obs.getcell("OBSERVER", 0)) if "OBSERVER" in obs.colnames() else ""
        self.dish_diameter = None
        if "ANTENNA" in keywords:
            ant = sub("ANTENNA")
            if ant.nrows() and "DISH_DIAMETER" in ant.colnames():
                diameters = np.asarray(ant.getcol("DISH_DIAMETER"), np.float64)
                if np.any(diameters > 0):
                    self.dish_diameter = float(diameters.max())

    def _row_ids(self, names, columns) -> dict:
        """The distinct values of each integer column in ``names``, read a block at a time."""
        found = {name: set() for name in names}
        nrow = self._main.nrows()
        step = 1 << 22
        for name in names:
            if name not in columns:
                continue
            for start in range(0, nrow, step):
                found[name].update(int(v) for v in np.unique(self._main.getcol(name, start, min(step, nrow - start))))
        return found

    # -- reading ---------------------------------------------------------------------------
    @property
    def freqs(self) -> np.ndarray:
        """The channel frequencies of an MS with one band (MSError naming the bands otherwise)."""
        return self._single().freqs

    @property
    def widths(self) -> np.ndarray:
        return self._single().widths

    @property
    def correlations(self) -> tuple:
        return self._single().correlations

    def _single(self) -> Band:
        if len(self.bands) != 1:
            raise MSError(f"{self.path} has {len(self.bands)} spectral windows / polarisation setups "
                          f"(DATA_DESC_ID {[b.data_desc_id for b in self.bands]}): ask for a band's own")
        return self.bands[0]

    def recipes(self, polarizations, band: int = 0) -> dict:
        """`Recipe` of each polarisation from band ``band``'s correlations; MSError naming
        ``--pol`` when they cannot form one."""
        try:
            return {p: recipe(p, self.bands[band].correlations) for p in polarizations}
        except ValueError as exc:
            several = f" (DATA_DESC_ID {self.bands[band].data_desc_id})" if len(self.bands) > 1 else ""
            raise MSError(f"{self.path}{several}: {exc}" if several else str(exc)) from None

    def read(self, polarizations, groups, block_rows: int | None = None, progress=None,
             band: int = 0, readers: int | None = None, begun=None) -> Visibilities:
        """One pass over the rows of band ``band`` (see the module docstring).  ``groups``:
        slices of the band's channels (`channel_groups`, or an `OutputChannel`'s slice of
        it; an empty slice gives arrays of no channel); ``progress(n)`` is called after each
        block with its row count.  ``readers``: processes reading disjoint ranges of rows
        (`clgrid.imager.parallel_reading`; same values as one); None chooses
        (`reader_count`), 1 reads in this process.  ``begun()``, where given, is called
        once the reading has begun (the readers launched; at once for this process)."""
        recipes = self.recipes(polarizations, band)
        main, nrow, nchan = self._band_tables[band], self.bands[band].nrow, self.bands[band].freqs.size
        needed = sorted({i for r in recipes.values() for i in r.indices})
        lo, hi = needed[0], needed[-1]
        step = (needed[1] - needed[0]) if len(needed) > 1 else 1
        if any(b - a != step for a, b in zip(needed, needed[1:])):
            step = 1                                  # not evenly spaced: read the whole range
        ncorr_all = len(self.bands[band].correlations)
        whole = ncorr_all <= WHOLE_CELLS_UP_TO * len(range(lo, hi + 1, step))
        if whole:
            lo, hi, step = 0, ncorr_all - 1, 1
        picked = list(range(lo, hi + 1, step))
        local = {p: Recipe(r.polarization, tuple(picked.index(i) for i in r.indices), r.coefficients)
                 for p, r in recipes.items()}
        ncorr = len(picked)
        if block_rows is None:
            block_rows = max(1, _BLOCK_SAMPLES // max(1, nchan * ncorr))
        block_rows = int(min(block_rows, max(nrow, 1)))
        spec = RowSpec(self.data_column, self.weight_column == "WEIGHT_SPECTRUM", whole, lo, hi, step, nchan, ncorr,
                       [(p, r.indices, r.coefficients) for p, r in local.items()],
                       [(g.start, g.stop) for g in groups], "FLAG_ROW" in main.colnames(), block_rows)
        readers = reader_count(readers, nrow * nchan * ncorr)
        if readers > 1:
            from .parallel_reading import read_in_processes

            uvw, vis, wgt, counts, first, last, reader_peak = read_in_processes(
                self.path, self._band_queries[band], spec, nrow, list(recipes), readers, progress, begun)
        else:
            if begun is not None:
                begun()
            reader_peak = 0
            uvw = np.empty((nrow, 3), np.float64)
            vis = {p: [np.empty((nrow, g.stop - g.start), np.complex64) for g in groups] for p in recipes}
            wgt = {p: [np.empty((nrow, g.stop - g.start), np.float32) for g in groups] for p in recipes}
            counts, first, last = read_rows(main, spec, 0, nrow, uvw, vis, wgt, progress,
                                            lambda n, fn: in_slices(os.cpu_count() or 1, n, fn), in_background)
        counts = {"rows": nrow, **counts}
        if nrow == 0:
            first = last = float("nan")
        return Visibilities(uvw, vis, wgt, list(groups), (first, last), counts, readers, reader_peak)

    def close(self) -> None:
        for t in [self._main] + self._tables:
            try:
                t.close()
            except Exception:
                pass
        self._tables = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_ms(path, data_column: str | None = None, field_id: int = 0) -> MeasurementSet:
    """Open ``path`` as a Measurement Set and read its metadata; MSError (a ValueError) with
    a sentence for a path that is not one, a missing column, a field without rows, more than
    one spectral window.  Needs python-casacore (the ``ms`` extra)."""
    try:
        import casacore.tables  # noqa: F401
    except ImportError:
        raise ImportError("reading Measurement Sets needs python-casacore: pip install 'clgrid[ms]'") from None
    return MeasurementSet(path, data_column, field_id)
