"""The OpenTelemetry export without a backend: the span model on real fixtures, trace contexts, ids that repeat,
redaction, and ``--otlp-endpoint`` against a real OTLP/HTTP listener on 127.0.0.1 (a stdlib HTTP server that
decodes what it receives with opentelemetry-proto). tests/otel/test_jaeger.py reads the spans back from Jaeger.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from planted import MARK, planted_text

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.outputs.otel import send_otlp, trace_contexts_of, write_otlp_json
from envoy_dissector.analysis.outputs.otel_ids import trace_id_for_request_id
from envoy_dissector.analysis.outputs.otel_spans import SpanKind, capture_spans
from envoy_dissector.analysis.outputs.trace_context import trace_contexts
from envoy_dissector.analysis.schema import PARTITION_PHASES, Phase
from envoy_dissector.cli.main import main
from envoy_dissector.parser.errors import ExitCode, OutputError

LUA = "istio-thread/lua-cpu/envoy.log.gz"
SEED = "old-format/seed000/envoy.log"


def _spans_of(path: Path) -> list[dict[str, Any]]:
    """Every span of an OTLP/JSON file, with its resource's service.name as ``service``."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            service = next(a["value"]["stringValue"] for a in rs["resource"]["attributes"] if a["key"] == "service.name")
            for ss in rs["scopeSpans"]:
                out += [{**s, "service": service} for s in ss["spans"]]
    return out


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def test_each_client_request_is_one_server_span_with_its_phases(fixtures_dir: Path, tmp_path: Path) -> None:
    cap = dissect(fixtures_dir / LUA)
    out = tmp_path / "r.otlp.json"
    write_otlp_json(cap, str(out), trace_contexts_of(cap))
    spans = _spans_of(out)
    servers = [s for s in spans if s["kind"] == 2]
    client = cap.requests.filter(~pl.col("internal"))
    assert sorted(_attrs(s)["request_uid"] for s in servers) == sorted(client["request_uid"])
    by_id = {s["spanId"]: s for s in spans}
    for server in servers:
        uid = _attrs(server)["request_uid"]
        row = cap.request(uid)
        assert int(server["startTimeUnixNano"]) == row["life_start_us"] * 1000
        assert int(server["endTimeUnixNano"]) == row["life_end_us"] * 1000
        mine = [s for s in spans if s["traceId"] == server["traceId"] and s is not server]
        ours = cap.request_phases(uid).filter(pl.col("phase") != Phase.LOOP_QUEUE)
        got = sorted((_attrs(s)["phase"], _attrs(s).get("detail", ""), int(s["startTimeUnixNano"]) // 1000,
                      (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])) // 1000)
                     for s in mine if "phase" in _attrs(s))
        assert got == sorted(ours.select("phase", pl.col("detail").fill_null(""), "start_us", "dur_us").iter_rows())
        for s in mine:  # partition phases under the server span; parts under a phase of theirs or the server
            parent = by_id[s["parentSpanId"]]
            if s["name"] in PARTITION_PHASES and "detail" not in _attrs(s):
                assert parent is server
            elif s["name"].startswith("filter "):
                assert parent is server or _attrs(parent)["phase"] == _attrs(s)["phase"]
        queued = cap.request_queueing(uid)
        loop_spans = sorted((int(s["startTimeUnixNano"]) // 1000, [int(c) for c in
                             (x["intValue"] for x in _attrs(s)["served_conn_ids"]["values"])])
                            for s in mine if s["name"] == "loop_queue")
        assert loop_spans == sorted(queued.select("start_us", "conn_ids").iter_rows())
    assert any(s["name"] == "filter envoy.filters.http.lua" for s in spans)


