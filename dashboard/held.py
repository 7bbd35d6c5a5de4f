"""What the dashboard keeps of an analysed capture: a narrow requests frame in memory, the rest on disk.

The views need every request only for the grid (the output-contract columns), the overview's figures
(``life_start_us`` besides) and a few counts; the other columns of the requests frame (boundary texts,
``b0..b9``, detail), the phases and the queueing windows are read for one request at a time (its waterfall,
its wait points, its log lines). So :func:`hold` computes everything capture-wide once (the summary, findings,
workers, cost, quality, internal work: ``Capture`` caches them), writes the full requests frame, the phases and
the queueing windows to parquet in a private directory, and keeps in memory the contract columns with repeated
text as enums (one copy of each distinct value). :class:`Detail` reads one request's row, phases or windows back
(row groups of ``ROW_GROUP`` rows: one is read, found by position or by the uid's statistics).

The held frame shares its columns with the whole one (no copy while both are alive, at the analysis's peak)
and keeps its order, so a row's position in the frame is its row in the parquet file.

>>> from envoy_dissector.analysis.capture import dissect
>>> import tempfile
>>> held = hold(dissect("fixtures/istio-thread/keepalive/envoy.log.gz"), Path(tempfile.mkdtemp()))
>>> uid = held.capture.requests["request_uid"][0]
>>> held.detail.row(uid)["request_uid"] == uid, "b0" in held.capture.requests.columns
(True, False)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, QUEUEING_SCHEMA
from envoy_dissector.analysis.stats import counted
from envoy_dissector.parser.errors import DissectorError

#: Columns of the requests frame the dashboard keeps in memory: the grid's, and what the overview's figures read.
HELD_COLUMNS: tuple[str, ...] = (*CONTRACT_COLUMNS, "life_start_us")
#: Text columns whose values repeat (kept as an enum of their distinct values, sorted: the grid sorts them as text).
REPEATED_TEXT: tuple[str, ...] = ("origin", "method", "authority", "path", "protocol", "failure_reason")
#: Rows per parquet row group: reading one request reads one group.
ROW_GROUP = 4096
#: lz4: written in a fraction of zstd's time (the files are a few percent of the frames anyway)
PARQUET: dict[str, Any] = {"row_group_size": ROW_GROUP, "statistics": True, "compression": "lz4"}


@dataclass(frozen=True)
class Detail:
    """One capture's per-request detail on disk: the full requests rows (in the held frame's order), phases and
    queueing windows (sorted by ``request_uid``)."""

    directory: Path
    uids: pl.Series
    x_request_ids: pl.Series

    @property
    def requests_path(self) -> Path:
        return self.directory / "requests.parquet"

    def position(self, request: str) -> int:
        """The row of a request by ``request_uid`` or ``x_request_id`` (``KeyError`` when none)."""
        for column in (self.uids, self.x_request_ids):
            found = column.eq(request).arg_true()
            if found.len():
                return int(found[0])
        raise KeyError(f"no request with uid or x-request-id {request!r}")

    def row(self, request: str | dict[str, Any]) -> dict[str, Any]:
        """The full requests-frame row (every column ``Capture.requests`` had)."""
        if isinstance(request, dict):
            return request
        at = self.position(request)
        return pl.scan_parquet(self.requests_path).slice(at, 1).collect().row(0, named=True)

    def phases(self, row: dict[str, Any]) -> pl.DataFrame:
        """``Capture.request_phases``: the request's phase rows in time order."""
        return (self._of("phases", row["request_uid"])
                .sort("start_us", "phase", "detail", nulls_last=True, maintain_order=True))

    def queueing(self, row: dict[str, Any]) -> pl.DataFrame:
        """``Capture.request_queueing``: the request's event-loop queueing windows in time order."""
        return self._of("queueing", row["request_uid"]).sort("start_us")

    def phase_rows(self) -> int:
        """The capture's phase rows (read from the file's metadata)."""
        return int(pl.scan_parquet(self.directory / "phases.parquet").select(pl.len()).collect().item())

    def _of(self, name: str, uid: str) -> pl.DataFrame:
        return pl.scan_parquet(self.directory / f"{name}.parquet").filter(pl.col("request_uid") == uid).collect()


@dataclass(frozen=True)
class Held:
    """An analysed capture as the dashboard keeps it."""

    #: the capture with the narrow requests frame (``HELD_COLUMNS``) and no phases or queueing rows; its
    #: capture-wide results (summary, findings, workers, cost, quality, internal work) were computed on the whole
    #: frames, and one request's row, phases and windows are read from ``detail`` (``Capture.detail``)
    capture: Capture
    summary: dict[str, Any]
    detail: Detail
    #: the slowest counted request (else the slowest of all): the waterfall shown before a row is chosen
    slowest_uid: str | None
    client_requests: int
    #: the slowest request's log lines (the waterfall shown first is its; read while the capture was held)
    slowest_lines: pl.DataFrame | None = None


def hold(capture: Capture, directory: Path) -> Held:
    """Compute the capture-wide results, write the detail to ``directory`` (created; the caller removes it)
    and narrow the frames held in memory."""
    summary = capture.summary()  # (computes and caches findings, workers, cost, quality on the whole frames)
    capture.internal_work()
    requests = capture.requests
    directory.mkdir(parents=True, exist_ok=True)
    requests.write_parquet(directory / "requests.parquet", **PARQUET)
    capture.phases.sort("request_uid", maintain_order=True).write_parquet(
        directory / "phases.parquet", **PARQUET)
    capture.queueing.sort("request_uid", maintain_order=True).write_parquet(
        directory / "queueing.parquet", **PARQUET)
    narrow = requests.select(c for c in HELD_COLUMNS if c in requests.columns).with_columns(
        pl.col(c).cast(pl.Enum(requests[c].drop_nulls().unique().sort())) for c in REPEATED_TEXT
        if c in requests.columns and requests.schema[c] == pl.String)
    detail, slowest = Detail(directory, narrow["request_uid"], narrow["x_request_id"]), _slowest(narrow)
    # (its requests, phases and queueing windows are read from the detail: ``capture.request(uid)`` is the whole row)
    slim = dataclasses.replace(capture, requests=narrow, phases=capture.phases.clear(),
                               queueing=pl.DataFrame(schema=QUEUEING_SCHEMA), detail=detail)
    return Held(capture=slim, summary=summary, detail=detail, slowest_uid=slowest,
                client_requests=int((~narrow["internal"]).sum()),
                slowest_lines=None if slowest is None else _lines(slim, detail.row(slowest)))


def _lines(capture: Capture, row: dict[str, Any]) -> pl.DataFrame | None:
    """One request's lines, read now: the pass over the whole file that indexes them for reading again
    (``analysis/engine/reread.py``; a gzip upload decompressed and redacted) is then part of the analysis, not
    of the first view that asks (it grows with the file: seconds for a large upload). ``None`` when they cannot
    be read (the view says why, when asked)."""
    try:
        return capture.request_lines(row)
    except (ValueError, OSError, DissectorError):
        return None


def _slowest(requests: pl.DataFrame) -> str | None:
    r = counted(requests)
    if r.height == 0:
        r = requests
    if r.height == 0:
        return None
    at = r["total_us"].arg_max()
    return str(r["request_uid"][at if at is not None else 0])


__all__ = ["HELD_COLUMNS", "Detail", "Held", "hold"]
