"""The span model of the OpenTelemetry export (docs/otel.md): each client request a tree of spans.

* a ``SERVER`` span for the request inside the sidecar, first read → last write (``life_start_us`` →
  ``life_end_us``), with the request's identity and timing as attributes;
* under it a span per phase row that partitions the request's life (``header_parse``, ``router``...), and a
  span per part inside a phase (``filter envoy.filters.http.lua``, ``downstream_write: wasm proxy_on_log``,
  ``upstream_wait: tracing flush S12``) under the phase span that holds it;
* a ``loop_queue`` span per event-loop queueing window, naming the connections the worker served meanwhile;
* a call stitched across two sidecars is one trace: the client sidecar's request gets a ``CLIENT`` span
  ``outbound ...`` (its upstream request sent → response begun), with the network legs as child spans, and is
  the parent of the server sidecar's ``SERVER`` span, whose times are moved onto the client sidecar's clock by
  the estimated offset (``Stitching.clock_offsets``).

Trace context: a request that arrived with ``traceparent`` or B3 headers gets that trace id, and its server span
that parent span; otherwise the trace id is a hash of its ``x-request-id`` (``otel_ids``). Every string that
leaves (span names, attribute values, the origin) goes through the capture's redaction once more.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from itertools import groupby
from typing import Any

import polars as pl

from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.outputs.otel_ids import span_id, trace_id_for_request_id, trace_id_for_uid
from envoy_dissector.analysis.outputs.trace_context import CONTEXT_SCHEMA
from envoy_dissector.analysis.schema import Phase
from envoy_dissector.parser.redact import RedactOption, policy, redact_strings

AttributeValue = str | int | bool | tuple[int, ...]
#: Requests whose spans are handed on together (memory: a batch's spans, not the capture's).
BATCH_REQUESTS = 2_000
#: The server span's attributes: the requests columns of the same name (docs/output.md), when not null.
SERVER_ATTRIBUTES: tuple[str, ...] = (
    "request_uid", "origin", "thread", "downstream_conn_id", "stream_id", "upstream_conn_id", "x_request_id",
    "method", "authority", "path", "status", "protocol", "complete", "cluster", "upstream_attempts", "total_us",
    "envoy_duration_us", "loop_queue_us", "queue_before_read_us", "failure_reason", "outcome",
)
_PHASE_ROW = ("_i", "phase", "detail", "start_us", "end_us", "dur_us", "part_of_total")
_QUEUE_ROW = ("_i", "where", "start_us", "end_us", "dur_us", "conn_ids")
#: What placing a request in its trace reads (of every request at once: a stitched request needs its peer's).
_PLACE_COLUMNS = ("request_uid", "origin", "x_request_id", "ctx_trace_id", "ctx_parent_span_id", "peer_request_uid",
                  "network_out_us", "us_tx_beg_us", "us_rx_beg_us")


class SpanKind(StrEnum):
    SERVER = "server"
    CLIENT = "client"
    INTERNAL = "internal"


@dataclass(frozen=True, slots=True)
class Span:
    """One span, ids in hex and times in epoch µs; ``origin`` names its resource (the sidecar that logged it)."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind
    start_us: int
    end_us: int
    origin: str
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    #: the status description of a failed request (its server span), else ``None``
    error: str | None = None
    #: the parent is a span of another process (the trace context the request arrived with)
    remote_parent: bool = False


def redacted(spans: list[Span], option: RedactOption) -> list[Span]:
    """``spans`` with every string (names, attribute values, origins, status texts) through the capture's
    redaction rules (the ones its log messages went through: header values by name and shape, URL parameters),
    each distinct string once."""
    if policy(option) is None:
        return spans
    texts: set[str] = set()
    for span in spans:
        texts.update((span.name, span.origin))
        texts.update(v for v in span.attributes.values() if isinstance(v, str))
        if span.error is not None:
            texts.add(span.error)
    ordered = sorted(texts)
    clean = dict(zip(ordered, redact_strings(ordered, option), strict=True))
    return [replace(span, name=clean[span.name], origin=clean[span.origin],
                    attributes={k: clean[v] if isinstance(v, str) else v for k, v in span.attributes.items()},
                    error=None if span.error is None else clean[span.error]) for span in spans]


