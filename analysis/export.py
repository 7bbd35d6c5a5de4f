"""Writers for ``-o OUT``: the suffix picks the format."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.trace_export import trace_events
from envoy_dissector.parser.errors import OutputError, UsageError

SUFFIXES = (".trace.json", ".parquet", ".csv", ".jsonl", ".json")


def kind_of(path: str) -> str:
    for suffix in SUFFIXES:
        if path.endswith(suffix):
            return suffix
    raise UsageError(f"-o {path}: unknown output type; use one of {', '.join(SUFFIXES)}")


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def write(capture: Capture, path: str, requests: pl.DataFrame | None = None) -> None:
    """Write ``capture`` to ``path``: requests (.parquet/.csv/.jsonl), summary (.json), trace (.trace.json)."""
    suffix = kind_of(path)
    frame = (requests if requests is not None else capture.requests).select(capture.contract_requests.columns)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".parquet":
            frame.write_parquet(path)
        elif suffix == ".csv":
            frame.write_csv(path)
        elif suffix == ".jsonl":
            frame.write_ndjson(path)
        elif suffix == ".json":
            Path(path).write_text(json.dumps(capture.summary(), indent=2, default=_json_default))
        else:
            Path(path).write_text(json.dumps(trace_events(capture), default=_json_default))
    except OSError as exc:
        raise OutputError(f"cannot write: {exc.strerror}", path=path) from exc