def test_the_same_capture_gives_the_same_bytes_streamed_or_whole(fixtures_dir: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    capture = str(fixtures_dir / SEED)
    streamed, whole, again = tmp_path / "s.otlp.json", tmp_path / "w.otlp.json", tmp_path / "a.otlp.json"
    assert main(["analyze", capture, "-o", str(streamed), "-q"]) == 0
    assert main(["analyze", capture, "--keep-events", "-o", str(whole), "-q"]) == 0
    assert main(["analyze", capture, "-o", str(again), "-q"]) == 0
    capsys.readouterr()
    assert streamed.read_bytes() == whole.read_bytes() == again.read_bytes()
    assert _spans_of(streamed)


def test_a_request_carrying_a_trace_context_joins_that_trace(fixtures_dir: Path) -> None:
    cap = dissect(fixtures_dir / SEED)  # the seed's requests carry B3 headers (x-b3-traceid, x-b3-spanid)
    contexts = trace_contexts(cap.events)
    assert contexts.height >= 1
    spans = [s for batch in capture_spans(cap, contexts) for s in batch]
    for origin, conn, stream, trace_id, parent in contexts.iter_rows():
        uid = cap.requests.filter((pl.col("origin") == origin) & (pl.col("downstream_conn_id") == conn)
                                  & (pl.col("stream_id") == stream))["request_uid"][0]
        server = next(s for s in spans if s.kind is SpanKind.SERVER and s.attributes["request_uid"] == uid)
        assert (server.trace_id, server.parent_span_id, server.remote_parent) == (trace_id, parent, True)
        assert all(s.trace_id == trace_id for s in spans if s.parent_span_id == server.span_id)
    plain = dissect(fixtures_dir / LUA)  # no trace headers: the trace id comes from x-request-id, no parent
    servers = [s for batch in capture_spans(plain, trace_contexts(plain.events)) for s in batch
               if s.kind is SpanKind.SERVER]
    assert servers and all(s.trace_id == trace_id_for_request_id(str(s.attributes["x_request_id"]))
                           and s.parent_span_id is None for s in servers)


_DUMP = "[C1][S7] request headers complete (end_stream=true):\n':path', '/'\n{headers}"


@pytest.mark.parametrize(("headers", "expected"), [
    ("'traceparent', '00-" + "a1" * 16 + "-" + "b2" * 8 + "-01'", ("a1" * 16, "b2" * 8)),
    ("'x-b3-traceid', '" + "c3" * 8 + "'\n'x-b3-spanid', '" + "d4" * 8 + "'", ("0" * 16 + "c3" * 8, "d4" * 8)),
    ("'b3', '" + "e5" * 16 + "-" + "f6" * 8 + "-1'", ("e5" * 16, "f6" * 8)),
    ("'traceparent', '00-" + "0" * 32 + "-" + "b2" * 8 + "-01'", None),  # an all-zero trace id is invalid
    ("'traceparent', 'garbage'\n'x-b3-traceid', '" + "c3" * 16 + "'\n'x-b3-spanid', '" + "d4" * 8 + "'",
     ("c3" * 16, "d4" * 8)),  # an invalid traceparent gives way to B3
])
def test_trace_headers(headers: str, expected: tuple[str, str] | None) -> None:
    events = pl.DataFrame({"origin": ["o"], "conn_id": [1], "stream_id": [7], "kind": ["request_headers_complete"],
                           "message": [_DUMP.format(headers=headers)]}, schema_overrides={"stream_id": pl.UInt64})
    found = trace_contexts(events)
    assert (found.select("trace_id", "parent_span_id").row(0) if found.height else None) == expected


def test_every_attribute_is_redacted(fixtures_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "planted.log"
    log.write_text(planted_text(fixtures_dir), encoding="utf-8")
    out = tmp_path / "r.otlp.json"
    assert main(["analyze", str(log), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    assert MARK not in out.read_text(encoding="utf-8")
    # the export redacts on its own too: a capture parsed without redaction leaves it with none
    raw = dissect(str(log), redact=False)
    write_otlp_json(raw, str(out), trace_contexts_of(raw), redact=True)
    assert MARK not in out.read_text(encoding="utf-8")
    write_otlp_json(raw, str(out), trace_contexts_of(raw), redact=False)
    assert MARK in out.read_text(encoding="utf-8")


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[ExportTraceServiceRequest]] = []
    status: ClassVar[int] = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        type(self).received.append(message)
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[ThreadingHTTPServer]:
    _Collector.received, _Collector.status = [], 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_the_endpoint_receives_the_files_spans(fixtures_dir: Path, tmp_path: Path, collector: ThreadingHTTPServer,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.otlp.json"
    url = f"http://127.0.0.1:{collector.server_address[1]}"
    assert main(["analyze", str(fixtures_dir / LUA), "-o", str(out), "--otlp-endpoint", url]) == 0
    assert "spans to" in capsys.readouterr().err
    sent = {(s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.name, s.start_time_unix_nano,
             s.end_time_unix_nano) for m in _Collector.received for rs in m.resource_spans for ss in rs.scope_spans
            for s in ss.spans}
    written = {(s["traceId"], s["spanId"], s.get("parentSpanId", ""), s["name"], int(s["startTimeUnixNano"]),
                int(s["endTimeUnixNano"])) for s in _spans_of(out)}
    assert sent == written and len(sent) > 0


def test_a_refusing_or_absent_endpoint_is_one_line(fixtures_dir: Path, collector: ThreadingHTTPServer,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _Collector.status = 400
    url = f"http://127.0.0.1:{collector.server_address[1]}/v1/traces"
    assert main(["analyze", str(fixtures_dir / SEED), "--otlp-endpoint", url, "-q"]) == ExitCode.OUTPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and url in err[0] and "Traceback" not in err[0], err
    cap = dissect(fixtures_dir / SEED)
    collector.shutdown()
    collector.server_close()
    with pytest.raises(OutputError, match="not accepted after 0 spans"):
        send_otlp(cap, url, trace_contexts_of(cap), timeout_s=1.0)


def test_a_bad_endpoint_url_or_follow_is_a_usage_error(fixtures_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    capture = str(fixtures_dir / SEED)
    assert main(["analyze", capture, "--otlp-endpoint", "127.0.0.1:4318"]) == ExitCode.USAGE
    assert "expected an http:// or https:// URL" in capsys.readouterr().err
    out = tmp_path / "r.otlp.json"
    assert main(["analyze", "--follow", capture, "-o", str(out)]) == ExitCode.USAGE
    assert "not with --follow" in capsys.readouterr().err and not out.exists()
