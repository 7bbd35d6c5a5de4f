"""upload: the streaming route (raw body to a private temp file in chunks), acceptance by content, size
cap counting decompressed bytes, bad input, per-session admission."""
from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from envoy_dissector.dashboard.app import create_app
from envoy_dissector.dashboard.content import ContentRefused
from envoy_dissector.dashboard.datasets import new_id
from envoy_dissector.dashboard.upload import safe_name, save_stream

FIXTURE = Path("fixtures/istio-thread/lua-cpu/envoy.log.gz")


@pytest.fixture
def app():
    return create_app(demo=False, max_upload_mb=1)


def post(client, data: bytes, name: str = "x.log.gz", token: str | None = None):
    headers = {"Content-Type": "application/octet-stream"}
    if token is not None:
        headers["X-Dissector-Session"] = token
    return client.post(f"/_dissector/upload?name={name}", data=data, headers=headers)


def test_upload_starts_an_analysis_owned_by_the_session(app):
    client, token = app.server.test_client(), new_id()
    r = post(client, FIXTURE.read_bytes(), "lua-cpu.log.gz", token)
    assert r.status_code == 200, r.json
    assert r.json["bytes"] == FIXTURE.stat().st_size
    reg = app.server.config["DISSECTOR_REGISTRY"]
    job = reg.wait(reg.job(r.json["job"], token))
    assert job.state == "done"
    assert [d.name for d in reg.visible(token)] == ["lua-cpu.log.gz"]
    assert reg.visible(new_id()) == []
    kept = list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir())  # a request's lines are read again from it
    assert len(kept) == 1
    assert reg.forget(reg.visible(token)[0].id, token)
    assert list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()) == []  # removed with its dataset


def test_size_cap_is_413(app):
    client = app.server.test_client()
    r = post(client, b"x" * (1024 * 1024 + 1), "big.log", new_id())
    assert r.status_code == 413 and "upload limit" in r.json["error"]
    assert list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()) == []


def test_refusals(app):
    client = app.server.test_client()
    assert post(client, b"x\n", "a.log").status_code == 400  # no session token
    assert post(client, b"x\n", "a.log", "not-a-token").status_code == 400
    assert post(client, b"", "a.log", new_id()).status_code == 400
    r = post(client, b"MZ\x90\x00\x03\x00\x00\x00" * 100, "a.log", new_id())
    assert r.status_code == 415 and "binary content" in r.json["error"]
    r = post(client, b"PK\x03\x04" + b"x" * 100, "logs.zip", new_id())
    assert r.status_code == 415 and "zip archive" in r.json["error"]
    r = post(client, gzip.compress(b"a line\n" * 100)[:-12], "cut.log.gz", new_id())
    assert r.status_code == 400 and "ends early" in r.json["error"]
    assert list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()) == []


@pytest.mark.parametrize("name", ["envoy.jsonl", "istio-proxy.log.1", "capture", "proxy.LOG.2.gz", "x.exe"])
def test_accepted_by_content_whatever_the_name(app, name):
    client, token = app.server.test_client(), new_id()
    r = post(client, FIXTURE.read_bytes(), name, token)
    assert r.status_code == 200, r.json
    reg = app.server.config["DISSECTOR_REGISTRY"]
    job = reg.wait(reg.job(r.json["job"], token))
    assert job.state == "done", job.error
    assert [d.name for d in reg.visible(token)] == [name]


def test_gzip_cap_counts_decompressed_bytes(app):
    client = app.server.test_client()
    text = b"2026-11-22T01:09:40.050266Z\tinfo\tenvoy main x\thello\n" * 30_000  # 1.5 MiB, cap is 1 MiB
    body = gzip.compress(text)
    assert len(body) < 100_000
    r = post(client, body, "small.log.gz", new_id())
    assert r.status_code == 413 and "decompressed" in r.json["error"] and "1 MB" in r.json["error"]
    assert list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()) == []


def test_save_stream_chunks_and_cap(tmp_path):
    path, meter = save_stream(io.BytesIO(b"a\n" * 5_000), tmp_path, 10_000, chunk_bytes=1000)
    assert meter.text_bytes == meter.raw_bytes == 10_000 and path.read_bytes() == b"a\n" * 5_000
    assert path.suffix == ".log" and meter.lines == 5_000
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(ContentRefused) as err:
        save_stream(io.BytesIO(b"a\n" * 5_001), tmp_path, 10_000, chunk_bytes=1000)
    assert err.value.status == 413
    gz, meter = save_stream(io.BytesIO(gzip.compress(b"b\n" * 4_000)), tmp_path, 10_000, chunk_bytes=100)
    assert meter.kind == "gzip" and meter.text_bytes == 8_000
    assert gz.suffix == ".log" and gz.read_bytes() == b"b\n" * 4_000  # kept as its (redacted) text
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, gz.name])


def test_names():
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\logs\\istio proxy.log") == "istio proxy.log"
    assert safe_name("<script>.log") == "_script_.log"
    assert safe_name(None) == "upload.log"


def test_upload_with_a_custom_log_format(app):
    client, token = app.server.test_client(), new_id()
    data = Path("fixtures/custom/keepalive/envoy.log.gz").read_bytes()
    reg = app.server.config["DISSECTOR_REGISTRY"]
    r = post(client, data, "custom.log.gz", token)  # not detectable without the format
    assert reg.wait(reg.job(r.json["job"], token)).state == "error"
    fmt = "%Y-%m-%d %T.%f|%t|%L|%n|%v"
    r = client.post("/_dissector/upload", query_string={"name": "custom.log.gz", "log_format": fmt}, data=data,
                    headers={"X-Dissector-Session": token})
    job = reg.wait(reg.job(r.json["job"], token))
    assert job.state == "done", job.error
    ds = reg.get(job.dataset_id, token)
    assert ds.capture.format == "custom" and ds.summary()["capture"]["requests"] >= 50
