"""A capture reads a request's log lines again from a stretch of its input file (analysis/engine/reread.py): the
same records as its whole events frame holds, for gzip and plain files, every format, and index entries small
enough that requests straddle them."""
from __future__ import annotations

import gzip
import io
import warnings
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine import reread
from envoy_dissector.analysis.engine.events import EventsNotKept
from envoy_dissector.analysis.engine.reread import request_records
from envoy_dissector.parser import limits
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.pipeline import iter_parse
from envoy_dissector.parser.sources import Source

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: (capture, read from a plain copy rather than the gzip file): each format once, each kind of file twice
CASES = [("istio-thread/workers", False), ("istio-json/workers", True), ("envoy/keepalive", False),
         ("kubectl/timestamps", True)]


@pytest.mark.parametrize(("rel", "plain"), CASES)
def test_request_lines_read_again_equal_the_events_ones(rel, plain, tmp_path, monkeypatch):
    monkeypatch.setattr(reread, "STEP_BYTES", 8192)  # many index entries: requests straddle them
    src = FIXTURES / rel / "envoy.log.gz"
    if plain:
        path = tmp_path / "envoy.log"
        path.write_bytes(gzip.decompress(src.read_bytes()))
    else:
        path = src
    source = Source("capture.log", path=path)
    cap = dissect(source)
    assert cap.line_index is not None
    uids = cap.requests.sort("first_line_no")["request_uid"].to_list()
    assert uids
    for uid in {*uids[:: max(1, len(uids) // 8)], uids[-1]}:  # spread over the file, and the last one
        assert cap.request_lines(uid).equals(request_records(cap.events, cap.request(uid))), uid
    cap.line_index.close()


def test_the_gzip_copy_is_removed_on_close():
    cap = dissect(str(FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"))
    assert cap.line_index is not None
    cap.request_lines(0)
    copy = cap.line_index._tmp
    assert copy is not None and copy.is_dir()
    cap.line_index.close()
    assert not copy.exists()


def test_the_index_refuses_a_decompression_bomb_as_the_first_read_does(tmp_path, monkeypatch):
    line = (gzip.decompress((FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz").read_bytes())
            .split(b"\n", 1)[0] + b"\n")
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(gzip.compress(line * (4_000_000 // len(line))))
    monkeypatch.setattr(limits, "GZIP_RATIO_FLOOR", 1 << 20)  # (64 MiB by default)
    with pytest.raises(InputError, match="decompression bomb"):
        list(iter_parse(str(bomb)))
    index = reread.LineIndex(path=bomb, name=str(bomb))
    with pytest.raises(InputError, match="decompression bomb") as again:
        index.lines({"first_line_no": 1, "thread": None})
    assert str(bomb) in str(again.value)
    assert index._tmp is not None and not index._tmp.exists()  # the partial copy is gone


def test_log_text_gives_its_lines_from_its_events_and_stdin_only_when_kept(monkeypatch):
    text = gzip.decompress((FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz").read_bytes()).decode()
    cap = dissect(text)
    assert cap.line_index is None and not cap.holds_events
    uid = cap.requests.filter("complete")["request_uid"][0]
    lines = cap.request_lines(uid)  # (the text parsed again)
    assert cap.holds_events and lines.height and lines.equals(request_records(cap.events, cap.request(uid)))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    piped = dissect("-")
    assert piped.line_index is None and piped.requests.height == cap.requests.height
    with pytest.raises(EventsNotKept, match=r"stdin or a pipe.*keep_events=True"):
        piped.request_lines(0)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    kept = dissect("-", keep_events=True)
    row = kept.requests.filter("complete").row(0, named=True)  # (its origin is <stdin>)
    assert kept.holds_events and kept.request_lines(row).drop("origin").equals(lines.drop("origin"))


def test_the_stretch_is_found_by_line_and_parsed_in_the_format_detected_once(tmp_path):
    text = gzip.decompress((FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz").read_bytes())
    path = tmp_path / "envoy.log"
    path.write_bytes(text)
    starts = [0] + [i + 1 for i, byte in enumerate(text) if byte == 0x0A]  # (byte offset of each line)
    with path.open("rb") as fh:
        for wanted in (1, 2, 777, 3000, len(starts) - 1):
            assert reread._line_start(fh, 1, 0, wanted) == (wanted, starts[wanted - 1])
            assert reread._line_start(fh, 500, starts[499], wanted) == (max(wanted, 500), starts[max(wanted, 500) - 1])
        assert reread._line_start(fh, 1, 0, len(starts) + 50) == (len(starts), len(text))  # past the end
    index = reread.LineIndex(path=path, name=str(path))  # (the name is the records' origin)
    assert index.known_format == "auto"
    cap = dissect(str(path))
    row = cap.requests.sort("first_line_no").row(-1, named=True)
    assert index.lines(row).equals(request_records(cap.events, row, same_origin=False))
    assert index.known_format == cap.format  # the later stretches skip the detection
    assert reread._latest_ts(pl.DataFrame()) == -1
    tail = cap.events.tail(reread.LAST_RECORDS)
    assert reread._latest_ts(cap.events) == tail["ts_us"].max() >= cap.events["ts_us"].max() - reread.AFTER_US


def test_a_request_without_a_stream_id_selects_without_a_warning():
    cap = dissect(str(FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"))
    row = {**cap.requests.filter("complete").row(0, named=True), "stream_id": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lines = request_records(cap.events, row)
    assert lines.height and lines["conn_id"].is_in([row["downstream_conn_id"], row["upstream_conn_id"]]).all()


#: Real logs without thread ids (the whole capture infers the workers' lanes; a stretch read again cannot).
REAL_WITHOUT_THREADS = ["006-envoy-13068-stern-tabs-as-spaces-upstream-timeout.log",
                        "012-istio-40241-old-tabs-debug-header-dump.log",
                        "021-istio-1.13-old-tabs-trace-wasm-tls-cut-start.log",
                        "025-istio-39706-json-no-caller-escaped-multiline-msg.log"]


@pytest.mark.parametrize("name", REAL_WITHOUT_THREADS)
def test_real_logs_without_thread_ids_read_again_with_the_requests_lane(name):
    path = FIXTURES / "real" / name
    cap = dissect(str(path))
    uids = cap.requests["request_uid"].to_list()
    assert uids
    for uid in uids:
        assert cap.request_lines(uid).equals(request_records(cap.events, cap.request(uid))), uid
