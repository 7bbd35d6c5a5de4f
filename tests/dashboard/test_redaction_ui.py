"""Redaction is on in every UI response: a capture with secrets planted in header dumps and codec header
lines is uploaded, then the page layout and every server callback (valid inputs pointing at that dataset
and at its request carrying the secrets) are answered by the real Flask server; no answer holds a secret."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from tests.builders import every_answer, serve_upload

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


@pytest.fixture(scope="module")
def uploaded():
    yield from serve_upload(planted())


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
