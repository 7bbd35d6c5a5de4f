"""``-o`` files of a follow: requests appended as they finish, then the whole file written again at the end.

``.jsonl`` and ``.csv`` get each batch of finished requests appended as soon as the streaming analysis emits it
(the contract columns; the capture-wide ones — event-loop queueing, stitching — are empty until the end). When
the follow ends, every ``-o`` file is written whole from the final analysis (all or nothing, like ``analyze``),
which replaces the appended file: ``.parquet``, ``.json`` and ``.trace.json`` exist only from then on.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import IO

import polars as pl

from envoy_dissector.analysis.outputs.csv_safe import neutralise_formulas
from envoy_dissector.analysis.outputs.export import kind_of
from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, REQUEST_FRAME_SCHEMA
from envoy_dissector.parser.errors import OutputError

APPENDED_SUFFIXES = (".jsonl", ".csv")


def contract_rows(requests: pl.DataFrame) -> pl.DataFrame:
    """A finished batch in the contract's columns and types (a column the batch lacks is null)."""
    return requests.select(
        (pl.col(c) if c in requests.columns else pl.lit(None)).cast(REQUEST_FRAME_SCHEMA[c]).alias(c)
        for c in CONTRACT_COLUMNS)


class LiveFiles:
    """The appended ``-o`` files; ``add`` is the streaming analysis' ``on_finished`` (called from its step
    threads, in order)."""

    def __init__(self, outputs: list[str]) -> None:
        self._lock = threading.Lock()
        self._files: list[tuple[str, IO[bytes]]] = []
        self.rows = 0
        for out in outputs:
            if kind_of(out) not in APPENDED_SUFFIXES:
                continue
            try:
                Path(out).parent.mkdir(parents=True, exist_ok=True)
                self._files.append((out, open(out, "wb")))  # noqa: SIM115 (closed in close())
            except OSError as exc:
                self.close()
                raise OutputError(f"{out}: cannot write: {exc.strerror or exc}") from exc

    def add(self, requests: pl.DataFrame) -> None:
        if not self._files or requests.height == 0:
            return
        rows = contract_rows(requests)
        with self._lock:
            for out, fh in self._files:
                try:
                    if out.endswith(".csv"):
                        neutralise_formulas(rows).write_csv(fh, include_header=fh.tell() == 0)
                    else:
                        rows.write_ndjson(fh)
                    fh.flush()
                except (OSError, pl.exceptions.PolarsError) as exc:
                    raise OutputError(f"{out}: cannot write: {exc}") from exc
            self.rows += rows.height

    def close(self) -> None:
        with self._lock:
            for _, fh in self._files:
                try:
                    fh.close()
                except OSError:
                    pass
            self._files = []
