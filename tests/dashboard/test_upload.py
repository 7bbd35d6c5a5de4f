"""upload: the streaming route (raw body to a private temp file in chunks), size cap, bad input."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from envoy_dissector.dashboard.app import create_app
from envoy_dissector.dashboard.datasets import new_id
from envoy_dissector.dashboard.upload import UploadTooLarge, allowed, safe_name, save_stream

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
    assert list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()) == []  # temp file removed


def test_size_cap_is_413(app):
    client = app.server.test_client()
    r = post(client, b"x" * (1024 * 1024 + 1), "big.log", new_id())
    assert r.status_code == 413 and "upload limit" in r.json["error"]
    assert list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()) == []


def test_refusals(app):
    client = app.server.test_client()
    assert post(client, b"x\n", "a.log").status_code == 400  # no session token
    assert post(client, b"x\n", "a.log", "not-a-token").status_code == 400
    assert post(client, b"x\n", "a.exe", new_id()).status_code == 415
    assert post(client, b"", "a.log", new_id()).status_code == 400


def test_save_stream_chunks_and_cap(tmp_path):
    path, n = save_stream(io.BytesIO(b"a" * 10_000), tmp_path, ".log", 10_000, chunk_bytes=1000)
    assert n == 10_000 and path.read_bytes() == b"a" * 10_000
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(UploadTooLarge):
        save_stream(io.BytesIO(b"a" * 10_001), tmp_path, ".log", 10_000, chunk_bytes=1000)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_names():
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\logs\\istio proxy.log") == "istio proxy.log"
    assert safe_name("<script>.log") == "_script_.log"
    assert safe_name(None) == "upload.log"
    assert allowed("a.LOG") and allowed("b.txt") and allowed("c.log.gz") and not allowed("d.zip")


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
