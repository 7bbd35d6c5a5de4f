"""Every wrapper kind (parser/wrappers.py, parser/detect.py): a lab capture wrapped the way each tool
writes it parses into the same events as the bare capture; real pasted excerpts are read.

The lab segments come from fixtures/envoy-us/keepalive and fixtures/istio-thread/keepalive (real Envoy
1.40 captures with header dumps); each wrapper is applied to every physical line, as the tool does.
"""
from __future__ import annotations

import gzip
import json

import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.parser.pipeline import parse_text

POD = "productpage-v1-7d9c8b6f5-x2k9p"


def _read_gz(path) -> str:
    with gzip.open(path, "rt") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def segments(fixture_by_rel) -> dict[str, list[str]]:
    out = {}
    for name, rel in (("envoy", "envoy-us/keepalive/envoy.log.gz"), ("istio", "istio-thread/keepalive/envoy.log.gz")):
        lines = _read_gz(fixture_by_rel(rel).path).splitlines()
        start = next(i for i in range(150, len(lines)) if "new stream" in lines[i])
        end = next(i for i in range(start + 250, len(lines)) if "new stream" in lines[i])
        out[name] = lines[start:end]
    return out


def _same_events(bare: list[str], wrapped: list[str], *, line_no: bool = True):
    a = parse_text("\n".join(bare) + "\n")
    b = parse_text("\n".join(wrapped) + "\n")
    assert b.diagnostics.lines_malformed == a.diagnostics.lines_malformed == 0
    assert b.diagnostics.lines_read == b.diagnostics.lines_in_records
    drop = ["origin"] if line_no else ["origin", "line_no"]
    assert_frame_equal(a.events.drop(drop), b.events.drop(drop))
    return b


def _rfc3339(i: int) -> str:
    return f"2026-11-22T01:09:{i % 60:02d}.{i:06d}123Z"


WRAP = {
    # docker compose v2 pads the service name; an empty line is printed as `svc  | `
    "docker-compose": (lambda i, line: f"envoy-1  | {line}", "envoy-1"),
    "stern": (lambda i, line: f"{POD} istio-proxy {line}", f"{POD}/istio-proxy"),
    "kail": (lambda i, line: f"default/{POD}[istio-proxy]: {line}", f"{POD}/istio-proxy"),
    "syslog": (lambda i, line: f"Dec 16 23:11:22 node-1 envoy[4242]: {line}", None),
    "logcat": (lambda i, line: f"11-22 01:09:45.601  4242  4301 D Envoy   : {line}", None),
    "grep": (lambda i, line: f"{i + 1}:{line}", None),
    "line-numbers": (lambda i, line: f"{i + 1:>6}\t{line}", None),
}


@pytest.mark.parametrize("wrapper", sorted(WRAP))
@pytest.mark.parametrize("capture", ["envoy", "istio"])
def test_prefix_wrappers_are_stripped(segments, wrapper, capture):
    wrap, origin = WRAP[wrapper]
    bare = segments[capture]
    parsed = _same_events(bare, [wrap(i, line) for i, line in enumerate(bare)])
    assert parsed.diagnostics.wrappers == [wrapper]
    if origin is not None:
        assert parsed.events["origin"].unique().to_list() == [origin]


def test_stern_with_ansi_colours_and_kubectl_timestamps(segments):
    bare = segments["istio"]
    wrapped = [f"\x1b[32m{POD}\x1b[0m \x1b[36mistio-proxy\x1b[0m {_rfc3339(i)} {line}" for i, line in enumerate(bare)]
    parsed = _same_events(bare, wrapped)
    assert parsed.diagnostics.wrappers == ["ansi-colours", "stern", "kubectl-timestamps"]


