"""Temporary files hold redacted text only (issue 33 item 5): an upload is kept as its log text redacted line by
line (never as sent), and a gzip capture's decompressed copy is redacted the same way; both keep every line's
number and format, so a dataset's requests and a request's log lines are those of an analysis of the original.

Secrets are planted in every place and spelling of tests/security/planted.py; the real server in a subprocess
is driven over HTTP on 127.0.0.1 and every file under its private temporary directory is read."""
from __future__ import annotations

import functools
import gzip
import io
import json
import signal
import time
from pathlib import Path

import polars as pl
import pytest
import requests
from polars.testing import assert_frame_equal

from envoy_dissector.analysis.capture import dissect
from envoy_dissector.dashboard.datasets import new_id
from envoy_dissector.dashboard.upload import save_stream
from envoy_dissector.parser.redact import REDACTED
from envoy_dissector.parser.redact_lines import RedactingWriter, redact_lines
from envoy_dissector.parser.sources import Source
from tests.builders import Callbacks, DashboardProcess, upload
from tests.security.planted import (
    MARK,
    SECRETS_PLANTED,
    VARIANTS,
    kubectl_prefix,
    planted_json,
    planted_text,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def leaks(root: Path) -> list[str]:
    """Files under ``root`` holding a planted secret (a parquet file's values read decoded: its pages are
    compressed, so its bytes would not show one)."""
    return [str(p) for p in root.rglob("*") if p.is_file() and (
        MARK.encode() in p.read_bytes() or (p.suffix == ".parquet" and MARK in parquet_text(p)))]


def parquet_text(path: Path) -> str:
    """Every value of a parquet file as text."""
    return json.dumps(pl.read_parquet(path).to_dicts(), default=str, ensure_ascii=False)


def analysed(path: Path):
    return dissect(Source("up.log", path=path), name="up.log", redact=True)


@pytest.fixture(scope="module")
def original_of(tmp_path_factory: pytest.TempPathFactory):
    """A variant's planted text written as is, and its analysis: once for the module (three variants are the
    originals of more than one test)."""
    folder = tmp_path_factory.mktemp("originals")

    @functools.cache
    def original(variant: str):
        text = VARIANTS[variant](FIXTURES)
        path = folder / f"{variant}.log"
        path.write_text(text)
        return text, analysed(path)
    return original


def assert_same_analysis(want, kept: Path) -> None:
    """The kept copy analyses as the original (``want``, its analysis) does: the same requests, and the same log
    lines per request."""
    got = analysed(kept)
    assert want.requests.height == 51  # (50 requests of the fixture and the cut one at the start)
    assert_frame_equal(want.requests, got.requests)
    for uid in want.requests["request_uid"].to_list()[::5]:
        assert_frame_equal(want.request_lines(uid), got.request_lines(uid))


@pytest.mark.parametrize(("variant", "compressed"), [
    ("istio-text", False), ("istio-text", True), ("istio-json", True), ("text-kubectl-prefix", False),
    ("text-kubectl-timestamps", True), ("json-kubectl-timestamps-prefix", False)])
def test_an_upload_is_kept_redacted_and_analyses_as_the_original(variant, compressed, tmp_path, original_of):
    text, want = original_of(variant)
    assert text.count(MARK) >= SECRETS_PLANTED
    body = gzip.compress(text.encode(), mtime=0) if compressed else text.encode()
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    kept, meter = save_stream(io.BytesIO(body), uploads, 1 << 30, chunk_bytes=4096)
    assert leaks(uploads) == []
    assert kept.read_text().count("\n") == text.count("\n") and meter.text_bytes == len(text.encode())
    assert_same_analysis(want, kept)


@pytest.mark.parametrize("variant", ["istio-text", "json-kubectl-timestamps-prefix"])
def test_a_gzip_captures_decompressed_copy_is_redacted(variant, tmp_path, original_of):
    text, want = original_of(variant)
    packed = tmp_path / "packed.log.gz"
    packed.write_bytes(gzip.compress(text.encode(), mtime=0))
    got = analysed(packed)
    for uid in want.requests["request_uid"].to_list()[::5]:
        assert_frame_equal(want.request_lines(uid), got.request_lines(uid))
    index = got.line_index
    assert index is not None and index._tmp is not None and (index._tmp / "text.log").is_file()
    assert leaks(index._tmp) == []


def test_without_redaction_the_copy_is_the_text_as_written(tmp_path):
    text = planted_text(FIXTURES)
    packed = tmp_path / "packed.log.gz"
    packed.write_bytes(gzip.compress(text.encode(), mtime=0))
    cap = dissect(Source("up.log", path=packed), name="up.log", redact=False)
    cap.request_lines(cap.requests["request_uid"][0])
    assert cap.line_index is not None and cap.line_index._tmp is not None
    assert (cap.line_index._tmp / "text.log").read_text() == text


def test_redacted_lines_keep_their_place_and_format():
    lines = ['{"msg":"a\\n\'x-api-key\', \'PLANT1\'\\n\':path\', \'/p?token=PLANT2\'","level":"debug"}',
             '{"x_api_key": "PLANT3", "nested": {"list": ["/a#id_token=PLANT4"]}, "code": 200}',
             "[pod/p/istio-proxy] 'authorization', 'Bearer PLANT5'",
             "2026-01-01T00:00:00Z\ttrace\tenvoy http\tcompleted header: key=x-vault-token value=PLANT6\tthread=7",
             '{"damaged": "/p?token=PLANT7"',
             "no secret here: keep me as I am",
             "[" * 5000 + "{" + '"a":"/p?token=PLANT8"}']
    out = redact_lines(lines)
    assert len(out) == len(lines) and not any(MARK in line for line in out)
    assert json.loads(out[0])["msg"].split("\n")[1] == f"'x-api-key', '{REDACTED}'"
    assert json.loads(out[1]) == {"x_api_key": REDACTED, "nested": {"list": [f"/a#id_token={REDACTED}"]}, "code": 200}
    assert out[1].startswith('{"x_api_key": ')  # written with the spacing it had
    assert out[3].endswith(f"value={REDACTED}\tthread=7")  # the next field kept
    assert out[5] == lines[5]
    assert redact_lines(lines, False) == lines


def test_the_writer_keeps_a_last_line_without_a_break_and_untouched_lines_byte_for_byte():
    out = io.BytesIO()
    writer = RedactingWriter(out, batch_bytes=8)
    for piece in (b"a ?token=PL", b"ANT9 \xff\n\xff\xfe c\n", b"last ?token=PLANT10"):
        writer.write(piece)
    writer.close()
    assert out.getvalue() == f"a ?token={REDACTED} \ufffd\n".encode() + b"\xff\xfe c\n" \
        + f"last ?token={REDACTED}".encode()


def _read_lines(http: requests.Session, base: str, session: str, dataset: str) -> dict:
    deps = http.get(f"{base}/_dash-dependencies", timeout=30).json()
    key = next(d["output"] for d in deps if d["output"] == "log-lines.children")
    return Callbacks(http, base)._call(key, [{"id": "show-lines", "property": "n_clicks", "value": 1}],
                                       [{"id": "selected-request", "property": "data", "value": None},
                                        {"id": "dataset", "property": "value", "value": dataset},
                                        {"id": "session", "property": "data", "value": {"token": session}}])


def test_the_servers_temporary_files_never_hold_a_planted_secret(tmp_path):
    """Over the real server: a planted capture given on the command line (gzip: its lines are read from a
    decompressed copy) and planted uploads, plain and gzip; every file under the server's temporary directory
    is read while the datasets live and their log lines are open; after SIGTERM nothing is left."""
    given = tmp_path / "in" / "given.log.gz"
    given.parent.mkdir()
    given.write_bytes(gzip.compress(planted_json(FIXTURES).encode(), mtime=0))
    server = DashboardProcess([str(given)], tmp_path / "server")
    try:
        http, session = requests.Session(), new_id()
        bodies = {"up.log": planted_text(FIXTURES).encode(),
                  "up.jsonl.gz": gzip.compress(kubectl_prefix(planted_json(FIXTURES)).encode(), mtime=0)}
        for name, body in bodies.items():
            assert upload(http, server.base, session, body, name).status_code == 200
        calls = Callbacks(http, server.base)
        deadline = time.time() + 180
        while (polled := calls.poll(session))[1]:
            assert time.time() < deadline, "the analyses did not finish"
            time.sleep(0.3)
        datasets = [o["value"] for o in polled[0] if not o["label"].startswith("demo")]
        assert len(datasets) == 3
        for dataset in datasets:
            shown = _read_lines(http, server.base, session, dataset)
            assert shown["log-lines"]["children"] and MARK not in json.dumps(shown)
        (root,) = server.private_dirs()
        kept = [p for p in root.rglob("*") if p.is_file()]
        assert sum(p.name.startswith("upload-") and p.suffix == ".log" for p in kept) == 2
        assert any(p.name == "text.log" for p in kept), "the given gzip capture's decompressed copy"
        assert sum(p.name == "requests.parquet" for p in kept) == 3, "each dataset's detail on disk"
        assert leaks(root) == []
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 128 + signal.SIGTERM
        assert server.private_dirs() == []
    finally:
        server.stop()
