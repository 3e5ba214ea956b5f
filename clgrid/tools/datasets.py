"""Real antenna layouts and synthetic uvw coordinates for tests and benchmarks.

Gridding cost and accuracy depend strongly on how the visibilities are spread
over the uv(w) volume: a dense core piles thousands of visibilities onto the
same few grid cells (atomic-add contention on a GPU), long baselines reach
large |w| (big W-projection kernels).  Uniform random uvw exercises neither
effect, so this module ships a few real station layouts (see
``clgrid/tools/layouts/README.md`` for sources and licences) and turns them into
uvw tracks with the textbook Earth-rotation-synthesis geometry.

Only numpy is needed.  Conventions:

* layouts are stored in ``clgrid/tools/layouts/<name>.csv`` in their source frame
  (WGS84 geodetic or Earth-centred Earth-fixed XYZ) and converted here to
  local east-north-up (ENU) metres about the array reference position;
* ``simulate_uvw`` returns uvw in **metres** (divide by the wavelength to get
  the dimensionless uvw the gridder expects); ``uniform_uvw`` returns
  wavelengths directly;
* baselines are ``antenna2 - antenna1`` with ``antenna1 < antenna2``.
"""

from __future__ import annotations

import collections
import functools
import math
import numbers
import re
from dataclasses import dataclass
from importlib import resources

import numpy as np

__all__ = [
    "ArrayLayout",
    "available_layouts",
    "load_layout",
    "baselines",
    "simulate_uvw",
    "hour_angle_range",
    "uniform_uvw",
    "lofar_like",
    "geodetic_to_ecef",
    "ecef_to_geodetic",
    "ecef_to_enu",
    "enu_to_xyz",
    "parse_layout_text",
    "SIDEREAL_DAY_S",
]

# WGS84 ellipsoid.  (ETRS89/ITRF station coordinates use GRS80, whose
# flattening differs from WGS84 by ~1e-11: irrelevant at the millimetre level.)
WGS84_A = 6378137.0
WGS84_F = 1.0 / 298.257223563
WGS84_E2 = WGS84_F * (2.0 - WGS84_F)

#: Length of a sidereal day in seconds: the period of the hour angle.
SIDEREAL_DAY_S = 86164.0905

_LAYOUT_SUFFIX = ".csv"
_FORMAT_VERSION = "1"
_COLUMNS = {
    "ecef": ("station", "x_m", "y_m", "z_m"),
    "geodetic": ("station", "lon_deg", "lat_deg", "height_m"),
}
_REQUIRED_KEYS = ("format", "name", "frame", "reference", "source", "licence")