def _int64(value: AttributeValue) -> AttributeValue:
    """OTLP integers are signed 64-bit: a larger one (Envoy's stream ids are unsigned) is written in decimal text."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(1 << 63) <= value < (1 << 63):
        return str(value)
    return value


def _server_name(row: dict[str, Any]) -> str:
    path = (row["path"] or "").split("?", 1)[0]
    return " ".join(x for x in (row["method"], path) if x) or "request"


def _part_name(phase: str, detail: str) -> str:
    """``filter NAME`` for a filter's share (its name is dotted), else ``phase: detail`` (``upstream_wait: tracing
    flush S12``, ``tls_handshake: downstream``)."""
    first = detail.split(" ", 1)[0]
    return f"filter {detail}" if "." in first else f"{phase}: {detail}"


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a request's spans go: its trace, the parent of its server span, and the shift onto the parent's
    clock (µs added to every time)."""

    trace_id: str
    parent: str | None
    remote: bool
    shift_us: int = 0
    clock_offset_us: int | None = None


def _places(rows: list[dict[str, Any]], capture: Capture) -> list[_Place]:
    """Each request's place: stitched inner requests (the server sidecar's) go under their outer request's
    outbound span, on its clock."""
    offsets = {(c.from_, c.to): c.offset_us for c in capture.stitching.clock_offsets}
    own: dict[str, tuple[str, str | None]] = {}
    for row in rows:
        if row["ctx_trace_id"] is not None:
            own[row["request_uid"]] = (row["ctx_trace_id"], row["ctx_parent_span_id"])
        elif row["x_request_id"]:
            own[row["request_uid"]] = (trace_id_for_request_id(row["x_request_id"]), None)
        else:
            own[row["request_uid"]] = (trace_id_for_uid(row["request_uid"]), None)
    by_uid = {row["request_uid"]: row for row in rows}
    places = []
    for row in rows:
        outer = by_uid.get(row["peer_request_uid"]) if row["network_out_us"] is None else None
        if outer is not None and outer["network_out_us"] is not None:
            theta = offsets.get((outer["origin"], row["origin"]), 0)
            parent = span_id(outer["request_uid"], "outbound" if _has_outbound(outer) else "server")
            places.append(_Place(own[outer["request_uid"]][0], parent, False, -theta, theta))
        else:
            trace, parent_span = own[row["request_uid"]]
            places.append(_Place(trace, parent_span, parent_span is not None))
    return places


def _has_outbound(row: dict[str, Any]) -> bool:
    return (row["network_out_us"] is not None and row["us_tx_beg_us"] is not None and row["us_rx_beg_us"] is not None
            and row["us_rx_beg_us"] >= row["us_tx_beg_us"])


def _life(row: dict[str, Any]) -> tuple[int, int]:
    start = row["life_start_us"] if row["life_start_us"] is not None else row["first_ts"]
    end = row["life_end_us"] if row["life_end_us"] is not None else row["last_ts"]
    return int(start), int(max(end, start))


def _request_spans(row: dict[str, Any], place: _Place, phases: list[tuple[Any, ...]],
                   queueing: list[tuple[Any, ...]]) -> list[Span]:
    uid, origin = row["request_uid"], row["origin"]
    trace, s = place.trace_id, place.shift_us
    server = span_id(uid, "server")
    start, end = _life(row)
    attributes: dict[str, AttributeValue] = {}
    for name in SERVER_ATTRIBUTES:
        value = row[name]
        if value is not None:
            attributes[name] = _int64(value)
    if place.clock_offset_us is not None:
        attributes["clock_offset_us"] = place.clock_offset_us
    if row["peer_request_uid"] is not None:
        attributes["peer_request_uid"] = row["peer_request_uid"]
        attributes["peer_origin"] = row["peer_origin"]
    status = row["status"]
    failed = row["failure_reason"] is not None or (status is not None and status >= 500)
    error = (row["failure_reason"] if row["failure_reason"] is not None
             else f"HTTP {status}" if failed else None)
    spans = [Span(trace, server, place.parent, _server_name(row), SpanKind.SERVER, start + s, end + s, origin,
                  attributes, error, place.remote)]
    partition: list[tuple[str, str, int, int]] = []  # (phase, span id, start, end)
    for n, (_i, phase, detail, p_start, p_end, dur, whole) in enumerate(phases):
        if not whole or phase == Phase.LOOP_QUEUE:
            continue
        sid = span_id(uid, f"phase/{n}")
        partition.append((phase, sid, p_start, p_end))
        attrs: dict[str, AttributeValue] = {"phase": phase, "dur_us": dur}
        if detail is not None:
            attrs["detail"] = detail
        spans.append(Span(trace, sid, server, phase, SpanKind.INTERNAL, p_start + s, p_end + s, origin, attrs))
    for n, (_i, phase, detail, p_start, p_end, dur, whole) in enumerate(phases):
        if whole or phase == Phase.LOOP_QUEUE:
            continue
        parent = next((sid for ph, sid, a, b in partition if ph == phase and a <= p_start <= b), server)
        attrs = {"phase": phase, "dur_us": dur}
        if detail is not None:
            attrs["detail"] = detail
        spans.append(Span(trace, span_id(uid, f"part/{n}"), parent, _part_name(phase, detail or phase),
                          SpanKind.INTERNAL, p_start + s, p_end + s, origin, attrs))
    for n, (_i, where, q_start, q_end, dur, conn_ids) in enumerate(queueing):
        parent = next((sid for _ph, sid, a, b in partition if a <= q_start < b), server)
        served = tuple(int(c) for c in conn_ids or ())
        spans.append(Span(trace, span_id(uid, f"queue/{n}"), parent, "loop_queue", SpanKind.INTERNAL, q_start + s,
                          q_end + s, origin, {"where": where, "dur_us": dur, "served_conn_ids": served,
                                              "served": " + ".join(f"C{c}" for c in served)}))
    if _has_outbound(row):
        out_id = span_id(uid, "outbound")
        tx, rx = int(row["us_tx_beg_us"]), int(row["us_rx_beg_us"])
        net_out, net_back = row["network_out_us"], row["network_back_us"]
        legs: dict[str, AttributeValue] = {"peer_origin": row["peer_origin"],
                                           "peer_request_uid": row["peer_request_uid"],
                                           "network_out_us": net_out}
        if net_back is not None:
            legs["network_back_us"] = net_back
        target = row["cluster"] or row["authority"] or "upstream"
        spans.append(Span(trace, out_id, server, f"outbound {target}", SpanKind.CLIENT, tx + s, rx + s, origin,
                          legs))
        if net_out >= 0:
            spans.append(Span(trace, span_id(uid, "network/out"), out_id, "network out", SpanKind.INTERNAL, tx + s,
                              tx + net_out + s, origin, {"network_out_us": net_out}))
        if net_back is not None and net_back >= 0:
            spans.append(Span(trace, span_id(uid, "network/back"), out_id, "network back", SpanKind.INTERNAL,
                              rx - net_back + s, rx + s, origin, {"network_back_us": net_back}))
    return spans


