"""Client traffic seen without its connection manager's lines (issue 27 §6): a client's stream on connection 0
seen only through router lines, the same with header lines a paste marked up, and a downstream connection whose
codec logged a request with no stream line at all. They are client traffic, never Envoy's own (internal) calls,
and the capture says what was seen."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl

from envoy_dissector.analysis import dissect

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
ROUTER_ONLY_C0 = REAL / "075-wasm-grpc-bistream-v1.30-debug-tags-router-new-h2-upstream.log"
CODEC_ONLY_C6 = REAL / "004-envoy-13831-v1.16-codec-legacy-trace.log"
ASYNC_ON_C0 = [REAL / "048-maistra-154-epoch-prefix-v1.13-debug-mixer-check.log",
               REAL / "077-consul-connect-v1.10-debug-zero-padded-thread-xds-stream.log"]


def test_a_client_stream_seen_only_through_router_lines_on_c0_is_a_client_request() -> None:
    requests = dissect(str(ROUTER_ONLY_C0)).requests
    assert requests.height == 1
    row = requests.row(0, named=True)
    assert (row["downstream_conn_id"], row["internal"], row["complete"]) == (0, False, False)
    assert row["path"] == "/api.StreamService/BiStream"


def test_envoys_own_streams_on_c0_stay_internal() -> None:
    """Their router dumps carry the async client's ``x-envoy-internal: true`` and no ``x-forwarded-proto``."""
    for path in ASYNC_ON_C0:
        requests = dissect(str(path)).requests
        assert requests.height >= 1 and requests["internal"].all(), path.name


def _marked_up(tmp_path: Path, markup: tuple[str, str]) -> Path:
    """075 as a paste that marked up header lines (x-b3 lines added in bold, the dump's own lines quoted): the
    excerpt's lines rewritten here, stated as such."""
    before, after = markup
    out = []
    for line in ROUTER_ONLY_C0.read_text(encoding="utf-8").splitlines():
        if line.startswith("'x-request-id'"):
            out += [f"{before}'x-b3-traceid', '80f198ee56343ba864fe8b2a57d3eff7'{after}",
                    f"{before}'x-b3-spanid', 'e457b5a2e4d86bd1'{after}"]
        out.append(f"{before}{line}{after}" if line.startswith("'x-forwarded-proto'") else line)
    path = tmp_path / "marked.log"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def test_a_client_stream_whose_header_lines_a_paste_marked_up_is_a_client_request(tmp_path: Path) -> None:
    for markup in (("**", "**"), ("> ", "")):
        requests = dissect(str(_marked_up(tmp_path, markup))).requests
        assert requests.filter(~pl.col("internal")).height == 1, markup


def test_a_connection_with_codec_lines_but_no_stream_says_what_was_seen() -> None:
    said = " ".join(dissect(str(CODEC_ONLY_C6)).quality().statements)
    assert "HTTP request on C6, not attributable (no stream lines)" in said
    assert "TCP traffic only" not in said


def test_the_report_names_the_unattributable_request_streamed_and_whole() -> None:
    for mode in ([], ["--keep-events"]):
        done = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "analyze", str(CODEC_ONLY_C6), *mode],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "HTTP request on C6, not attributable" in " ".join(done.stdout.split()), mode
