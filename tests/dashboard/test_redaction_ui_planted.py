"""The full planted-secrets capture (tests/security/planted.py: every name, spelling, value shape, query
parameter and cut header line of docs/security.md, in Istio text and JSON, bare and kubectl-wrapped) uploaded to
the real Flask server: the page, its layout and every server callback (valid inputs pointing at the dataset and
at a request carrying the secrets) answer without a single planted value."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import every_answer, serve_upload
from tests.security.planted import MARK, kubectl_prefix, kubectl_timestamps, planted_json, planted_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CAPTURES: dict[str, Callable[[], str]] = {
    "istio-text": lambda: planted_text(FIXTURES),
    "istio-json": lambda: planted_json(FIXTURES),
    "kubectl-prefix+timestamps": lambda: kubectl_prefix(kubectl_timestamps(planted_text(FIXTURES))),
}


@pytest.fixture(scope="module", params=list(CAPTURES))
def uploaded(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str, Any]]:
    text = CAPTURES[request.param]()
    assert text.count(MARK) > 100
    yield from serve_upload(text.encode())


def test_no_ui_response_holds_a_planted_value(uploaded: tuple[Any, Any, str, Any]) -> None:
    app, client, token, ds = uploaded
    clients = ds.capture.requests.filter(~ds.capture.requests["internal"])
    assert clients.height > 0
    answers = every_answer(app, client, token, ds, clients["request_uid"][0])
    assert b"[redacted]" in answers["log-lines.children"]  # the request's own lines, with secrets, were served
    assert b"rowData" in b"".join(answers.values())
    leaks = {k: v[max(0, v.find(MARK.encode()) - 60):v.find(MARK.encode()) + 40]
             for k, v in answers.items() if MARK.encode() in v}
    assert not leaks, leaks