# --------------------------------------------------------------------------
# ArrayLayout
# --------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ArrayLayout:
    """Station positions of one interferometer.

    ``enu`` holds east, north, up offsets in metres from the array reference
    position, one row per station, in the order of ``station_names``; it is
    stored as a read-only float64 copy so a ``ArrayLayout`` can be shared (and
    cached by :func:`load_layout`) safely.  ``latitude`` is the geodetic
    latitude of the reference position in radians: it is what rotates the
    local ENU frame into the equatorial frame used for uvw.  ``source`` says
    where the positions come from, with the licence they are shipped under.

    Layouts for tests can be built directly, e.g.
    ``ArrayLayout("pair", ("a", "b"), [[0, 0, 0], [100, 0, 0]], 0.5, "made up")``.
    """

    name: str
    station_names: tuple[str, ...]
    enu: np.ndarray
    latitude: float
    source: str

    def __post_init__(self) -> None:
        names = tuple(str(n) for n in self.station_names)
        enu = np.array(self.enu, dtype=np.float64, copy=True)
        if enu.ndim != 2 or enu.shape[1] != 3:
            raise ValueError(
                f"ArrayLayout {self.name!r}: enu must have shape (nstation, 3), got {enu.shape}"
            )
        if enu.shape[0] != len(names):
            raise ValueError(
                f"ArrayLayout {self.name!r}: {enu.shape[0]} positions but {len(names)} station names"
            )
        if enu.shape[0] < 2:
            raise ValueError(f"ArrayLayout {self.name!r}: an interferometer needs at least 2 stations")
        if len(set(names)) != len(names):
            dup = sorted(n for n, count in collections.Counter(names).items() if count > 1)
            raise ValueError(f"ArrayLayout {self.name!r}: duplicate station names {dup}")
        if not np.all(np.isfinite(enu)):
            raise ValueError(f"ArrayLayout {self.name!r}: enu contains non-finite values")
        latitude = float(self.latitude)
        if not (math.isfinite(latitude) and abs(latitude) <= math.pi / 2):
            raise ValueError(
                f"ArrayLayout {self.name!r}: latitude must be finite radians in [-pi/2, pi/2], "
                f"got {self.latitude!r}"
            )
        enu.setflags(write=False)
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "station_names", names)
        object.__setattr__(self, "enu", enu)
        object.__setattr__(self, "latitude", latitude)
        object.__setattr__(self, "source", str(self.source))

    @property
    def num_stations(self) -> int:
        return int(self.enu.shape[0])

    @property
    def num_baselines(self) -> int:
        """Number of cross-correlation baselines, n(n-1)/2 (no autocorrelations)."""
        n = self.num_stations
        return n * (n - 1) // 2

    @property
    def max_baseline(self) -> float:
        """Longest station separation in metres (sets the uv extent)."""
        a1, a2 = baselines(self)
        return float(np.max(np.linalg.norm(self.enu[a2] - self.enu[a1], axis=1)))

    def __repr__(self) -> str:
        return (
            f"ArrayLayout(name={self.name!r}, num_stations={self.num_stations}, "
            f"latitude={math.degrees(self.latitude):.4f} deg)"
        )


# --------------------------------------------------------------------------
# Geodesy (WGS84)
# --------------------------------------------------------------------------

def geodetic_to_ecef(lon, lat, height) -> np.ndarray:
    """WGS84 geodetic longitude/latitude (radians) and ellipsoidal height (m)
    to Earth-centred Earth-fixed XYZ in metres, shape ``broadcast + (3,)``."""
    lon, lat, height = np.broadcast_arrays(
        np.asarray(lon, dtype=np.float64),
        np.asarray(lat, dtype=np.float64),
        np.asarray(height, dtype=np.float64),
    )
    sin_lat = np.sin(lat)
    n = WGS84_A / np.sqrt(1.0 - WGS84_E2 * sin_lat**2)  # prime-vertical radius
    x = (n + height) * np.cos(lat) * np.cos(lon)
    y = (n + height) * np.cos(lat) * np.sin(lon)
    z = (n * (1.0 - WGS84_E2) + height) * sin_lat
    return np.stack([x, y, z], axis=-1)


def ecef_to_geodetic(xyz) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ECEF XYZ (metres, last axis of length 3) to WGS84 (lon, lat, height),
    angles in radians.

    Fixed-point iteration on the latitude; for points within a few hundred km
    of the ellipsoid it converges to far below a millimetre in a handful of
    steps (we do 8).  The height formula used is valid at the poles too.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    if xyz.shape[-1:] != (3,):
        raise ValueError(f"xyz must have a last axis of length 3, got shape {xyz.shape}")
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    lon = np.arctan2(y, x)
    p = np.hypot(x, y)
    lat = np.arctan2(z, p * (1.0 - WGS84_E2))
    for _ in range(8):
        sin_lat = np.sin(lat)
        n = WGS84_A / np.sqrt(1.0 - WGS84_E2 * sin_lat**2)
        lat = np.arctan2(z + WGS84_E2 * n * sin_lat, p)
    sin_lat = np.sin(lat)
    height = p * np.cos(lat) + z * sin_lat - WGS84_A * np.sqrt(1.0 - WGS84_E2 * sin_lat**2)
    return lon, lat, height