def client_requests(capture: Capture, contexts: pl.DataFrame) -> pl.DataFrame:
    """The client requests (not Envoy's own), each with the trace context it arrived with (``ctx_*``, or null)."""
    ctx = contexts.select_seq(pl.col(c).cast(t) for c, t in CONTEXT_SCHEMA.items()).rename(
        {"conn_id": "downstream_conn_id", "trace_id": "ctx_trace_id", "parent_span_id": "ctx_parent_span_id"})
    client = capture.requests.filter(~pl.col("internal"))
    return client.join(ctx, on=["origin", "downstream_conn_id", "stream_id"], how="left", maintain_order="left",
                       nulls_equal=False)


def capture_spans(capture: Capture, contexts: pl.DataFrame, *, redact: RedactOption = True,
                  batch_requests: int = BATCH_REQUESTS) -> Iterator[list[Span]]:
    """The spans of every client request of ``capture``, a batch of requests at a time, in the requests' order.

    ``contexts``: the trace contexts the requests arrived with (``trace_context.trace_contexts``).
    """
    client = client_requests(capture, contexts).with_row_index("_i")
    index = client.select_seq("_i", "request_uid")
    phases = (capture.phases.join(index, on="request_uid")
              .sort("_i", "start_us", "end_us", "phase", "detail", nulls_last=True, maintain_order=True)
              .select_seq(_PHASE_ROW))
    queueing = capture.queueing.join(index, on="request_uid").sort("_i", "start_us", maintain_order=True).select_seq(
        _QUEUE_ROW)
    places = _places(client.select_seq(_PLACE_COLUMNS).to_dicts(), capture)
    phase_groups = groupby(phases.iter_rows(), key=lambda r: r[0])
    queue_groups = groupby(queueing.iter_rows(), key=lambda r: r[0])
    next_phases, next_queue = next(phase_groups, None), next(queue_groups, None)
    out: list[Span] = []
    rows = (row for start in range(0, client.height, batch_requests)
            for row in client.slice(start, batch_requests).to_dicts())
    for i, (row, place) in enumerate(zip(rows, places, strict=True)):
        mine_p: list[tuple[Any, ...]] = []
        if next_phases is not None and next_phases[0] == i:
            mine_p = list(next_phases[1])
            next_phases = next(phase_groups, None)
        mine_q: list[tuple[Any, ...]] = []
        if next_queue is not None and next_queue[0] == i:
            mine_q = list(next_queue[1])
            next_queue = next(queue_groups, None)
        out.extend(_request_spans(row, place, mine_p, mine_q))
        if (i + 1) % batch_requests == 0:
            yield redacted(out, redact)
            out = []
    if out:
        yield redacted(out, redact)