def test_grep_context_output_with_separators(segments):
    """`grep -n -A3`: matches as `N:`, context as `N-`, groups split by `--` lines."""
    bare = segments["envoy"]
    wrapped = []
    for i, line in enumerate(bare):
        wrapped.append(f"{i + 1}{':' if 'new stream' in line else '-'}{line}")
        if i in (40, 90):
            wrapped.append("--")
    a = parse_text("\n".join(bare) + "\n")
    b = parse_text("\n".join(wrapped) + "\n")
    assert b.diagnostics.wrappers == ["grep"]
    d = b.diagnostics
    assert d.lines_read == len(wrapped) == d.lines_in_records + d.lines_malformed
    assert d.lines_malformed == 0  # a separator is an empty line inside the record above it
    assert_frame_equal(a.events.drop("line_no", "n_lines"), b.events.drop("line_no", "n_lines"))


def test_grep_over_several_files_names_the_origin(segments):
    bare = segments["envoy"]
    wrapped = [f"{'a' if i < 120 else 'b'}-proxy.log:{i + 1}:{line}" for i, line in enumerate(bare)]
    parsed = parse_text("\n".join(wrapped) + "\n")
    assert parsed.diagnostics.wrappers == ["grep"]
    assert sorted(parsed.events["origin"].unique()) == ["a-proxy.log", "b-proxy.log"]


def test_journald_short_iso(segments):
    bare = segments["envoy"]
    parsed = _same_events(bare, [f"2026-11-22T01:09:45+0000 node-1 envoy[4242]: {line}" for line in bare])
    assert parsed.diagnostics.wrappers == ["syslog"]


def test_logcat_brief_format(segments):
    bare = segments["envoy"]
    parsed = _same_events(bare, [f"D/Envoy   ( 4242): {line}" for line in bare])
    assert parsed.diagnostics.wrappers == ["logcat"]


JSON_WRAP = {
    "docker-json": (lambda i, line: {"log": line + "\n", "stream": "stderr", "time": _rfc3339(i)}, None),
    "json-log": (lambda i, line: {"log": line + "\n", "kubernetes": {"pod_name": POD, "container_name": "istio-proxy"}},
                 f"{POD}/istio-proxy"),
    "json-message": (lambda i, line: {"message": line, "timestamp": _rfc3339(i), "kubernetes": {
        "pod_name": POD, "container_name": "istio-proxy", "namespace_name": "default"}}, f"{POD}/istio-proxy"),
    "json-textPayload": (lambda i, line: {"textPayload": line, "resource": {"type": "k8s_container", "labels": {
        "pod_name": POD, "container_name": "istio-proxy"}}, "timestamp": _rfc3339(i)}, f"{POD}/istio-proxy"),
    "json-line": (lambda i, line: {"labels": {"pod": POD, "container": "istio-proxy"}, "line": line,
                                   "timestamp": _rfc3339(i)}, f"{POD}/istio-proxy"),
}


@pytest.mark.parametrize("wrapper", sorted(JSON_WRAP))
@pytest.mark.parametrize("capture", ["envoy", "istio"])
def test_json_wrappers_are_unwrapped(segments, wrapper, capture):
    wrap, origin = JSON_WRAP[wrapper]
    bare = segments[capture]
    parsed = _same_events(bare, [json.dumps(wrap(i, line)) for i, line in enumerate(bare)])
    assert parsed.diagnostics.wrappers == [wrapper]
    if origin is not None:
        assert parsed.events["origin"].unique().to_list() == [origin]


def test_docker_json_around_istio_json(fixture_by_rel):
    """docker's json-file driver around Istio's own JSON lines: the inner JSON is the format."""
    lines = _read_gz(fixture_by_rel("istio-json/keepalive/envoy.log.gz").path).splitlines()[:300]
    wrapped = [json.dumps({"log": line + "\n", "stream": "stdout", "time": _rfc3339(i)})
               for i, line in enumerate(lines)]
    parsed = _same_events(lines, wrapped)
    assert parsed.diagnostics.wrappers == ["docker-json"]
    assert parsed.diagnostics.format == "istio-json"


def test_istio_json_is_not_mistaken_for_a_shipper_msg_key(fixture_by_rel):
    lines = _read_gz(fixture_by_rel("istio-json-old/keepalive/envoy.log.gz").path).splitlines()[:300]
    parsed = parse_text("\n".join(lines) + "\n")
    assert parsed.diagnostics.wrappers == [] and parsed.diagnostics.format == "istio-json"


