"""Tuning parameters for each strategy: table defaults, then the caller's overrides.

The table is data in ``platforms/`` (TOML).  A caller overrides any parameter with
``tuning={...}``; an unknown name or a value of the wrong type is an error that
names it.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

__all__ = ["platform_dir", "load_table", "resolve_tuning"]


def platform_dir() -> Path:
    """The tuning table: in a source checkout, or inside the installed package."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "platforms", here / "platforms"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("platforms/ not found beside or inside the clgrid package")


@lru_cache(maxsize=None)
def load_table(name: str = "generic") -> dict:
    path = platform_dir() / f"{name}.toml"
    with open(path, "rb") as f:
        return tomllib.load(f)


def resolve_tuning(strategy: str, overrides: dict | None = None, device=None) -> dict:
    """Parameters for ``strategy``: table defaults with ``overrides`` applied on top."""
    defaults = dict(load_table()[strategy])
    for key, value in (overrides or {}).items():
        if key not in defaults:
            raise ValueError(f"unknown tuning parameter {key!r} for {strategy!r}; "
                             f"known: {sorted(defaults)}")
        if type(value) is not type(defaults[key]):
            raise TypeError(f"tuning parameter {key!r} must be {type(defaults[key]).__name__}, "
                            f"got {type(value).__name__}")
        defaults[key] = value
    return defaults
