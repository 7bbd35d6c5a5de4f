"""Capture quality: what a capture's log level, timestamps and thread ids allow to be attributed, said first.

Users paste what they have: debug-level logs (no socket lines), Envoy's default layout (millisecond
timestamps), Istio text without thread ids, excerpts cut at both ends. ``assess`` reads which levels and
which lines a capture holds and turns that into plain statements ("debug level: no socket lines,
downstream_read/downstream_write and event-loop queueing cannot be measured") for the top of every report,
``summary.json`` (``capture_quality``) and ``Capture.quality()``. docs/output.md lists the fields.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import polars as pl

from envoy_dissector.analysis.findings import Finding
from envoy_dissector.analysis.schema import PHASE_SPANS
from envoy_dissector.analysis.stages.fallbacks import BOUNDARY_NAMES
from envoy_dissector.analysis.stages.requests import SOCKET_KINDS, request_uid
from envoy_dissector.analysis.stats import counted as stats_counted
from envoy_dissector.analysis.stats import median as stats_median
from envoy_dissector.analysis.stats import rows_where
from envoy_dissector.analysis.units import format_us
from envoy_dissector.parser.errors import DissectorError, ExitCode
from envoy_dissector.parser.kinds import EventKind

#: Lines Envoy writes only at trace level (on the request path).
TRACE_KINDS = (*SOCKET_KINDS, EventKind.PARSING_BYTES, EventKind.PARSED_BYTES, EventKind.H2_DISPATCHING_BYTES,
               EventKind.MESSAGE_BEGIN, EventKind.COMPLETED_HEADER, EventKind.DECODE_HEADERS_CALLED,
               EventKind.ENCODE_HEADERS_CALLED, EventKind.PROXYING_HEADERS, EventKind.UPSTREAM_RESPONSE_HEADERS,
               EventKind.ENCODING_DATA, EventKind.WRITING_BYTES, EventKind.READ_READY, EventKind.WRITE_READY)
#: Request lines Envoy writes at debug level.
DEBUG_REQUEST_KINDS = (EventKind.NEW_STREAM, EventKind.REQUEST_HEADERS_COMPLETE, EventKind.ROUTE_MATCH,
                       EventKind.POOL_READY, EventKind.UPSTREAM_HEADERS_COMPLETE, EventKind.ENCODING_HEADERS,
                       EventKind.CODEC_COMPLETED_ENCODING, EventKind.ROUTER_DECODING_HEADERS,
                       EventKind.REQUEST_END_STREAM, EventKind.LOCAL_REPLY)
LEVEL_ORDER = ("trace", "debug", "info", "warning", "error", "critical")
#: Fewer client requests than this: no rate is given (a handful of requests is not a rate).
MIN_REQUESTS_FOR_RPS = 20
#: Findings that rest on differences of a few µs: left out when the timestamps are coarser.
SUB_MS_FINDINGS = ("observer-effect", "worker-stalls")
#: Findings that compare phases or event-loop waits within requests: left out at a coarse tick unless the
#: median request spans at least this many ticks (else the figures they quote are rounding).
SHARE_FINDINGS = ("proxy-time", "slow-upstream", "saturated-worker-", "wasm-share", "tracing-share")
MIN_TICKS_FOR_SHARES = 10
RAISE_LEVEL_HINT = ("raise Envoy's level while reproducing: `istioctl proxy-config log POD --level trace` "
                    "(Istio), Envoy's admin `curl -X POST 'localhost:15000/logging?level=trace'` (or start Envoy "
                    "with `-l trace`), or let `envoy-dissect capture POD` do it and put the levels back "
                    "(docs/kubernetes.md)")


class NoRequestLines(DissectorError):
    """The capture has no request line at all (info level, or no traffic): nothing to attribute."""

    exit_code = ExitCode.NO_REQUEST_LINES


@dataclass(frozen=True)
class CaptureQuality:
    #: the most detailed level the capture shows: ``trace``, ``debug`` or ``info`` (info and above)
    level: str
    #: records per level as logged (``{"trace": N, "debug": N, ...}``; ``unknown`` when the format has none)
    levels: dict[str, int]
    #: records that belong to HTTP requests (have a stream id, or are a request lifecycle line)
    request_lines: int
    #: ``read returns``/``write returns``/``socket event`` lines exist (connection logger at trace)
    socket_lines: bool
    #: per-filter lines (``decode headers called``) exist
    filter_lines: bool
    #: timestamp tick in µs: 1 (µs), 1000 (ms) or 1 000 000 (s)
    timestamp_tick_us: int
    #: real thread ids in the records (not inferred lanes)
    thread_ids: bool
    #: phases that are 0 only because their lines are not in the capture
    unmeasured_phases: list[str] = field(default_factory=list)
    #: phases measured from fallback lines (their meaning shifts slightly; docs/phases.md)
    approximate_phases: list[str] = field(default_factory=list)
    #: what can and cannot be attributed, one sentence each
    statements: list[str] = field(default_factory=list)

    @property
    def resolution(self) -> str:
        return {1: "µs", 1000: "ms"}.get(self.timestamp_tick_us, "s")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["timestamp_resolution"] = self.resolution
        return d


_LEVEL_ALIASES = {"warn": "warning", "err": "error", "crit": "critical", "dbg": "debug", "trc": "trace"}


def _level_name(level: str | None) -> str:
    """A level as the counts name it (``WARN`` → ``warning``; none → ``unknown``)."""
    name = (level if level is not None else str(EventKind.UNKNOWN.value)).lower()
    return _LEVEL_ALIASES.get(name, name)


def _in_level_order(levels: dict[str, int]) -> dict[str, int]:
    """Counts per level, the known levels first, most verbose first."""
    return dict(sorted(levels.items(), key=lambda kv: (
        LEVEL_ORDER.index(kv[0]) if kv[0] in LEVEL_ORDER else len(LEVEL_ORDER), kv[0])))


def _levels(records: pl.DataFrame) -> dict[str, int]:
    """Records per level."""
    if "level" not in records.columns or records.height == 0:
        return {}
    out: dict[str, int] = {}
    for level, n in records.group_by("level").len().iter_rows():
        name = _level_name(level)
        out[name] = out.get(name, 0) + n
    return _in_level_order(out)


def _tick(ts: pl.Series) -> int:
    ts = ts.drop_nulls()
    if ts.len() == 0:
        return 1
    if (ts % 1000 != 0).any():
        return 1
    return 1000 if (ts % 1_000_000 != 0).any() else 1_000_000


@dataclass
class RecordFacts:
    """What ``assess`` and ``capture_span`` read from the records, summed over parts of a capture (``add``)."""

    levels: dict[str, int] = field(default_factory=dict)
    kinds: set[str] = field(default_factory=set)
    request_lines: int = 0
    tick: int | None = None  # None: no timed record yet
    thread_ids: bool = False
    #: origin -> (first, last) record time
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: While no request line is seen: connections (origin, id) whose HTTP codec logged a request, and those whose
    #: codec read a response (upstream connections), to name what was seen instead of "no HTTP request".
    codec_conns: set[tuple[str, int]] = field(default_factory=set)
    response_conns: set[tuple[str, int]] = field(default_factory=set)

    def add(self, events: pl.DataFrame) -> None:
        if events.height == 0:
            return
        ts = pl.col("ts_us")
        # (one query: polars runs its parts side by side over the chunk)
        counts, kinds, lines, not_ms, not_s, threads, timed = events.select_seq(
            counts=pl.col("level").value_counts(name="n__").implode(),
            kinds=pl.col("kind").unique().cast(pl.String).implode(),
            lines=_ON_REQUEST.sum(), not_ms=(ts % 1000 != 0).any(), not_s=(ts % 1_000_000 != 0).any(),
            threads=(pl.col("thread") >= 0).any(), timed=ts.is_not_null().any()).row(0)
        for item in counts or []:  # (a handful of levels: no query for them)
            level = _level_name(item["level"])
            self.levels[level] = self.levels.get(level, 0) + int(item["n__"])
        self.kinds |= set(kinds)
        self.request_lines += int(lines)
        if self.request_lines:
            self.codec_conns.clear()
            self.response_conns.clear()
        elif len(self.codec_conns) < MAX_CODEC_CONNS and set(kinds) & _CODEC_KIND_NAMES:
            self._add_codec_conns(events)
        if timed:  # _tick, one part at a time: the finest tick of any part is the capture's
            tick = 1 if not_ms else 1000 if not_s else 1_000_000
            self.tick = tick if self.tick is None else min(self.tick, tick)
        self.thread_ids = self.thread_ids or bool(threads)

    def _add_codec_conns(self, events: pl.DataFrame) -> None:
        on_conn = events.filter(pl.col("conn_id").is_not_null() & pl.col("kind").is_in(
            [*_CODEC_KINDS, EventKind.CLIENT_ON_HEADERS_COMPLETE]))
        for origin, conn, response in on_conn.group_by("origin", "conn_id").agg(
                (pl.col("kind") == EventKind.CLIENT_ON_HEADERS_COMPLETE).any()).iter_rows():
            (self.response_conns if response else self.codec_conns).add((str(origin), int(conn)))

    def unattributed_conns(self) -> list[int]:
        """Connection ids whose codec logged an HTTP request while no line of its stream is in the capture."""
        return sorted({conn for _, conn in self.codec_conns - self.response_conns})

    def add_span(self, origin: str, events: pl.DataFrame) -> None:
        low, high = events.select_seq(low=pl.col("ts_us").min(), high=pl.col("ts_us").max()).row(0)
        if low is None:
            return
        old = self.spans.get(origin)
        self.spans[origin] = (low, high) if old is None else (min(old[0], low), max(old[1], high))

    def levels_in_order(self) -> dict[str, int]:
        return _in_level_order(self.levels)

    def span(self, origin: str | None = None) -> tuple[int | None, int | None]:
        spans = [v for k, v in self.spans.items() if origin is None or k == origin]
        return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else (None, None)


#: An HTTP codec's lines on a connection (no stream id: they come before the connection manager's stream).
_CODEC_KINDS = (EventKind.COMPLETED_HEADER, EventKind.ON_HEADERS_COMPLETE, EventKind.SERVER_ON_HEADERS_COMPLETE,
                EventKind.MESSAGE_BEGIN, EventKind.MESSAGE_COMPLETE, EventKind.PARSED_BYTES,
                EventKind.H2_DISPATCHED_BYTES, EventKind.H2_VISITOR_FRAME_HEADER, EventKind.H2_VISITOR_END_HEADERS)
_CODEC_KIND_NAMES = {k.value for k in _CODEC_KINDS}
#: At most this many such connections are remembered (they are named, not counted).
MAX_CODEC_CONNS = 1000
_ON_REQUEST = pl.col("stream_id").is_not_null() | pl.col("kind").is_in(
    [*DEBUG_REQUEST_KINDS, EventKind.PARSING_BYTES, EventKind.H2_DISPATCHING_BYTES])


def assess(records: pl.DataFrame, events: pl.DataFrame, requests: pl.DataFrame) -> CaptureQuality:
    """Level, timestamp tick and thread ids of a capture, and what they allow to be attributed."""
    facts = RecordFacts()
    facts.add(events)
    facts.levels = _levels(records)
    facts.tick = _tick(records["ts_us"]) if records.height else 1
    facts.thread_ids = bool(records.height and records.select_seq((pl.col("thread") >= 0).any()).item())
    return assess_facts(facts, requests)


def assess_facts(facts: RecordFacts, requests: pl.DataFrame) -> CaptureQuality:
    """``assess`` from facts gathered part by part (streaming analysis)."""
    levels = facts.levels_in_order()
    kinds = facts.kinds
    has_trace = bool(kinds & set(TRACE_KINDS)) or levels.get("trace", 0) > 0
    has_debug = bool(kinds & set(DEBUG_REQUEST_KINDS)) or levels.get("debug", 0) > 0
    level = "trace" if has_trace else "debug" if has_debug else "info"
    request_lines = facts.request_lines
    socket_lines = bool(kinds & set(SOCKET_KINDS))
    filter_lines = EventKind.DECODE_HEADERS_CALLED in kinds
    tick = facts.tick if facts.tick is not None else 1
    thread_ids = facts.thread_ids
    unmeasured: list[str] = []
    approximate: list[str] = []
    said: list[str] = []
    if request_lines == 0 and level == "info":
        said.append(f"info level: no request lines, nothing can be attributed; {RAISE_LEVEL_HINT}")
    elif request_lines == 0 and (unattributed := facts.unattributed_conns()):
        said.append(f"{level} level: HTTP request on {_conn_names(unattributed)}, not attributable (no stream "
                    "lines): its codec's lines are in the capture but no line of its stream (`new stream`, "
                    "router, filters), so there are no phases to attribute")
    elif request_lines == 0:
        said.append(f"{level} level but no HTTP request in the capture (TCP traffic only, or no traffic while it "
                    "was captured): no phases to attribute")
    else:
        client = rows_where(requests, ~pl.col("internal"), ("complete",)) if requests.height else requests
        if not socket_lines:
            unmeasured += ["downstream_read", "response_parse", "downstream_write"]
            approximate += ["header_parse", "upstream_send", "upstream_wait"]
            why = ("debug level: no socket lines" if level == "debug" else
                   "trace level but no socket lines in the capture (connection logger below trace, or left out of "
                   "the excerpt)")
            said.append(f"{why}, so downstream_read, response_parse, downstream_write and "
                        "event-loop queueing cannot be measured (left empty), nor worker utilisation; a request's "
                        "life runs from "
                        "`new stream` to the response's end; header_parse starts at `new stream`, upstream_send "
                        "ends at the upstream `encode complete`/`writing`, upstream_wait includes response parsing"
                        + ("; no per-filter breakdown (wasm_us, tracing_us left empty)" if not filter_lines else ""))
        if not filter_lines and socket_lines:
            said.append("no `decode headers called` lines (trace level): no per-filter breakdown, wasm_us and "
                        "tracing_us left empty")
        if client.height and not client["complete"].any():
            said.append(f"no complete request: all {client.height} client request(s) are cut by the capture or "
                        "lack their first/last line; they are listed below with the phases known")
    if tick >= 1000:
        unit = "ms" if tick == 1000 else "s"
        said.append(f"{unit} timestamps: every figure is ±1 {unit} and shown in {unit}, phases shorter than the tick "
                    f"show as 0; no finding rests on smaller differences"
                    + (" (Envoy's default layout: add %f to --log-format for µs)" if tick == 1000 else ""))
    if not thread_ids:
        said.append("no thread ids: workers are inferred from which connections a request links (lanes), so "
                    "utilisation and event-loop queueing are estimates with lower confidence")
    return CaptureQuality(level=level, levels=levels, request_lines=request_lines, socket_lines=socket_lines,
                          filter_lines=filter_lines, timestamp_tick_us=tick, thread_ids=thread_ids,
                          unmeasured_phases=unmeasured, approximate_phases=approximate, statements=said)


def _conn_names(conns: list[int], shown: int = 5) -> str:
    """``C2``, ``C2, C5``, ``C2, C5, … (12 connections)``."""
    names = ", ".join(f"C{c}" for c in conns[:shown])
    return names + (f", … ({len(conns)} connections)" if len(conns) > shown else "")


def require_request_lines(quality: CaptureQuality, name: str) -> None:
    """Raise ``NoRequestLines`` (exit 8) when the capture cannot hold a request line: info level and above.

    A debug/trace capture without HTTP requests (TCP proxying, no traffic) is analysed: its report says so.
    """
    if quality.request_lines or quality.level != "info":
        return
    counts = ", ".join(f"{k} {v}" for k, v in quality.levels.items()) or "no level field"
    raise NoRequestLines(f"{name}: no request lines ({counts}): the log is at info level, and Envoy logs "
                         f"requests only at debug and trace; {RAISE_LEVEL_HINT}")


def capture_span(records: pl.DataFrame, requests: pl.DataFrame) -> dict[str, Any]:
    """Span of the capture over all records (not only requests), request counts, and a rate when meaningful.

    ``rps`` is null with fewer than ``MIN_REQUESTS_FOR_RPS`` client requests.
    """
    start = records["ts_us"].min() if records.height else None
    end = records["ts_us"].max() if records.height else None
    return span_of(start, end, requests)  # type: ignore[arg-type]


def span_of(start: int | None, end: int | None, requests: pl.DataFrame) -> dict[str, Any]:
    """``capture_span`` from the first and last record time.

    ``rps`` is over the traffic window (``traffic_start_us`` → ``traffic_end_us``: the first client request's
    start → the last one's end), not the log's span: Envoy's start-up and shutdown lines, or an idle stretch
    before and after the load, are not traffic. With several origins (files, pods, the runs of one file) the
    window is the union of theirs (``traffic_s``), so two runs days apart do not count the days between.
    """
    # (the few columns read are filtered, not the wide frame: a filter copies every column it keeps)
    client = requests.select_seq("origin", "internal", "complete", "life_start_us", "life_end_us").filter(
        ~pl.col("internal")) if requests.height else requests
    complete = int(client["complete"].sum()) if client.height else 0
    duration = (int(end) - int(start)) / 1e6 if start is not None and end is not None else 0.0  # type: ignore[arg-type]
    first = client["life_start_us"].min() if client.height else None
    last = client["life_end_us"].max() if client.height else None
    traffic = traffic_seconds(client)
    rps = client.height / traffic if client.height >= MIN_REQUESTS_FOR_RPS and traffic > 0 else None
    return {"start_us": start, "end_us": end, "duration_s": duration, "traffic_start_us": first,
            "traffic_end_us": last, "traffic_s": traffic, "requests": client.height,
            "requests_complete": complete, "requests_incomplete": client.height - complete,
            "internal_requests": requests.height - client.height, "rps": rps}


def traffic_seconds(client: pl.DataFrame) -> float:
    """Seconds covered by the origins' traffic windows (each origin's first request start → last request end),
    overlapping windows counted once."""
    if client.height == 0:
        return 0.0
    windows = (client.group_by("origin").agg(s=pl.col("life_start_us").min(), e=pl.col("life_end_us").max())
               .drop_nulls().sort("s"))
    covered, reach = 0, None
    for s, e in windows.select_seq("s", "e").iter_rows():
        if reach is None or s > reach:
            covered += e - s
            reach = e
        elif e > reach:
            covered += e - reach
            reach = e
    return covered / 1e6


def at_resolution(findings: list[Finding], quality: CaptureQuality, requests: pl.DataFrame) -> list[Finding]:
    """Findings minus those resting on differences below the timestamp tick.

    At a ms (or s) tick: never the per-record observer cost; phase shares, slow-upstream/proxy-time and
    saturated workers (whose evidence is event-loop waits) only when the median complete request spans at
    least ``MIN_TICKS_FOR_SHARES`` ticks.
    """
    tick = quality.timestamp_tick_us
    if tick <= 1:
        return findings
    counted = stats_counted(requests, ("total_us",)) if requests.height else requests
    median = stats_median(counted["total_us"]) if counted.height else None
    long_enough = median is not None and float(median) >= MIN_TICKS_FOR_SHARES * tick  # type: ignore[arg-type]
    return [f for f in findings if f.id not in SUB_MS_FINDINGS
            and (long_enough or not f.id.startswith(SHARE_FINDINGS))]


def _missing(text: str | None) -> set[str]:
    return {part.split(" ", 1)[0] for part in (text or "").split(", ") if part}


def partial_requests(requests: pl.DataFrame, limit: int = 20) -> list[dict[str, Any]]:
    """Client requests not complete: the phases whose two boundaries are both in the capture, and what is missing.
    ``requests`` may come without ``request_uid`` (``Capture.rows_without_uid``): it is made for the rows listed."""
    if requests.height == 0:
        return []
    # (the first rows are found on two columns and only they are taken: the wide frame is not copied)
    # (expressions, not ``requests["internal"]``: indexing a constant column makes the frame keep a full copy)
    cut = ~pl.col("internal") & ~pl.col("complete")
    client = requests.select_seq(pl.col("first_ts").filter(cut), row__=pl.int_range(pl.len(),
                                                                                    dtype=pl.UInt32).filter(cut))
    first = requests[client.sort("first_ts", nulls_last=True).head(limit)["row__"]]
    if "request_uid" not in first.columns:
        first = first.with_columns_seq(request_uid())
    out = []
    for row in first.iter_rows(named=True):
        missing = _missing(row.get("missing_boundaries"))
        unmeasured = set((row.get("unmeasured_phases") or "").split(", "))
        known = {phase.value: row[f"{phase.value}_us"] for phase, a, b in PHASE_SPANS
                 if a not in missing and b not in missing and phase not in unmeasured
                 and row.get(f"{phase}_us") is not None}  # (a measured 0 is known)
        out.append({"request_uid": row["request_uid"], "method": row.get("method"), "path": row.get("path"),
                    "status": row.get("status"), "outcome": row.get("outcome"), "known_phases_us": known,
                    "missing_boundaries": [f"{b} {BOUNDARY_NAMES[b]}" for b in sorted(missing)]})
    return out


class Assessed(Protocol):
    """What the report's quality block reads of a capture (``Capture`` is one; this module imports no capture)."""

    def rows_without_uid(self) -> pl.DataFrame: ...

    def quality(self) -> CaptureQuality: ...