@pytest.mark.parametrize("capture", ["envoy", "istio"])
def test_crlf_is_reported_with_other_wrappers(segments, capture):
    bare = segments[capture]
    parsed = parse_text("\r\n".join(f"envoy-1  | {line}" for line in bare) + "\r\n")
    assert parsed.diagnostics.wrappers == ["crlf", "docker-compose"]
    assert_frame_equal(parse_text("\n".join(bare) + "\n").events.drop("origin"), parsed.events.drop("origin"))


# -- Istio text whose tabs became spaces ------------------------------------------------------------------

def test_istio_thread_tabs_expanded_to_spaces(segments):
    bare = segments["istio"]
    parsed = _same_events(bare, [line.expandtabs(8) for line in bare])
    assert parsed.diagnostics.wrappers == ["tabs-as-spaces"]
    assert parsed.diagnostics.format == "istio-thread"
    assert parsed.events["thread"].null_count() == 0


def test_istio_old_tabs_as_single_spaces(fixture_by_rel):
    """Request lines (a message's own leading spaces, as in startup listings, cannot survive the paste)."""
    lines = _read_gz(fixture_by_rel("istio/keepalive/envoy.log.gz").path).splitlines()
    start = next(i for i in range(150, len(lines)) if "new stream" in lines[i])
    lines = lines[start:start + 300]
    parsed = _same_events(lines, [line.replace("\t", "    ") for line in lines])
    assert parsed.diagnostics.format == "istio"


def test_kubectl_timestamps_do_not_swallow_istio_time_when_tabs_became_spaces(segments):
    bare = segments["istio"]
    wrapped = [f"{_rfc3339(i)} {line.expandtabs(8)}" for i, line in enumerate(bare)]
    parsed = _same_events(bare, wrapped)
    assert parsed.diagnostics.wrappers == ["kubectl-timestamps", "tabs-as-spaces"]
    # the record's time is Istio's, not kubectl's
    assert_frame_equal(parse_text("\n".join(bare) + "\n").events.select("ts_us"), parsed.events.select("ts_us"))


def test_istio_without_wrappers_has_none(segments):
    """A leading RFC 3339 time followed by a tab is Istio's own, not `kubectl --timestamps`."""
    assert parse_text("\n".join(segments["istio"]) + "\n").diagnostics.wrappers == []


# -- real pasted excerpts (copied from public threads; provenance on each) ---------------------------------

# github.com/envoyproxy/envoy/issues/13068 (comment, 2022-07-23): stern output of an Istio 1.12-era sidecar,
# tabs turned into spaces by the paste; the `...` is the author's elision.
ISSUE_13068 = (
    'svc-one-deployment-7d8dcc748-4v7tp istio-proxy 2022-07-21T10:51:54.739441Z      debug   en'
    'voy http      [C440203][S374698705624913161] request end stream\n'
    'svc-one-deployment-7d8dcc748-4v7tp istio-proxy 2022-07-21T10:51:54.763924Z      debug   en'
    'voy upstream  transport socket match, socket tlsMode-disabled selected for host with addre'
    'ss 10.*.*.43:8002\n'
    '...\n'
    'svc-one-deployment-7d8dcc748-4v7tp istio-proxy 2022-07-21T10:51:59.742415Z      debug   en'
    'voy router    [C440203][S374698705624913161] upstream timeout\n'
)


def test_real_stern_tabs_as_spaces_paste():
    parsed = parse_text(ISSUE_13068)
    d = parsed.diagnostics
    assert d.wrappers == ["stern", "tabs-as-spaces"] and d.format == "istio"
    assert parsed.events["kind"].cast(str).to_list() == ["request_end_stream", "background", "upstream_timeout"]
    assert parsed.events["origin"].unique().to_list() == ["svc-one-deployment-7d8dcc748-4v7tp/istio-proxy"]
    assert parsed.events["ts_us"][-1] - parsed.events["ts_us"][0] == 5_002_974
    # the elision is counted, with the origin of the lines around it
    assert d.lines_malformed == 1 and d.malformed_examples == ["svc-one-deployment-7d8dcc748-4v7tp/istio-proxy:3: ..."]