def ecef_to_enu(xyz, ref_xyz) -> np.ndarray:
    """Rotate ECEF positions into the local east-north-up frame tangent to the
    WGS84 ellipsoid at ``ref_xyz`` (ENU offsets in metres from ``ref_xyz``)."""
    xyz = np.asarray(xyz, dtype=np.float64)
    ref_xyz = np.asarray(ref_xyz, dtype=np.float64)
    if xyz.shape[-1:] != (3,) or ref_xyz.shape != (3,):
        raise ValueError("ecef_to_enu: xyz must be (..., 3) and ref_xyz (3,)")
    lon, lat, _ = ecef_to_geodetic(ref_xyz)
    sl, cl = math.sin(float(lon)), math.cos(float(lon))
    sp, cp = math.sin(float(lat)), math.cos(float(lat))
    rot = np.array(
        [
            [-sl, cl, 0.0],  # east
            [-sp * cl, -sp * sl, cp],  # north
            [cp * cl, cp * sl, sp],  # up
        ]
    )
    return (xyz - ref_xyz) @ rot.T


def enu_to_xyz(enu, latitude: float) -> np.ndarray:
    """Local ENU vectors to the local equatorial frame of Thompson, Moran &
    Swenson (X towards hour angle 0 on the celestial equator, Y towards hour
    angle -6h i.e. east, Z towards the north celestial pole).

    ``X = -sin(lat) N + cos(lat) U``, ``Y = E``, ``Z = cos(lat) N + sin(lat) U``.
    """
    enu = np.asarray(enu, dtype=np.float64)
    if enu.shape[-1:] != (3,):
        raise ValueError(f"enu must have a last axis of length 3, got shape {enu.shape}")
    sp, cp = math.sin(latitude), math.cos(latitude)
    e, n, u = enu[..., 0], enu[..., 1], enu[..., 2]
    return np.stack([-sp * n + cp * u, e, cp * n + sp * u], axis=-1)


# --------------------------------------------------------------------------
# Shipped layouts
# --------------------------------------------------------------------------

def _layout_dir():
    return resources.files("clgrid.tools").joinpath("layouts")


def available_layouts() -> list[str]:
    """Names accepted by :func:`load_layout`, sorted."""
    try:
        entries = list(_layout_dir().iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        e.name[: -len(_LAYOUT_SUFFIX)]
        for e in entries
        if e.name.endswith(_LAYOUT_SUFFIX) and e.is_file()
    )


def load_layout(name: str) -> ArrayLayout:
    """Load a shipped layout by name (see :func:`available_layouts`).

    Raises ``ValueError`` naming the valid layouts if ``name`` is unknown.
    The returned object is immutable and cached, so repeated calls are cheap.
    """
    valid = available_layouts()
    if not isinstance(name, str) or name not in valid:
        raise ValueError(
            f"unknown layout {name!r}; available layouts: {', '.join(valid) or '(none)'}"
        )
    return _load_cached(name)


@functools.lru_cache(maxsize=None)
def _load_cached(name: str) -> ArrayLayout:
    text = _layout_dir().joinpath(name + _LAYOUT_SUFFIX).read_text(encoding="utf-8")
    layout = parse_layout_text(text, origin=name + _LAYOUT_SUFFIX)
    if layout.name != name:
        raise ValueError(f"{name}{_LAYOUT_SUFFIX}: file declares name {layout.name!r}")
    return layout


_META_RE = re.compile(r"^#\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s?(.*)$")


