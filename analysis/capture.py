"""The capture model shared by the CLI, the dashboard and notebooks, and ``dissect()`` that builds it."""
from __future__ import annotations

import copy
import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from envoy_dissector.analysis.engine.events import CaptureEvents, events_of
from envoy_dissector.analysis.engine.facts import CaptureFacts
from envoy_dissector.analysis.engine.reread import LineReader, index_for, request_records
from envoy_dissector.analysis.engine.spill import MEMORY_BUDGET, grouped_by_varying
from envoy_dissector.analysis.engine.stream_capture import PARSE_WORKERS, PREFETCH, regular_files, stream
from envoy_dissector.analysis.engine.streaming import GRACE_US, IDLE_US, MAX_OPEN_REQUESTS, WINDOW_EVENTS, Emit
from envoy_dissector.analysis.engine.uids import UidsToMake
from envoy_dissector.analysis.findings import Finding, all_findings
from envoy_dissector.analysis.quality import (
    CaptureQuality,
    assess_facts,
    at_resolution,
    partial_requests,
    span_of,
)
from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, QUEUEING_SCHEMA
from envoy_dissector.analysis.stages.cost import capture_cost, summary_entry
from envoy_dissector.analysis.stages.loop import worker_stats
from envoy_dissector.analysis.stages.stitch import Stitching
from envoy_dissector.analysis.stats import grouped, percentiles
from envoy_dissector.analysis.units import format_us
from envoy_dissector.parser.pipeline import Diagnostics, ShapeStore
from envoy_dissector.parser.redact import RedactOption
from envoy_dissector.parser.schema import RECORD_COLUMNS
from envoy_dissector.parser.sources import Source, text_source

if TYPE_CHECKING:
    import plotly.graph_objects as go


#: Diagnostics that count the run's work, not the input: grammar calls depend on what the shape cache already
#: held, grammar re-checks on how the input was cut into blocks. ``Capture.diagnostics_dict`` has them; the
#: ``.json`` summary, the same for the same input every run, does not.
RUN_COUNTERS = ("grammar_calls", "fallback_lines")


class RequestDetail(Protocol):
    """Where a capture whose frames in memory were narrowed (the dashboard's, ``dashboard/held.py``) reads one
    request's whole row, phase rows and queueing windows, and how many phase rows it has."""

    def row(self, request: str) -> dict[str, Any]: ...

    def phases(self, row: dict[str, Any]) -> pl.DataFrame: ...

    def queueing(self, row: dict[str, Any]) -> pl.DataFrame: ...

    def phase_rows(self) -> int: ...


class _Requests:
    """``Capture.requests``: the frame given, or one given as ``UidsToMake`` (``dissect``'s) with its uids made
    on first access and kept. The capture's own readers of other columns read ``Capture.rows_without_uid()``, and
    the ``-o`` writers ``Capture.requests_lazy()``: the uid's text (the origin's path on every row) is not held
    whole unless asked for."""

    def __get__(self, capture: Capture | None, owner: type | None = None) -> pl.DataFrame:
        if capture is None:  # (asked by ``dataclass`` for a default: none)
            raise AttributeError("requests")
        held = capture.__dict__["_requests"]
        if isinstance(held, UidsToMake):
            held = held.made()
            capture.__dict__["_requests"] = held
        return held

    def __set__(self, capture: Capture, frame: pl.DataFrame | UidsToMake) -> None:
        capture.__dict__["_requests"] = frame


