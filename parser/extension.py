"""The compiled extension (``native/``, Rust, built by ``pip install`` where cargo is found): whether it is here
and on, and its Arrow columns as polars frames. ``parser/native.py`` holds the functions that use it; this
module imports nothing of the parser's, so that any module may ask."""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import polars as pl

_native: ModuleType | None
_why_missing = ""
try:
    from envoy_dissector.parser import _native  # type: ignore[attr-defined,no-redef]
except ImportError as exc:  # built without cargo: the polars paths do all the work
    _native = None
    _why_missing = str(exc)
_warned = False


def available() -> bool:
    """The extension was built and imports."""
    return _native is not None


def _turned_off() -> bool:
    return os.environ.get("ENVOY_DISSECTOR_NATIVE", "1") in ("0", "false", "no")


def enabled() -> bool:
    """Built, and not turned off (``ENVOY_DISSECTOR_NATIVE=0``). Asked where a step chooses its path, so the
    first run without the build says once, on stderr, that the slower path is taken (``warn_once``)."""
    if _native is None and not _turned_off():
        warn_once()
    return available() and not _turned_off()


def status() -> str:
    """``on``, or ``off (why)``: the line ``envoy-dissect --version`` prints after ``compiled parser:``."""
    if _native is None:
        return (f"off (not built: {_why_missing or 'no extension module'}; `pip install` builds it where cargo "
                "is found, or install a wheel that carries it)")
    if _turned_off():
        return "off (ENVOY_DISSECTOR_NATIVE=0)"
    return "on"


def warn_once() -> None:
    """One line on stderr, the first time in a process: the extension is missing, parsing takes the polars path."""
    global _warned
    if not _warned:
        _warned = True
        print(f"envoy-dissector: warning: compiled parser {status()}: parsing takes the polars path "
              "(same results, about 35 % more CPU)", file=sys.stderr)


def module() -> ModuleType:
    assert _native is not None, "the compiled extension was not built"
    return _native


class _Column:
    """A column the extension made, as the Arrow PyCapsule interface hands it to polars."""

    def __init__(self, pair: tuple[Any, Any]) -> None:
        self._pair = pair

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[Any, Any]:
        return self._pair


def series(columns: dict[str, tuple[Any, Any]], name: str) -> pl.Series:
    """The extension's column ``name`` as a Series."""
    return pl.Series(_Column(columns[name])).alias(name)


def frame(columns: dict[str, tuple[Any, Any]], names: Sequence[str]) -> pl.DataFrame:
    """The extension's columns ``names`` (those it gave) as a frame."""
    return pl.DataFrame([series(columns, name) for name in names if name in columns])