def parse_layout_text(text: str, origin: str = "<layout>") -> ArrayLayout:
    """Parse clgrid's layout file format (version 1).

    The format is CSV with ``# key: value`` header lines (a key may repeat to
    continue its value on the next line) and other ``#`` lines as free
    comments.  Required keys: ``format`` (``1``), ``name``, ``frame``
    (``ecef`` or ``geodetic``), ``reference`` (the array reference position
    in the same frame as the rows: ``x, y, z`` metres or ``lon_deg, lat_deg,
    height_m``), ``source`` and ``licence``.  The first non-comment line
    names the columns: ``station,x_m,y_m,z_m`` or
    ``station,lon_deg,lat_deg,height_m``.

    Positions stay in their source frame in the file so they can be checked
    against the source; the conversion to ENU happens here.
    """
    meta: dict[str, str] = {}
    rows: list[tuple[int, list[str]]] = []
    header: list[str] | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _META_RE.match(line)
            if m and header is None:
                key, value = m.group(1).lower(), m.group(2).strip()
                meta[key] = f"{meta[key]} {value}".strip() if key in meta else value
            continue
        fields = [f.strip() for f in line.split(",")]
        if header is None:
            header = fields
        else:
            rows.append((lineno, fields))

    missing = [k for k in _REQUIRED_KEYS if k not in meta]
    if missing:
        raise ValueError(f"{origin}: missing header keys {missing}")
    if meta["format"] != _FORMAT_VERSION:
        raise ValueError(f"{origin}: unsupported format {meta['format']!r}")
    frame = meta["frame"].lower()
    if frame not in _COLUMNS:
        raise ValueError(f"{origin}: frame must be one of {sorted(_COLUMNS)}, got {frame!r}")
    if header is None or tuple(c.lower() for c in header) != _COLUMNS[frame]:
        raise ValueError(f"{origin}: column header must be {','.join(_COLUMNS[frame])}")
    if not rows:
        raise ValueError(f"{origin}: no stations")

    names: list[str] = []
    coords = np.empty((len(rows), 3), dtype=np.float64)
    for i, (lineno, fields) in enumerate(rows):
        if len(fields) != 4 or not fields[0]:
            raise ValueError(f"{origin}:{lineno}: expected 4 comma-separated fields")
        names.append(fields[0])
        try:
            coords[i] = [float(f) for f in fields[1:]]
        except ValueError:
            raise ValueError(f"{origin}:{lineno}: non-numeric coordinate in {fields[1:]}") from None
    try:
        ref = np.array([float(f) for f in meta["reference"].split(",")], dtype=np.float64)
    except ValueError:
        raise ValueError(f"{origin}: bad reference {meta['reference']!r}") from None
    if ref.shape != (3,) or not np.all(np.isfinite(ref)) or not np.all(np.isfinite(coords)):
        raise ValueError(f"{origin}: reference and coordinates must be 3 finite numbers")

    if frame == "geodetic":
        xyz = geodetic_to_ecef(np.radians(coords[:, 0]), np.radians(coords[:, 1]), coords[:, 2])
        ref_xyz = geodetic_to_ecef(math.radians(ref[0]), math.radians(ref[1]), ref[2])
    else:
        xyz, ref_xyz = coords, ref
    _, ref_lat, _ = ecef_to_geodetic(ref_xyz)

    source = f"{meta['source']} Licence: {meta['licence']}"
    if "title" in meta:
        source = f"{meta['title']}. {source}"
    return ArrayLayout(
        name=meta["name"],
        station_names=tuple(names),
        enu=ecef_to_enu(xyz, ref_xyz),
        latitude=float(ref_lat),
        source=source,
    )


# --------------------------------------------------------------------------
# Baselines and uvw
# --------------------------------------------------------------------------

def baselines(layout: ArrayLayout | int) -> tuple[np.ndarray, np.ndarray]:
    """All station pairs ``i < j`` as ``(ant1, ant2)`` int64 arrays.

    Order is fixed (ant1 slowest): (0,1), (0,2), ..., (0,n-1), (1,2), ...
    so baseline indices are stable across calls and match
    :func:`simulate_uvw`.  Accepts a :class:`ArrayLayout` or a station count.
    """
    if isinstance(layout, ArrayLayout):
        n = layout.num_stations
    elif isinstance(layout, numbers.Integral) and not isinstance(layout, bool):
        n = int(layout)
        if n < 0:
            raise ValueError(f"number of stations must be >= 0, got {n}")
    else:
        raise TypeError(f"baselines() takes a ArrayLayout or a station count, got {type(layout).__name__}")
    ant1, ant2 = np.triu_indices(n, k=1)
    return ant1.astype(np.int64), ant2.astype(np.int64)