@dataclass(frozen=True, kw_only=True)
class Capture:
    """Everything known about one capture (one or several logs analysed together)."""

    #: one row per HTTP stream (``REQUEST_FRAME_SCHEMA``): the output-contract columns, then the declared detail
    #: (``dissect`` leaves the uids of a capture to make on first access where ``conclude`` did not read them:
    #: ``engine/uids.py``)
    requests: _Requests = _Requests()
    #: long form: request_uid, phase, detail, start_us, end_us, dur_us, part_of_total
    phases: pl.DataFrame
    #: busy slices per worker: origin, thread, start_us, end_us, conn_id, kind, lines
    loop: pl.DataFrame
    #: line accounting and parser facts
    diagnostics_info: Diagnostics
    notes: tuple[str, ...] = ()
    name: str = "capture"
    #: requests stitched across origins by x-request-id (several proxies of one call), and clock offsets
    stitching: Stitching = field(default_factory=Stitching)
    #: capture-wide facts the summary reads besides the frames (``analysis/engine/facts.py``), gathered as the
    #: input was read
    facts: CaptureFacts
    #: where ``events`` and ``records`` come from: kept while the input was read, or read again on first use
    #: (``analysis/engine/events.py``)
    event_source: CaptureEvents
    #: event-loop queueing windows: request_uid, where, start_us, end_us, dur_us, conn_ids (served meanwhile)
    queueing: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=QUEUEING_SCHEMA))
    #: where a request's lines are read again, one stretch of its input file (``analysis/engine/reread.py``);
    #: ``None``: from ``events`` (log text, several files, stdin)
    line_index: LineReader | None = None
    #: set when ``requests`` holds some columns only and ``phases``/``queueing`` none (the dashboard's capture):
    #: where one request's whole row, phases and windows are read (its capture-wide results were cached before)
    detail: RequestDetail | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def rows_without_uid(self) -> pl.DataFrame:
        """``requests`` without ``request_uid`` while its uids are not made (``requests`` itself when they are):
        for readers of other columns."""
        held = self.__dict__["_requests"]
        return held.without_uid() if isinstance(held, UidsToMake) else held

    def _counted_by_uid(self) -> pl.DataFrame:
        """The requests for readers that read the uids of counted requests only (complete client requests:
        ``findings``, ``cost``): ``requests`` (its uids made) when there is one, else the rows with the uid still
        one null value (a flood of cut requests: nothing of theirs is read by uid, and 0.8 GiB at 10 M is not
        made for it)."""
        held = self.__dict__["_requests"]
        counted = (pl.col("complete") & ~pl.col("internal")).any()
        if not isinstance(held, UidsToMake) or held.rows.select_seq(counted).item():
            return self.requests
        return held.rows

    def requests_lazy(self) -> pl.LazyFrame:
        """``requests`` as a lazy frame: while its uids are not made, a streaming sink makes them a slice at a
        time."""
        return self.__dict__["_requests"].lazy()

    @property
    def events(self) -> pl.DataFrame:
        """Every log record with its kind and typed fields (``EVENT_SCHEMA``), as the analysis read them: each
        restart run its own origin, inferred lanes as threads where the format logs none. Read again from the
        input on first use unless kept (``dissect(keep_events=True)``); input that cannot be read twice (stdin,
        a pipe) without kept events raises ``EventsNotKept``."""
        return self.event_source.frame()

    @property
    def records(self) -> pl.DataFrame:
        """One row per log record: line_no, ts_us, thread, level, logger, source, conn_id, stream_id, message,
        origin (``events``' record columns)."""
        return self.events.select_seq(RECORD_COLUMNS)

    @property
    def holds_events(self) -> bool:
        """Whether ``events`` is in memory (kept, or already read again): asking for it costs nothing."""
        return self.event_source.held

    @property
    def format(self) -> str:
        return self.diagnostics_info.format

    @property
    def wrappers(self) -> list[str]:
        return list(self.diagnostics_info.wrappers)

    @property
    def diagnostics(self) -> pl.DataFrame:
        """Line/record accounting as a frame (``metric``, ``value``); ``summary()['diagnostics']`` as JSON."""
        d = self.diagnostics_dict()
        rows = [(k, v) for k, v in d.items() if isinstance(v, int)]
        rows += [(f"events_by_kind.{k}", v) for k, v in d["events_by_kind"].items()]
        return pl.DataFrame(rows, schema={"metric": pl.String, "value": pl.Int64}, orient="row")

    def diagnostics_dict(self) -> dict[str, Any]:
        d = self.diagnostics_info.as_dict()
        client = ~pl.col("internal")  # (counted, not filtered: a filter copies the wide frame)
        counts = self.rows_without_uid().select_seq(client.sum(), (client & pl.col("complete")).sum().alias("complete"))
        d["requests"] = int(counts.item(0, 0))
        d["requests_complete"] = int(counts.item(0, 1))
        d["warnings"] = list(d["warnings"]) + [n for n in self.notes if n not in d["warnings"]]
        return d

    @property
    def contract_requests(self) -> pl.DataFrame:
        """The requests frame restricted to the output-contract columns."""
        return self.requests.select_seq(CONTRACT_COLUMNS)

    def workers(self) -> pl.DataFrame:
        if "workers" not in self._cache:
            # (the requests' distinct (origin, thread, internal): what it reads of them, the one origin not hashed
            # a row at a time)
            rows = self.rows_without_uid()
            threads = self.facts.worker_threads(grouped_by_varying(rows, ("origin", "thread", "internal")))
            workers = worker_stats(self.loop, rows, threads)
            if not self.quality().socket_lines:  # busy time comes from socket events: unmeasured, not 0
                workers = workers.with_columns_seq(
                    pl.lit(None, dtype=workers.schema["utilisation"]).alias("utilisation"))
            self._cache["workers"] = workers
        return self._cache["workers"]

    def findings(self) -> list[Finding]:
        if "findings" not in self._cache:
            self._cache["findings"] = at_resolution(all_findings(
                self._counted_by_uid(), self.workers(), self.phases, list(self.diagnostics_dict()["warnings"]),
                self.internal_work(), self.facts.gaps, self.facts.health_checks,
                {(c.origin, t): share for c in self.cost() for t, share in c.on_cpu.items()}),
                self.quality(), self.rows_without_uid())
        return self._cache["findings"]

    def quality(self) -> CaptureQuality:
        """Level, timestamp tick, thread ids, and what they allow to be attributed (analysis/quality.py)."""
        if "quality" not in self._cache:
            self._cache["quality"] = assess_facts(self.facts.records, self.rows_without_uid())
        return self._cache["quality"]

    def span(self) -> dict[str, Any]:
        """Capture span over all records, request counts, and ``rps`` (null for fewer than 20 requests)."""
        return span_of(*self.facts.records.span(), self.rows_without_uid())

    def _span_rows(self) -> pl.DataFrame:
        """The requests' columns a span reads (filtered per origin without copying the wide frame)."""
        return self.rows_without_uid().select_seq("origin", "internal", "complete", "life_start_us", "life_end_us")

    def origins(self) -> list[dict[str, Any]]:
        """One entry per origin (input file, pod/container, restart run): its format and its own span."""
        d = self.diagnostics_dict()
        by_source: dict[str, str] = d.get("format_by_source") or {}
        # (an expression: ``requests["origin"]`` would make the frame keep a full copy of a constant column)
        origins = self.rows_without_uid().select_seq(pl.col("origin").unique()).to_series().to_list()
        names = sorted(set(origins) | set(d.get("by_origin") or {}))
        out = []
        for origin in names:
            fmt = by_source.get(origin) or next((f for src, f in by_source.items() if origin.startswith(src)),
                                                d["format"])
            mine = pl.col("origin") == origin
            span = span_of(*self.facts.records.span(origin), self._span_rows().filter(mine))
            out.append({"origin": origin, "format": fmt, **span})
        return out

    def summary(self) -> dict[str, Any]:
        """The ``.json`` summary: format, diagnostics, phase percentiles, workers, findings, groups, what the
        sidecar cost (``cost``: one origin's entry, or one per origin; docs/cost.md). The same
        capture gives the same summary: the run's work counters (``RUN_COUNTERS``) are left out; computed once."""
        if "summary" not in self._cache:
            self._cache["summary"] = self._summary()
        return copy.deepcopy(self._cache["summary"])  # (a caller may change its copy)

    def _summary(self) -> dict[str, Any]:
        workers = self.workers()
        quality = self.quality()
        summary = {
            "format": self.format,
            "wrappers": self.wrappers,
            "capture_quality": quality.as_dict(),
            "capture": {**self.span(), "origins": self.origins()},
            "diagnostics": {k: v for k, v in self.diagnostics_dict().items() if k not in RUN_COUNTERS},
            "phases": percentiles(self.rows_without_uid()),
            "workers": [{**w, "utilisation": None if w["utilisation"] is None else round(w["utilisation"], 4)}
                        for w in workers.iter_rows(named=True)],
            "findings": [f.as_dict() for f in self.findings()],
            "tls_handshakes": self.facts.handshake_counts(),
            "stitching": self.stitching.as_dict(),
            "by": {by: grouped(self.rows_without_uid(), by).head(50).to_dicts()
                   for by in ("authority", "path", "cluster", "status")},
            "cost": summary_entry(self.cost()),
        }
        if not self.rows_without_uid().select_seq((~pl.col("internal") & pl.col("complete")).any()).item():
            summary["partial_requests"] = partial_requests(self.rows_without_uid())
        return summary

    def request(self, request: str | int) -> dict[str, Any]:
        """One request row by ``request_uid``, ``x_request_id`` or row index."""
        return self._request_row(request)

    def _request_row(self, request: str | int | dict[str, Any]) -> dict[str, Any]:
        if isinstance(request, dict):
            return request
        if isinstance(request, int):
            row = self.requests.row(request, named=True)
            return row if self.detail is None else self.detail.row(row["request_uid"])
        if self.detail is not None:
            return self.detail.row(request)
        found = self.requests.filter((pl.col("request_uid") == request) | (pl.col("x_request_id") == request))
        if found.height == 0:
            raise KeyError(f"no request with uid or x-request-id {request!r}")
        return found.row(0, named=True)

    def request_phases(self, request: str | int | dict[str, Any]) -> pl.DataFrame:
        """One request's phase rows in time order (``phases`` itself is not sorted)."""
        row = self._request_row(request)
        if self.detail is not None:
            return self.detail.phases(row)
        uid = row["request_uid"]
        return self.phases.filter(pl.col("request_uid") == uid).sort("start_us", "phase", "detail", nulls_last=True,
                                                                      maintain_order=True)

    def request_queueing(self, request: str | int | dict[str, Any]) -> pl.DataFrame:
        """One request's event-loop queueing windows in time order, each with the connections served meanwhile."""
        row = self._request_row(request)
        if self.detail is not None:
            return self.detail.queueing(row)
        uid = row["request_uid"]
        return self.queueing.filter(pl.col("request_uid") == uid).sort("start_us")

    def request_lines(self, request: str | int | dict[str, Any]) -> pl.DataFrame:
        """The log records of one request: its stream's lines and its connections' lines during its life,
        read again from a stretch of its input file (``analysis/engine/reread.py``), else from ``events``."""
        row = self._request_row(request)
        if self.line_index is None:
            return request_records(self.events, row)
        return self.line_index.lines(row)

    # Figures: the same code the dashboard uses (analysis/outputs/figures.py).
    def waterfall(self, request: str | int | dict[str, Any]) -> go.Figure:
        from envoy_dissector.analysis.outputs import figures

        row = self._request_row(request)
        return figures.waterfall(row, self.request_phases(row))

    def stitched_waterfall(self, request: str | int | dict[str, Any]) -> go.Figure:
        """The call this request belongs to across two proxies (see :mod:`envoy_dissector.analysis.stages.stitch`)."""
        from envoy_dissector.analysis.outputs import figures

        row = self._request_row(request)
        if row.get("peer_request_uid") is None:
            raise KeyError(f"request {row['request_uid']!r} was not stitched to a request of another origin")
        peer = self._request_row(row["peer_request_uid"])
        outer, inner = (row, peer) if row.get("network_out_us") is not None else (peer, row)
        offset = next((c.offset_us for c in self.stitching.clock_offsets
                       if c.from_ == outer["origin"] and c.to == inner["origin"]), 0)
        return figures.stitched_waterfall(outer, self.request_phases(outer), inner, self.request_phases(inner), offset)

    def phase_distribution(self) -> go.Figure:
        from envoy_dissector.analysis.outputs import figures

        return figures.phase_distribution(self.requests)

    def event_loop(self, thread: int | None = None, start: int | None = None, end: int | None = None) -> go.Figure:
        from envoy_dissector.analysis.outputs import figures

        return figures.event_loop(self.loop, thread=thread, start_us=start, end_us=end, internal=self.internal_work())

    def internal_work(self) -> pl.DataFrame:
        """Envoy's own work on its threads (tracing flushes, filter calls such as ext_authz, health checks), one
        row per burst: ``origin, thread, start_us, end_us, kind, label, work_uid, owner_uid``
        (analysis/stages/internal.py)."""
        if "internal_work" not in self._cache:
            self._cache["internal_work"] = self.facts.work_bursts().select_seq(
                "origin", "thread", "start_us", "end_us", "kind", "label", "work_uid", "owner_uid")
        return self._cache["internal_work"]

    def __repr__(self) -> str:
        """A few lines (a notebook's cell or a REPL), not the frames: ``summary()`` and the frames hold the rest."""
        cap = self.summary()["capture"]
        phase_rows = self.phases.height if self.detail is None else self.detail.phase_rows()
        return (f"<Capture {self.name!r}: format {self.format}, {cap['requests']:,} requests "
                f"({cap['requests_complete']:,} complete){_traffic_text(cap)}, {phase_rows:,} phase rows, "
                f"{self.loop.height:,} loop slices>")

    def _repr_html_(self) -> str:
        s = self.summary()
        cap = s["capture"]
        rows = "".join("<tr><td>" + "</td><td>".join([p, *(format_us(v[k]) for k in ("p50", "p90", "p99", "max"))])
                       + "</td></tr>" for p, v in s["phases"].items())
        finds = "".join(f"<li><b>{f['severity']}</b>: {f['title']} — {f['evidence']}</li>" for f in s["findings"])
        quality = "".join(f"<li>{line}</li>" for line in s["capture_quality"]["statements"])
        return (f"<div><b>envoy-dissector capture</b> {html.escape(self.name)}: format {self.format}, "
                f"{cap['requests']:,} requests ({cap['requests_complete']:,} complete){_traffic_text(cap)}"
                f"<ul>{quality}</ul>"
                f"<table><tr><th>phase</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>{rows}</table>"
                f"<ul>{finds}</ul></div>")

    def cost(self) -> list[Any]:
        """What the sidecar cost, one ``stages.cost.Cost`` per origin (docs/cost.md): added latency with and
        without the trace-logging observer, CPU per 1000 requests, the throughput ceiling."""
        if "cost" not in self._cache:
            self._cache["cost"] = capture_cost(self._counted_by_uid(), self.loop, self.workers(), gaps=self.facts.gaps,
                                               busy_measured=self.quality().socket_lines)
        return self._cache["cost"]


