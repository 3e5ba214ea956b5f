"""The device-tuning table: per-vendor defaults, most specific match wins, field by field.

The table is data: one TOML file per device family in ``clgrid/platforms/``.  A file may
have a ``[match]`` table (keys ``platform``, ``vendor``, ``type``: case-insensitive
substrings; ``name``: a regular expression searched in the device name;
``compute_capability``: comparisons with NVIDIA's compute capability, such as
``">=9.0, <10.0"`` for the Hopper family), parameter sections named after strategies
(``[atomic]``, ...) plus ``[common]``, and a list of more specific ``[[devices]]``
entries, each with its own match keys and sections.  ``generic.toml`` has no
``[match]``: it names every parameter with its default, and in ``[tune.<strategy>]``
the values ``clgrid tune`` tries.

A section may hold ``[[<section>.when]]`` tables: values that apply only for a given
``npol`` and/or ``precision`` (the other keys are the section's parameters), e.g.
``[[devices.tiled.when]]`` with ``npol = 4`` and ``regsz = 2``.  They apply after the
entry's own values, in file order, and only where the caller says npol/precision.

For a device, every entry that matches is applied in order of specificity (a name
pattern over an architecture range over vendor keys, then the number of match keys; a
device entry counts its family's keys too), so a field comes from the most specific
entry that sets it (as in CLBlast's database).  On top
come the user's file (``$CLGRID_TUNING``, else the file ``clgrid tune`` writes) and
last the per-call ``tuning={...}``.  Unknown sections or keys and values of the
wrong type are errors that name the file, the entry and the key.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import ClgridError

__all__ = ["TuningTableError", "TableEntry", "platform_dir", "user_tuning_path", "load_entries",
           "matching_entries", "resolve_tuning", "tune_space", "schema", "format_entry"]

MATCH_KEYS = ("platform", "vendor", "type", "name", "compute_capability")
# Keys of a ``when`` table that say when it applies (the rest are parameters).
CONDITION_KEYS = {"npol": (1, 2, 4), "precision": ("single", "double")}
_COMPARISON = re.compile(r"^\s*(>=|<=|==|>|<)\s*(\d+)\.(\d+)\s*$")
_COMPARE = {">=": tuple.__ge__, "<=": tuple.__le__, "==": tuple.__eq__, ">": tuple.__gt__, "<": tuple.__lt__}


class TuningTableError(ClgridError, ValueError):
    """A tuning file or override names an unknown parameter or gives a value of the wrong type."""


def platform_dir() -> Path:
    """The tuning table: ``clgrid/platforms/``, shipped inside the package."""
    return Path(__file__).resolve().parent.parent / "platforms"


def user_tuning_path() -> Path:
    """``$CLGRID_TUNING``, else clgrid's file in the user's configuration folder."""
    if os.environ.get("CLGRID_TUNING"):
        return Path(os.environ["CLGRID_TUNING"])
    import platformdirs

    return Path(platformdirs.user_config_dir("clgrid")) / "tuning.toml"


@dataclass(frozen=True)
class TableEntry:
    """One set of parameters and the devices it is for."""

    source: str          # file it came from
    label: str           # "family" or "devices[i]" within the file
    match: tuple         # (key, wanted) pairs, all must hold: a family's and the entry's own
    params: dict         # section -> {key: value}
    variants: tuple = ()  # (section, conditions, {key: value}) from [[<section>.when]], in file order

    @property
    def specificity(self) -> tuple:
        keys = [key for key, _ in self.match]
        return ("name" in keys, "compute_capability" in keys, len(keys))

    def matches(self, facts) -> bool:
        for key, want in self.match:
            if key == "compute_capability":
                have = tuple(getattr(facts, "compute_capability", ()))
                if not have or not all(_COMPARE[op](have, version) for op, version in _comparisons(want)):
                    return False
            elif key == "name":
                if not re.search(want, facts.name, re.IGNORECASE):
                    return False
            else:
                have = {"platform": facts.platform, "vendor": facts.vendor, "type": facts.type}[key]
                if want.lower() not in have.lower():
                    return False
        return True


def _comparisons(text: str) -> list:
    """``">=9.0, <10.0"`` -> [(">=", (9, 0)), ("<", (10, 0))]; ValueError if malformed."""
    out = []
    for part in text.split(","):
        found = _COMPARISON.match(part)
        if not found:
            raise ValueError(f"{part.strip()!r} is not a comparison such as '>=9.0'")
        out.append((found.group(1), (int(found.group(2)), int(found.group(3)))))
    return out


def _conditions_hold(conditions: dict, npol, precision) -> bool:
    given = {"npol": npol, "precision": precision}
    return all(given[key] is not None and given[key] == want for key, want in conditions.items())


@lru_cache(maxsize=None)
def _generic() -> dict:
    with open(platform_dir() / "generic.toml", "rb") as f:
        return tomllib.load(f)


def schema() -> dict:
    """Every known parameter with its default: section -> {key: value} from generic.toml."""
    return {k: v for k, v in _generic().items() if k not in ("tune", "match", "devices")}


def tune_space(strategy: str) -> dict:
    """The candidate values ``clgrid tune`` tries for ``strategy`` (each a known parameter)."""
    space = dict(_generic().get("tune", {}).get(strategy, {}))
    for key, values in space.items():
        if not isinstance(values, list) or not values:
            raise TuningTableError(f"generic.toml [tune.{strategy}] {key} must be a non-empty list")
        for value in values:
            check_params({strategy: {key: value}}, f"generic.toml [tune.{strategy}]")
    return space


def _same_type(value, default) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, list):
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return type(value) is type(default)


def check_params(params: dict, where: str) -> None:
    """Raise `TuningTableError` naming ``where`` for unknown sections/keys or wrong types."""
    known = schema()
    for section, values in params.items():
        if section not in known:
            raise TuningTableError(f"{where}: unknown section [{section}]; known: {sorted(known)}")
        if not isinstance(values, dict):
            raise TuningTableError(f"{where}: [{section}] must be a table")
        for key, value in values.items():
            if key not in known[section]:
                raise TuningTableError(f"{where}: unknown parameter {key!r} in [{section}]; "
                                       f"known: {sorted(known[section])}")
            default = known[section][key]
            if not _same_type(value, default):
                raise TuningTableError(f"{where}: [{section}] {key} must be {type(default).__name__}, "
                                       f"got {type(value).__name__} {value!r}")


def _check_match(match, where):
    if not isinstance(match, dict):
        raise TuningTableError(f"{where}: match must be a table")
    for key, value in match.items():
        if key not in MATCH_KEYS:
            raise TuningTableError(f"{where}: unknown match key {key!r}; known: {list(MATCH_KEYS)}")
        if not isinstance(value, str):
            raise TuningTableError(f"{where}: match key {key!r} must be a string")
        if key == "name":
            try:
                re.compile(value)
            except re.error as exc:
                raise TuningTableError(f"{where}: bad name pattern {value!r}: {exc}") from None
        if key == "compute_capability":
            try:
                _comparisons(value)
            except ValueError as exc:
                raise TuningTableError(f"{where}: compute_capability {value!r}: {exc}") from None


def _split_variants(params: dict, where: str) -> tuple:
    """Take the ``when`` lists out of a file's sections: (params without them, variants)."""
    plain, variants = {}, []
    for section, values in params.items():
        if not isinstance(values, dict) or "when" not in values:
            plain[section] = values
            continue
        values = dict(values)
        when = values.pop("when")
        plain[section] = values
        if not isinstance(when, list) or not all(isinstance(w, dict) for w in when):
            raise TuningTableError(f"{where}: [{section}] when must be an array of tables "
                                   f"([[{section}.when]])")
        for i, table in enumerate(when):
            spot = f"{where} [[{section}.when]] #{i + 1}"
            conditions = {k: table[k] for k in CONDITION_KEYS if k in table}
            if not conditions:
                raise TuningTableError(f"{spot}: names no condition; give one of {sorted(CONDITION_KEYS)}")
            for key, value in conditions.items():
                if value not in CONDITION_KEYS[key]:
                    raise TuningTableError(f"{spot}: {key} must be one of {list(CONDITION_KEYS[key])}, "
                                           f"got {value!r}")
            values_here = {k: v for k, v in table.items() if k not in CONDITION_KEYS}
            check_params({section: values_here}, spot)
            variants.append((section, conditions, values_here))
    return plain, tuple(variants)