def _check_declination(declination) -> float:
    try:
        dec = float(declination)
    except (TypeError, ValueError):
        raise ValueError(f"declination must be a real number in radians, got {declination!r}") from None
    if not math.isfinite(dec) or abs(dec) > math.pi / 2:
        raise ValueError(f"declination must be in [-pi/2, pi/2] radians, got {declination!r}")
    return dec


def _check_hour_angles(hour_angles) -> np.ndarray:
    try:
        ha = np.asarray(hour_angles, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("hour_angles must be a 1-D array of real numbers (radians)") from None
    if ha.ndim == 0:
        ha = ha.reshape(1)
    if ha.ndim != 1 or ha.size == 0:
        raise ValueError(f"hour_angles must be a non-empty 1-D array, got shape {ha.shape}")
    if not np.all(np.isfinite(ha)):
        raise ValueError("hour_angles must all be finite")
    return ha


def _check_subset(subset, nbaseline: int) -> np.ndarray:
    idx = np.asarray(subset)
    if idx.dtype == np.bool_:
        if idx.shape != (nbaseline,):
            raise ValueError(
                f"boolean baseline_subset must have shape ({nbaseline},), got {idx.shape}"
            )
        return np.flatnonzero(idx)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise ValueError("baseline_subset must be a 1-D array of baseline indices or a boolean mask")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= nbaseline):
        raise ValueError(f"baseline_subset indices must be in [0, {nbaseline})")
    return idx


def simulate_uvw(
    layout: ArrayLayout,
    *,
    declination: float,
    hour_angles,
    baseline_subset=None,
) -> np.ndarray:
    """uvw tracks in metres, shape ``(nbaseline, ntime, 3)``, float64.

    Earth-rotation synthesis for a source at ``declination`` observed at the
    given ``hour_angles`` (radians; see :func:`hour_angle_range`).  Each
    baseline ``enu[ant2] - enu[ant1]`` is rotated into the local equatorial
    frame (:func:`enu_to_xyz`) and then, per hour angle H and declination d,
    into uvw (Thompson, Moran & Swenson, eq. 4.1)::

        u =  sin H X + cos H Y
        v = -sin d cos H X + sin d sin H Y + cos d Z
        w =  cos d cos H X - cos d sin H Y + sin d Z

    The rotation preserves baseline length.  Effects below the accuracy that
    matters for gridding tests are ignored: precession/nutation/aberration,
    refraction, and the curvature between stations (ENU is a tangent plane,
    which is exact for the baseline vectors themselves).

    ``baseline_subset`` (optional) selects baselines by index into the order
    of :func:`baselines`, or by a boolean mask of length ``num_baselines``.
    Output bytes are ``24 * nbaseline * ntime``: 512 stations x 1000 times is
    about 3 GB, so subset or chunk the hour angles for big runs.
    """
    if not isinstance(layout, ArrayLayout):
        raise TypeError(f"layout must be a ArrayLayout, got {type(layout).__name__}")
    dec = _check_declination(declination)
    ha = _check_hour_angles(hour_angles)
    ant1, ant2 = baselines(layout)
    if baseline_subset is not None:
        sel = _check_subset(baseline_subset, ant1.size)
        ant1, ant2 = ant1[sel], ant2[sel]

    xyz = enu_to_xyz(layout.enu[ant2] - layout.enu[ant1], layout.latitude)  # (nb, 3)
    sh, ch = np.sin(ha), np.cos(ha)
    sd, cd = math.sin(dec), math.cos(dec)
    zero = np.zeros_like(ha)
    # rot[t, j, k]: row j (u, v, w) of the rotation at time t, applied to (X, Y, Z)[k].
    rot = np.stack(
        [
            np.stack([sh, ch, zero], axis=-1),
            np.stack([-sd * ch, sd * sh, np.full_like(ha, cd)], axis=-1),
            np.stack([cd * ch, -cd * sh, np.full_like(ha, sd)], axis=-1),
        ],
        axis=1,
    )
    # One (nb, 3) x (3, nt*3) matrix product instead of many broadcast temporaries.
    mat = rot.transpose(2, 0, 1).reshape(3, ha.size * 3)
    return (xyz @ mat).reshape(ant1.size, ha.size, 3)


