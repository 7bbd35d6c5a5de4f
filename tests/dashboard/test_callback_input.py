"""Malformed Dash callback requests are answered 4xx (never 500, never a traceback in the answer).

Every server callback of the app is called with each of its inputs and states replaced, one at a time,
by junk of every JSON type (the others valid: a real shared dataset and a session), and with bodies
malformed in structure. The app's real Flask server answers (test client, no network).
"""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from envoy_dissector.dashboard.app import create_app
from envoy_dissector.dashboard.callback_input import body_error
from envoy_dissector.dashboard.datasets import new_id
from tests.builders import DISPATCH, body

FIXTURE = Path("fixtures/istio-thread/keepalive/envoy.log.gz")
JUNK: list[object] = [
    None, True, 0, -1, 2**70, 1.5, "", "C1", "x" * 300, [], [1, "a", None, {"b": []}], {},
    {"token": 5, "dataset": [1], "uid": {"a": 1}, "start": "s", "end": [], "highlight": ["a", None, 3.5, 2**80]},
    {"startRow": "a", "endRow": -5, "filterModel": {"status": {"conditions": [1, {"type": "equals", "filter": []}]},
                                                    "path": "x", "total_us": {"type": "inRange", "filter": 1,
                                                                              "filterTo": "z"}},
     "sortModel": {"colId": 1}},
    {"xaxis.range[0]": "inf", "xaxis.range[1]": None}, {"xaxis.range": ["1e400", "2"]},
    {"rowId": ["x"], "colId": 5}, {"dataset": "unknown", "uid": "nope", "start": 1e300, "end": -1e300,
                                  "highlight": [1, 2]},
]


@pytest.fixture(scope="module")
def app():
    return create_app([str(FIXTURE)])


@pytest.fixture(scope="module")
def valid(app):
    """A plausible value for each (id, property) a callback reads."""
    reg = app.server.config["DISSECTOR_REGISTRY"]
    ds = reg.visible(None)[0]
    uid = ds.capture.requests["request_uid"][1]
    return {
        ("session", "data"): {"token": new_id()}, ("dataset", "value"): ds.id, ("compare-a", "value"): ds.id,
        ("compare-b", "value"): ds.id, ("selected-request", "data"): {"dataset": ds.id, "uid": uid},
        ("loop-state", "data"): {"dataset": ds.id, "start": None, "end": None, "highlight": [1]},
        ("requests-grid", "getRowsRequest"): {"startRow": 0, "endRow": 100, "filterModel": {}, "sortModel": []},
        ("compare-a", "options"): [{"label": "a", "value": ds.id}], ("jobs-seen", "data"): [],
    }


def test_every_callback_answers_junk_with_at_most_4xx(app, valid):
    client = app.server.test_client()
    statuses: dict[int, int] = {}
    calls = 0
    server_side = {k: v for k, v in app.callback_map.items() if "callback" in v}  # not the clientside ones
    assert len(server_side) >= 12
    r = client.post(DISPATCH, json=body("grid-refresh.data", app.callback_map["grid-refresh.data"], {}, valid))
    assert r.status_code == 400  # a clientside callback is not the server's
    for key, entry in server_side.items():
        specs = entry["inputs"] + entry["state"]
        r = client.post(DISPATCH, json=body(key, entry, {}, valid))
        assert r.status_code in (200, 204), (key, r.status_code, r.data[:300])
        for i, junk in itertools.product(range(len(specs)), JUNK):
            r = client.post(DISPATCH, json=body(key, entry, {i: junk}, valid))
            calls += 1
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code < 500, (key, specs[i], junk, r.data[:500])
            assert b"Traceback" not in r.data
    assert calls > 500 and statuses.get(400, 0) > 0 and statuses.get(200, 0) > 0, statuses


@pytest.mark.parametrize("raw", [
    b"not json", b"[]", b'"text"', b"{}", b'{"output": 5}', b'{"output": "nope.children", "inputs": []}',
    b'{"output": "overview.children"}',
    b'{"output": "overview.children", "outputs": {"id": "overview", "property": "children"}, "inputs": {}}',
    b'{"output": "overview.children", "outputs": {"id": "overview", "property": "children"}, "inputs": [1]}',
    b'{"output": "overview.children", "outputs": {"id": "overview", "property": "children"}, "inputs": [], '
    b'"state": []}',
    b'{"output": "overview.children", "outputs": {"id": "overview", "property": "children"}, '
    b'"inputs": [{"id": "dataset", "property": "value", "value": "x"}], "state": [], "changedPropIds": [1]}',
    b'{"output": "overview.children", "outputs": [], "inputs": [{"id": "dataset", "property": "value"}], '
    b'"state": [{"id": "session", "property": "data", "value": {}}], "changedPropIds": ["dataset.value"]}',
])
def test_malformed_bodies_are_400(app, raw):
    r = app.server.test_client().post(DISPATCH, data=raw, content_type="application/json")
    assert 400 <= r.status_code < 500, (raw, r.status_code, r.data[:300])
    assert b"Traceback" not in r.data


def test_oversized_callback_body_is_413(app):
    r = app.server.test_client().post(DISPATCH, data=b"[" + b"1," * 3_000_000 + b"1]",
                                      content_type="application/json")
    assert r.status_code == 413


def test_body_error_names_the_problem():
    assert body_error([], {"a.b"}) == "the body must be a JSON object"
    assert body_error({"output": "x.y"}, {"a.b"}) == "no such callback"
    assert "changedPropIds" in body_error({"output": "a.b", "outputs": {"id": "a", "property": "b"},
                                           "inputs": [], "changedPropIds": [3]}, {"a.b"})
