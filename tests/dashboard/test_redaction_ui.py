"""Redaction is on in every UI response: a capture with secrets planted in header dumps and codec header
lines is uploaded, then the page layout and every server callback (valid inputs pointing at that dataset
and at its request carrying the secrets) are answered by the real Flask server; no answer holds a secret."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from envoy_dissector.dashboard.app import create_app
from envoy_dissector.dashboard.datasets import new_id
from tests.dashboard.test_callback_input import DISPATCH, body

LUA = Path("fixtures/istio-thread/lua-cpu/envoy.log.gz")
HEADER_SECRETS = {
    "authorization": "Bearer planted-authorization-secret",
    "cookie": "session=planted-cookie-secret",
    "x-api-key": "planted-api-key-secret",
    "proxy-authorization": "Basic cGxhbnRlZC1wcm94eS1zZWNyZXQ=",
}


def planted() -> bytes:
    text = gzip.decompress(LUA.read_bytes()).decode()
    dump = "".join(f"'{k}', '{v}'\n" for k, v in HEADER_SECRETS.items())
    text = text.replace("':path', '/'\n", "':path', '/'\n" + dump)
    text = text.replace("completed header: key=user-agent value=envoy-dissector-lab",
                        f"completed header: key=authorization value={HEADER_SECRETS['authorization']}")
    assert text.count("planted-authorization-secret") > 100
    return text.encode()


def serve_upload(data: bytes):
    """A real app that received ``data`` as an upload and finished analysing it: (app, client, token, dataset)."""
    app = create_app(demo=False)
    client, token = app.server.test_client(), new_id()
    r = client.post("/_dissector/upload?name=planted.log", data=data, headers={"X-Dissector-Session": token})
    assert r.status_code == 200, r.json
    reg = app.server.config["DISSECTOR_REGISTRY"]
    job = reg.wait(reg.job(r.json["job"], token))
    assert job.state == "done", job.error
    yield app, client, token, reg.get(job.dataset_id, token)
    reg.shutdown(wait=True)


@pytest.fixture(scope="module")
def uploaded():
    yield from serve_upload(planted())


def every_answer(app, client, token: str, ds, uid: str) -> dict:
    """The page, its layout and every server callback, with valid inputs pointing at ``ds`` and request ``uid``."""
    valid = {
        ("session", "data"): {"token": token}, ("dataset", "value"): ds.id, ("compare-a", "value"): ds.id,
        ("compare-b", "value"): ds.id, ("selected-request", "data"): {"dataset": ds.id, "uid": uid},
        ("loop-state", "data"): {"dataset": ds.id, "start": None, "end": None, "highlight": [5]},
        ("requests-grid", "getRowsRequest"): {"startRow": 0, "endRow": 1000, "filterModel": {}, "sortModel": []},
        ("compare-a", "options"): [{"label": "a", "value": ds.id}], ("jobs-seen", "data"): [],
        ("search", "value"): "/",
    }
    answers = {"/": client.get("/").data, "/_dash-layout": client.get("/_dash-layout").data}
    for key, entry in app.callback_map.items():
        if "callback" not in entry:
            continue
        r = client.post(DISPATCH, json=body(key, entry, {}, valid))
        assert r.status_code in (200, 204), (key, r.data[:300])
        answers[key] = r.data
    return answers


def test_no_ui_response_holds_a_planted_secret(uploaded):
    app, client, token, ds = uploaded
    uid = ds.capture.requests.filter(ds.capture.requests["path"] == "/")["request_uid"][0]
    answers = every_answer(app, client, token, ds, uid)
    shown = b"".join(answers.values())
    assert b"new stream" in answers["log-lines.children"]  # the request's own log lines were served
    assert b"[redacted]" in answers["log-lines.children"]
    assert b"rowData" in shown and b"waterfall" in shown.lower()
    for name, secret in HEADER_SECRETS.items():
        leaks = [k for k, v in answers.items() if secret.encode() in v or secret.split()[-1].encode() in v]
        assert not leaks, f"{name} leaked in {leaks}"