def parse_file(path: Path) -> list[TableEntry]:
    """The entries of one tuning file, validated."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise TuningTableError(f"{path}: not valid TOML: {exc}") from None
    source = path.name if path.parent == platform_dir() else str(path)
    top_match = data.pop("match", {})
    devices = data.pop("devices", [])
    if path == platform_dir() / "generic.toml":
        data.pop("tune", None)
    _check_match(top_match, f"{source} [match]")
    data, variants = _split_variants(data, f"{source} (family entry)")
    check_params(data, f"{source} (family entry)")
    entries = [TableEntry(source, "family", tuple(top_match.items()), data, variants)]
    if not isinstance(devices, list):
        raise TuningTableError(f"{source}: devices must be an array of tables ([[devices]])")
    for i, entry in enumerate(devices):
        label = f"devices[{i}]"
        match = {k: entry.pop(k) for k in MATCH_KEYS if k in entry}
        _check_match(match, f"{source} {label}")
        entry, variants = _split_variants(entry, f"{source} {label}")
        check_params(entry, f"{source} {label}")
        entries.append(TableEntry(source, label, tuple(top_match.items()) + tuple(match.items()), entry,
                                  variants))
    return entries


@lru_cache(maxsize=None)
def load_entries() -> tuple:
    """Every entry of the shipped table (generic first)."""
    paths = sorted(platform_dir().glob("*.toml"), key=lambda p: (p.name != "generic.toml", p.name))
    return tuple(e for p in paths for e in parse_file(p))


def _user_entries() -> list[TableEntry]:
    path = user_tuning_path()
    return parse_file(path) if path.is_file() else []


def matching_entries(facts, include_user: bool = True) -> list[TableEntry]:
    """Entries that apply to a device, least specific first (table, then user file)."""
    table = sorted((e for e in load_entries() if e.matches(facts)), key=lambda e: e.specificity)
    user = sorted((e for e in _user_entries() if e.matches(facts)), key=lambda e: e.specificity) \
        if include_user else []
    return table + user


def resolve_tuning(strategy: str, overrides: dict | None = None, facts=None, npol: int | None = None,
                   precision: str | None = None) -> dict:
    """Parameters of ``strategy`` (plus ``[common]``) for the device described by ``facts``;
    ``when`` variants apply where ``npol`` / ``precision`` are given and equal theirs."""
    known = schema()
    if strategy not in known:
        raise TuningTableError(f"no tuning section for strategy {strategy!r}")
    params = {**known.get("common", {}), **known[strategy]}
    for entry in (matching_entries(facts) if facts is not None else []):
        params.update(entry.params.get("common", {}))
        params.update(entry.params.get(strategy, {}))
        for section, conditions, values in entry.variants:
            if section in ("common", strategy) and _conditions_hold(conditions, npol, precision):
                params.update(values)
    if overrides:
        for key in overrides:
            if key not in params:
                raise TuningTableError(f"unknown tuning parameter {key!r} for {strategy!r}; "
                                       f"known: {sorted(params)}")
        section_of = {k: ("common" if k in known.get("common", {}) else strategy) for k in overrides}
        for key, value in overrides.items():
            check_params({section_of[key]: {key: value}}, "tuning=")
        params.update(overrides)
    return params


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def format_entry(match: dict, strategy: str, params: dict, comment: str = "") -> str:
    """A ``[[devices]]`` entry in the table's format, ready for a clgrid/platforms/ file."""
    lines = [f"# {line}" for line in comment.splitlines()] + ["[[devices]]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in match.items()]
    lines.append(f"[devices.{strategy}]")
    lines += [f"{k} = {_toml_value(v)}" for k, v in params.items()]
    return "\n".join(lines) + "\n"