# github.com/envoyproxy/envoy/issues/36712 (2024-10-20): stern `POD CONTAINER ` on Envoy 1.32 debug lines,
# the prefix also on the dump lines and the dump's closing empty line.
ISSUE_36712 = (
    'envoy-5575cc449d-mkc8s envoy [2024-10-20 16:37:21.365][24][debug][router] [source/common/r'
    'outer/router.cc:1551] [Tags: "ConnectionId":"275","StreamId":"1106665781191118731"] upstre'
    'am headers complete: end_stream=false\n'
    'envoy-5575cc449d-mkc8s envoy [2024-10-20 16:37:21.365][24][debug][http] [source/common/htt'
    'p/conn_manager_impl.cc:1825] [Tags: "ConnectionId":"275","StreamId":"1106665781191118731"]'
    ' encoding headers via codec (end_stream=false):\n'
    "envoy-5575cc449d-mkc8s envoy ':status', '200'\n"
    "envoy-5575cc449d-mkc8s envoy 'content-type', 'application/grpc'\n"
    "envoy-5575cc449d-mkc8s envoy 'server', 'envoy'\n"
    'envoy-5575cc449d-mkc8s envoy \n'
    'envoy-5575cc449d-mkc8s envoy [2024-10-20 16:37:21.365][24][debug][http2] [source/common/ht'
    'tp/http2/codec_impl.cc:1803] [Tags: "ConnectionId":"285"] Http2Visitor::OnFrameHeader(5, 7'
    ', 0, 0)\n'
)


def test_real_stern_prefix_on_dump_lines():
    parsed = parse_text(ISSUE_36712)
    d = parsed.diagnostics
    assert d.wrappers == ["stern"] and d.format == "envoy" and d.lines_malformed == 0
    ev = parsed.events
    assert ev["n_lines"].to_list() == [1, 5, 1]
    assert ev["message"][1].split("\n")[1:] == ["':status', '200'", "'content-type', 'application/grpc'",
                                                "'server', 'envoy'"]
    assert ev["origin"].unique().to_list() == ["envoy-5575cc449d-mkc8s/envoy"]


# github.com/envoyproxy/envoy/issues/40124 (2025-07-01): a log shipper's JSON export, the Envoy 1.34 line in
# `message` (JSON-escaped Tags quotes), other keys around it.
ISSUE_40124 = (
    '{"_obs_.log.size":131,"cloud.region":"us-west-2","message":"[2025-07-01 01:36:51.013][95]['
    'debug][http] [source/common/http/conn_manager_impl.cc:385] [Tags: \\"ConnectionId\\":\\"10942'
    '0\\"] new stream","obs.log.size":131,"sub_environment":"prod","time":"2025-07-01T01:36:51.0'
    '1395404Z"}\n'
    '{"_obs_.log.size":243,"cloud.region":"us-west-2","message":"[2025-07-01 01:36:51.013][95]['
    'debug][router] [source/common/router/router.cc:525] [Tags: \\"ConnectionId\\":\\"109420\\",\\"S'
    'treamId\\":\\"4523271749005161739\\"] cluster \'egress_http2_dbmesh_case_management\' match for'
    ' URL \'/dbmesh.v1.DbmeshService/ExecQuery\'","obs.log.size":243,"sub_environment":"prod","ti'
    'me":"2025-07-01T01:36:51.01403266Z"}\n'
)


def test_real_shipper_json_message():
    parsed = parse_text(ISSUE_40124)
    assert parsed.diagnostics.wrappers == ["json-message"] and parsed.diagnostics.format == "envoy"
    assert parsed.events.select("kind", "conn_id").rows() == [("new_stream", 109420), ("route_match", 109420)]
    assert parsed.events["stream_id"][1] == 4523271749005161739


