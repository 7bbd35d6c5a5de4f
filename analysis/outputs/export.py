"""Writers for ``-o OUT``: the suffix picks the format."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.outputs.csv_safe import neutralise_formulas
from envoy_dissector.analysis.outputs.output_file import output_path
from envoy_dissector.analysis.outputs.trace_export import trace_events
from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, PEER_SCHEMA
from envoy_dissector.analysis.stages.cost import summary_entry
from envoy_dissector.parser.errors import UsageError

SUFFIXES = (".trace.json", ".parquet", ".csv", ".jsonl", ".json")
#: ``--columns``: the contract columns (docs/output.md), or every column of the requests frame (the contract,
#: then the declared detail columns and the peers).
Columns = Literal["contract", "all"]
COLUMN_CHOICES: tuple[Columns, ...] = ("contract", "all")


def summary_json(capture: Capture) -> dict[str, Any]:
    """The ``.json`` output: ``Capture.summary()`` and what the sidecar cost (``cost``; docs/cost.md)."""
    return {**capture.summary(), "cost": summary_entry(capture.cost())}


def kind_of(path: str) -> str:
    for suffix in SUFFIXES:
        if path.endswith(suffix):
            return suffix
    raise UsageError(f"-o {path}: unknown output type; use one of {', '.join(SUFFIXES)}")


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def export_columns(requests: pl.DataFrame | pl.LazyFrame, columns: Columns = "contract") -> list[str]:
    """The requests columns a file export carries: the contract, with the stitched peer columns when the
    capture has more than one origin (docs/output.md); ``"all"``: every column of the frame."""
    if columns == "all":
        return requests.collect_schema().names()
    # (an expression: ``requests["origin"]`` would materialise a constant column, spill.py, and keep it)
    origins = requests.lazy().select_seq(pl.col("origin").n_unique()).collect().item()
    peers = list(PEER_SCHEMA) if origins > 1 else []
    return [*CONTRACT_COLUMNS, *peers]


def write(capture: Capture, path: str, requests: pl.DataFrame | None = None, columns: Columns = "contract") -> None:
    """Write ``capture`` to ``path``: requests (.parquet/.csv/.jsonl), summary (.json), trace (.trace.json).

    All or nothing (output_file.py); CSV text cells that look like formulas are neutralised (csv_safe.py).
    The rows are streamed out a slice at a time (the bytes ``write_parquet``/``write_csv``/``write_ndjson`` of
    the whole frame give): a capture whose uids are not made yet makes them as they are written
    (``Capture.requests_lazy``), never the whole column.
    """
    suffix = kind_of(path)
    chosen = requests.lazy() if requests is not None else capture.requests_lazy()
    frame = chosen.select_seq(export_columns(chosen, columns))
    with output_path(path) as out:
        if suffix == ".parquet":
            frame.sink_parquet(out, engine="streaming")
        elif suffix == ".csv":
            neutralise_formulas(frame).sink_csv(out, engine="streaming")
        elif suffix == ".jsonl":
            frame.sink_ndjson(out, engine="streaming")
        elif suffix == ".json":
            Path(out).write_text(json.dumps(summary_json(capture), indent=2, default=_json_default))
        else:
            Path(out).write_text(json.dumps(trace_events(capture), default=_json_default))
