"""Which streams are client requests when an excerpt shows only part of them (real excerpts 045-057 of
fixtures/real/): Envoy logs its own async streams on connection 0, so a router- or filter-only stream of another
connection is a cut client request; a `new stream` no line of its stream follows is a cut request of its own."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from envoy_dissector.analysis import dissect

# envoyproxy/envoy#8639 (fixtures/real/049): a client stream seen only through router lines, and
# maistra/istio#154 (048): Envoy's own Mixer Check stream on [C0].
ROUTER_ONLY = (
    "[2019-10-14 10:56:06.963][326][debug][router] [external/envoy/source/common/router/router.cc:332] "
    "[C523429][S16681021969230338662] cluster 'outbound|3001||back' match for URL '/public/js/app.js'\n"
    "[2020-07-29 20:38:21.586][28][debug][router] [external/envoy/source/common/router/router.cc:434] "
    "[C0][S18146019625426063270] cluster 'outbound|9091||istio-policy' match for URL '/istio.mixer.v1.Mixer/Check'\n"
)
# envoyproxy/envoy#9646 (fixtures/real/055): the excerpt ends right after `new stream`.
CUT_AFTER_NEW_STREAM = (
    "[2020-01-09 21:44:52.487][10655444][debug][conn_handler] [external/envoy/source/server/connection_handler_impl.cc"
    ":335] [C1] new connection\n"
    "[2020-01-09 21:44:52.496][10655444][debug][http] [external/envoy/source/common/http/conn_manager_impl.cc:259] "
    "[C1] new stream\n"
)


def _requests(tmp_path: Path, text: str) -> pl.DataFrame:
    path = tmp_path / "excerpt.log"
    path.write_text(text, encoding="utf-8")
    return dissect(str(path)).requests


def test_router_only_stream_is_a_client_request_unless_on_connection_0(tmp_path: Path) -> None:
    r = _requests(tmp_path, ROUTER_ONLY).sort("downstream_conn_id")
    assert r.select("downstream_conn_id", "internal", "complete").rows() == [(0, True, False), (523429, False, False)]


def test_new_stream_without_a_following_line_is_a_cut_request(tmp_path: Path) -> None:
    r = _requests(tmp_path, CUT_AFTER_NEW_STREAM)
    assert r.height == 1
    row = r.row(0, named=True)
    assert (row["downstream_conn_id"], row["stream_id"], row["internal"], row["complete"]) == (1, None, False, False)
    assert row["ds_rx_beg_us"] == 1578606292496000 and row["outcome"] == "cut by the capture"
    assert row["request_uid"].endswith(":C1:S?2")
