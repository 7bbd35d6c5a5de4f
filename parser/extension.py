"""The compiled extension (``native/``, Rust, built by ``pip install`` where cargo is found): whether it is here
and on, and its Arrow columns as polars frames. ``parser/native.py`` holds the functions that use it; this
module imports nothing of the parser's, so that any module may ask."""
from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import polars as pl

_native: ModuleType | None
try:
    from envoy_dissector.parser import _native  # type: ignore[attr-defined,no-redef]
except ImportError:  # built without cargo: the polars paths do all the work
    _native = None


def available() -> bool:
    """The extension was built and imports."""
    return _native is not None


def enabled() -> bool:
    """Built, and not turned off (``ENVOY_DISSECTOR_NATIVE=0``)."""
    return available() and os.environ.get("ENVOY_DISSECTOR_NATIVE", "1") not in ("0", "false", "no")


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