def hour_angle_range(duration_hours: float, integration_s: float) -> np.ndarray:
    """Hour angles (radians) of the integration mid-points of an observation
    of ``duration_hours`` centred on transit (H = 0).

    There are ``floor(duration / integration)`` samples (at least one), spaced
    by ``integration_s`` of sidereal rotation (2 pi per 86164.0905 s), placed
    symmetrically about 0.  E.g. ``hour_angle_range(8, 10)`` gives 2880
    samples from about -4h to +4h.
    """
    for label, value in (("duration_hours", duration_hours), ("integration_s", integration_s)):
        try:
            fv = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{label} must be a positive number, got {value!r}") from None
        if not (math.isfinite(fv) and fv > 0):
            raise ValueError(f"{label} must be a positive finite number, got {value!r}")
    duration_s = float(duration_hours) * 3600.0
    integration_s = float(integration_s)
    ntime = int(math.floor(duration_s / integration_s + 1e-9))
    if ntime < 1:
        raise ValueError(
            f"duration {duration_s:g} s is shorter than one integration of {integration_s:g} s"
        )
    t = (np.arange(ntime, dtype=np.float64) - 0.5 * (ntime - 1)) * integration_s
    return t * (2.0 * math.pi / SIDEREAL_DAY_S)


def uniform_uvw(num_vis: int, uv_max: float, w_max: float, rng=None) -> np.ndarray:
    """``(num_vis, 3)`` float64 uvw in wavelengths, u and v uniform in
    ``[-uv_max, uv_max)`` and w uniform in ``[-w_max, w_max)``.

    Not physical (no tracks, no dense core), but the simplest load for
    kernel correctness tests and for timing without a layout.  ``rng`` is a
    ``numpy.random.Generator`` or anything ``numpy.random.default_rng``
    accepts (``None`` or an int seed), so results are reproducible.
    """
    if isinstance(num_vis, bool) or not isinstance(num_vis, numbers.Integral) or num_vis < 0:
        raise ValueError(f"num_vis must be a non-negative integer, got {num_vis!r}")
    for label, value in (("uv_max", uv_max), ("w_max", w_max)):
        try:
            fv = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{label} must be a non-negative number, got {value!r}") from None
        if not (math.isfinite(fv) and fv >= 0):
            raise ValueError(f"{label} must be a non-negative finite number, got {value!r}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    n = int(num_vis)
    out = np.empty((n, 3), dtype=np.float64)
    out[:, :2] = gen.uniform(-float(uv_max), float(uv_max), size=(n, 2))
    out[:, 2] = gen.uniform(-float(w_max), float(w_max), size=n)
    return out


def lofar_like(stations: int = 44, hours: float = 6.0, integration_s: float = 10.0, nchan: int = 16):
    """Seed 004 §6's LOFAR observation: uvw in metres ``(nbaseline, ntime, 3)`` and frequencies.

    ``stations`` of the shipped LOFAR HBA layout (about 30/44 core, the rest remote,
    as the seed's 44 stations were), declination 50 degrees, ``hours`` centred on
    transit, one 195 kHz subband of ``nchan`` channels at 150 MHz.
    """
    layout = load_layout("lofar_hba")
    remote = [i for i, name in enumerate(layout.station_names) if name.startswith("RS")]
    core = [i for i, name in enumerate(layout.station_names) if name.startswith("CS")]
    if not 2 <= stations <= len(core) + len(remote):
        raise ValueError(f"stations must be in [2, {len(core) + len(remote)}], got {stations}")
    ncore = min(len(core), stations * 30 // 44)
    keep = core[:ncore] + remote[:stations - ncore]
    chosen = ArrayLayout(f"lofar_hba_{len(keep)}", tuple(layout.station_names[i] for i in keep),
                    layout.enu[keep], layout.latitude, layout.source)
    uvw = simulate_uvw(chosen, declination=np.radians(50.0),
                       hour_angles=hour_angle_range(hours, integration_s))
    freqs = 150e6 + 195312.5 / nchan * np.arange(nchan)
    return uvw, freqs