def _traffic_text(cap: dict[str, Any]) -> str:
    """The rate over the traffic window (first to last client request), the log's span apart."""
    traffic = cap.get("traffic_s")
    window = f" over {traffic:,.3f} s of traffic" if traffic else ""
    rate = f" at {cap['rps']:,.0f} rps" if cap.get("rps") is not None else ""
    return f"{window}{rate} · log span {cap['duration_s']:,.3f} s"


def _as_source(source: Any) -> Any:
    """A path, list of paths, a Source, or log text (anything containing a newline)."""
    if isinstance(source, Source):
        return source
    if isinstance(source, str) and ("\n" in source or "\t" in source) and not os.path.exists(source):
        return text_source(source)
    if isinstance(source, (str, Path)):
        return str(source)
    if isinstance(source, Sequence):
        if source and all(isinstance(s, Source) for s in source):
            return list(source)
        return [str(s) for s in source]
    raise TypeError(f"cannot read a capture from {type(source).__name__}")


def _label(source: Any, name: str | None) -> str:
    """The capture's name: ``name``, else the path it was read from, else ``capture`` (log text, several files)."""
    return name or (str(source) if isinstance(source, (str, Path)) and "\n" not in str(source) else "capture")


def dissect(source: Any, *, format: str = "auto", log_format: str | None = None, redact: RedactOption = True,
            progress: Callable[[int], None] | None = None, name: str | None = None,
            shapes: ShapeStore | None = None, stop_reading: Callable[[int, int], bool] | None = None,
            keep_events: bool = False, on_finished: Emit | None = None, grace_us: int = GRACE_US,
            idle_us: int = IDLE_US, window_events: int = WINDOW_EVENTS, max_open: int = MAX_OPEN_REQUESTS,
            first_window_events: int | None = None, block_bytes: int | None = None, prefetch: int = PREFETCH,
            spill_budget: int = MEMORY_BUDGET, parse_workers: int = PARSE_WORKERS,
            background_steps: bool = True) -> Capture:
    """Parse and analyse a capture, worker by worker as it is read (``analysis/engine/streaming.py``): memory
    stays bounded whatever the input's size.

    Args:
        source: a path, glob, ``.gz`` file, ``-`` (stdin), a list of those, or the log text itself.
        format: ``auto`` or a format id (``envoy``, ``istio``, ``istio-thread``, ``istio-json``).
        log_format: the Envoy ``--log-format`` string for custom formats.
        redact: replace secret values by ``[redacted]`` (default; a ``Redaction`` adds names, docs/security.md).
        shapes: where the grammar's verdicts per message shape are kept between runs (default: this run
            only; ``envoy_dissector.parser.shape_cache`` is the on-disk store the CLI and dashboard use).
        stop_reading: ``(first_ts_us, latest_ts_us) -> bool``; true stops reading (see ``read_until``).
        keep_events: keep ``events`` in memory while reading (as large as the input), instead of reading the
            input again when they are asked for; the only way to have them for stdin or a pipe.

    The engine's own settings: ``on_finished(requests, phases)`` sees each batch of finished requests as it is
    emitted; ``grace_us``, ``idle_us``, ``window_events``, ``max_open``, ``first_window_events``
    (``streaming.py``); ``block_bytes``, ``parse_workers`` and ``prefetch`` (chunks parsed ahead) for the
    parser; finished output beyond ``spill_budget`` bytes waits in parquet parts (``spill.py``);
    ``background_steps``: window steps on threads of their own while the next chunks are read (the same result
    as in line). Sources are analysed one after
    another: a file's workers are finished when the next file begins.

    >>> cap = dissect("fixtures/istio-thread/keepalive/envoy.log.gz")
    >>> cap.requests.filter("complete").height > 0
    True
    """
    src = _as_source(source)
    done = stream(src, format=format, log_format=log_format, redact=redact, progress=progress, shapes=shapes,
                  stop_reading=stop_reading, on_finished=on_finished, grace_us=grace_us, idle_us=idle_us,
                  window_events=window_events, max_open=max_open, first_window_events=first_window_events,
                  block_bytes=block_bytes, prefetch=prefetch,
                  spill_budget=spill_budget, parse_workers=parse_workers, background_steps=background_steps,
                  keep_events=keep_events, read_ahead=regular_files(source), uids_on_access=True)
    result = done.analysis
    events = events_of(src, kept=done.kept, format=format, log_format=log_format, redact=redact, shapes=shapes,
                       stop_reading=stop_reading)
    return Capture(requests=result.requests if result.uids_made else UidsToMake(result.requests),
                   phases=result.phases, loop=result.loop,
                   diagnostics_info=done.diagnostics, notes=result.notes, name=_label(source, name),
                   stitching=result.stitching, queueing=result.queueing, facts=done.facts, event_source=events,
                   line_index=index_for(src, format=format, log_format=log_format, redact=redact))