# github.com/envoyproxy/gateway/issues/7741 (2025-12-10): a Grafana/Loki export, `epoch_ms<TAB>time<TAB>` before
# each Envoy line.
GATEWAY_7741 = ("1765368129427\t2025-12-10T12:02:09.427Z\t[2025-12-10 12:02:09.426][1][info][main] "
                "[source/server/server.cc:527]   response header map: 432 bytes: :status,age,date\n"
                "1765368129427\t2025-12-10T12:02:09.427Z\t[2025-12-10 12:02:09.426][1][info][main] "
                "[source/server/server.cc:527]   request trailer map: 120 bytes: \n")


def test_real_grafana_export():
    parsed = parse_text(GATEWAY_7741)
    assert parsed.diagnostics.wrappers == ["grafana-export"] and parsed.diagnostics.format == "envoy"
    assert parsed.events["source"].to_list() == ["source/server/server.cc:527"] * 2
    assert parsed.events["message"][0].startswith("  response header map")


# github.com/istio/istio/issues/42147 (2022-11-18): lines 27-51 of the author's numbered listing (Istio 1.16
# text, tabs kept), with a multi-line `policy { ... }` dump after the authn filter line (shortened here).
ISSUE_42147 = (
    ' 36  2022-11-18T12:04:04.552204Z\ttrace\tenvoy http\t[C305][S18098499556323610173] decode hea'
    'ders called: filter=0x55e389fd3580 status=0\n'
    ' 37  2022-11-18T12:04:04.552230Z\tdebug\tenvoy filter\tAuthenticationFilter::decodeHeaders wi'
    'th config\n'
    ' 38  policy {\n'
    ' 39    peers {\n'
    ' 40      mtls {\n'
    ' 41        mode: PERMISSIVE\n'
    ' 42      }\n'
    ' 43    }\n'
    ' 44  }\n'
    ' 45  2022-11-18T12:04:04.552253Z\tdebug\tenvoy filter\t[C305] validate principal\n'
)


def test_real_line_numbered_paste_with_a_policy_dump():
    parsed = parse_text(ISSUE_42147)
    d = parsed.diagnostics
    assert d.wrappers == ["line-numbers"] and d.format == "istio" and d.lines_malformed == 0
    assert parsed.events["n_lines"].to_list() == [1, 8, 1]
    assert parsed.events["message"][1].split("\n")[1] == "policy {"
    assert parsed.events["line_no"].to_list() == [1, 2, 10]


# fixtures/real/043 (salrashid123's QUIC README, 2021-12-27): QUIC's `encodeHeaders` message is a header dump
# closed by a line holding only `.`.
QUIC_ENCODE_HEADERS = (
    "[2021-12-27 09:55:29.718][674979][debug][quic_stream] [source/common/quic/envoy_quic_server_stream.cc:59] "
    "[C5477787520329841858][S0] encodeHeaders (end_stream=false) ':status', '200'\n"
    "'content-length', '2'\n"
    ".\n"
    "[2021-12-27 09:55:29.718][674979][debug][quic_stream] [source/common/quic/envoy_quic_server_stream.cc:71] "
    "[C5477787520329841858][S0] encodeData (end_stream=true) of 2 bytes.\n"
)


def test_real_quic_dump_closed_by_a_lone_dot():
    parsed = parse_text(QUIC_ENCODE_HEADERS)
    assert parsed.diagnostics.lines_malformed == 0
    assert parsed.events["n_lines"].to_list() == [3, 1]
    # quic_stream's [S0] is QUIC's own stream number, not the connection manager's stream id
    assert parsed.events["stream_id"].to_list() == [None, None]


def test_unknown_prefix_before_the_envelope_is_found_and_stripped(segments):
    """No known wrapper reads `<host> | <level> |`: the envelope is found further in, the text before it
    (by shape) is a `prefix` wrapper, on dump lines too."""
    bare = segments["envoy"]
    wrapped = [f"node-{i % 3}.example ~ INFO ~ {line}" for i, line in enumerate(bare)]
    parsed = _same_events(bare, wrapped)
    assert parsed.diagnostics.wrappers == ["prefix"]
