"""Lines and layouts first met in the real excerpts 043-061 (fixtures/real/): each is recognised for what it is."""
from __future__ import annotations

import pytest

from envoy_dissector.parser.grammar import parse_message
from envoy_dissector.parser.pipeline import parse_text

LINES = [
    # 045: the paste kept a space after the message
    ('router\t[Tags: "ConnectionId":"1433","StreamId":"8306402913452081873"] upstream 1xx (103). ', "upstream1xx",
     {"status": "103"}),
    # 049, 052, 057: Envoy's own async client receiving its response (no ids)
    ("http\tasync http request response headers (end_stream=false):", "async_response_headers", {"end_stream": "false"}),
    ("http\tasync http request response trailers:", "async_client_noise", {}),
    # 046: the admin interface's filter
    ("admin\t[C3][S14570225305165994883] request complete: path: /stats/prometheus", "admin_request_complete",
     {"url": "/stats/prometheus"}),
    # 043, 051: QUIC stream lines are codec noise of a quiet logger
    ("quic_stream\t[C5477787520329841858][S0] encodeData (end_stream=true) of 2 bytes.", "background", {}),
]


@pytest.mark.parametrize(("text", "kind", "fields"), LINES, ids=[k + str(i) for i, (_, k, _) in enumerate(LINES)])
def test_line(text: str, kind: str, fields: dict[str, str]) -> None:
    parsed = parse_message(text)
    assert parsed.kind == kind
    values = parsed.values(text)
    for name, value in fields.items():
        assert values[name] == value


# fixtures/real/047 (hashicorp/consul-k8s#2233, 2023-06-03): consul-dataplane's own text layout.
CONSUL_TEXT = (
    "2023-06-03T00:02:52.709Z+00:00 [debug] envoy.filter(29) [C38] new tcp proxy session\n"
    "2023-06-03T00:02:52.709Z+00:00 [debug] envoy.connection(29) [C39] connecting to 10.244.0.9:20000\n"
    "2023-06-03T00:02:52.710Z+00:00 [debug] envoy.pool(29) [C39] creating stream\n"
)
# consul-dataplane's JSON twin (its logFormatJSON), same records.
CONSUL_JSON = (
    '{"@timestamp":"2023-06-03T00:02:52.709000Z+00:00","@module":"envoy.filter","@level":"debug",'
    '"@message":"[C38] new tcp proxy session","thread":29}\n'
    '{"@timestamp":"2023-06-03T00:02:52.709000Z+00:00","@module":"envoy.connection","@level":"debug",'
    '"@message":"[C39] connecting to 10.244.0.9:20000","thread":29}\n'
    '{"@timestamp":"2023-06-03T00:02:52.710000Z+00:00","@module":"envoy.pool","@level":"debug",'
    '"@message":"[C39] creating stream","thread":29}\n'
)


@pytest.mark.parametrize("text", [CONSUL_TEXT, CONSUL_JSON], ids=["text", "json"])
def test_consul_dataplane_layouts(text: str) -> None:
    parsed = parse_text(text)
    assert parsed.diagnostics.format == "consul" and parsed.diagnostics.lines_malformed == 0
    ev = parsed.events
    assert ev["logger"].to_list() == ["filter", "connection", "pool"]
    assert ev["thread"].to_list() == [29, 29, 29]
    assert ev["conn_id"].to_list() == [38, 39, 39]
    assert ev["kind"].cast(str).to_list()[1:] == ["connecting_to", "pool_creating_stream"]
    assert ev["ts_us"][2] - ev["ts_us"][0] == 1000


# fixtures/real/045 (envoyproxy/envoy#35263): journalctl's short format with an empty host column.
JOURNAL_NO_HOST = (
    "Jul 18 15:45:45  envoy[1278055]: [2024-07-18 15:45:45.774][1278055][debug][connection] "
    "[source/common/network/connection_impl.cc:1028] [Tags: \"ConnectionId\":\"1434\"] connection in progress\n"
    "Jul 18 15:45:45  envoy[1278055]: [2024-07-18 15:45:45.774][1278055][debug][connection] "
    "[source/common/network/connection_impl.cc:746] [Tags: \"ConnectionId\":\"1434\"] connected\n"
)


def test_syslog_prefix_with_an_empty_host() -> None:
    parsed = parse_text(JOURNAL_NO_HOST)
    assert parsed.diagnostics.wrappers == ["syslog"] and parsed.diagnostics.format == "envoy"
    assert parsed.events["kind"].cast(str).to_list() == ["connection_in_progress", "connected"]


# fixtures/real/062 (kumahq/kuma#317, 2019-10-10): kuma-dp's own lines (zap console layout, upper-case level)
# outnumber Envoy's in the container log; they are another program's, set aside when the format is judged.
KUMA_SIDECAR = (
    "2019-10-10T03:06:40.598Z\tINFO\tSkipping reading config from file\n"
    "2019-10-10T03:06:40.599Z\tINFO\tkuma-dp.run\tstarting Dataplane (Envoy) ...\n"
    "2019-10-10T03:06:40.600Z\tINFO\taccesslogs-server\tstarting\t{\"address\": \"unix:///tmp/kuma.sock\"}\n"
    "[2019-10-10 03:06:40.636][13][info][main] [source/server/server.cc:238] initializing epoch 0 (hot restart "
    "version=disabled)\n"
    "[2019-10-10 03:06:40.636][13][info][main] [source/server/server.cc:240] statically linked extensions:\n"
)


def test_other_programs_lines_do_not_outvote_envoys() -> None:
    parsed = parse_text(KUMA_SIDECAR)
    d = parsed.diagnostics
    assert d.format == "envoy" and d.records == 2 and d.lines_malformed == 3