def _short_uid(uid: str, capture: Assessed) -> str:
    """``C12:S345`` when the capture has one origin (the origin is the file name the report names already)."""
    one_origin = capture.rows_without_uid().select_seq(pl.col("origin").n_unique()).item() <= 1
    return ":".join(uid.rsplit(":", 2)[-2:]) if one_origin else uid


def quality_lines(capture: Assessed) -> list[str]:
    """The report's first block: capture quality, then (when no request is complete) the partial requests."""
    q = capture.quality()
    level = q.level + ("" if q.socket_lines or q.level == "info" else " (no socket lines)")
    lines = [f"capture quality: {level} · {q.resolution} timestamps · "
             + ("thread ids" if q.thread_ids else "no thread ids")]
    lines += [f"  - {s}" for s in q.statements]
    rows = capture.rows_without_uid()
    any_complete = rows.select_seq((~pl.col("internal") & pl.col("complete")).any()).item()
    partial = partial_requests(rows) if not any_complete else []
    if partial:
        lines.append("")
        lines.append(f"partial requests (first {len(partial)}): phases known · boundaries missing")
        for p in partial:
            what = f"{p['method'] or '?'} {p['path'] or '?'} → {p['status'] or '?'}"
            known = ", ".join(f"{k} {format_us(v, q.timestamp_tick_us)}" for k, v in p["known_phases_us"].items())
            lines.append(f"  {_short_uid(p['request_uid'], capture)}  {what}  ({p['outcome']})")
            lines.append(f"      known: {known or 'none'}")
            lines.append(f"      missing: {', '.join(p['missing_boundaries']) or 'none'}")
    lines.append("")
    return lines
