"""A bounded fuzz of the dashboard as deployed (waitress in a subprocess on 127.0.0.1, over HTTP; the inputs in
tests/dashboard/dashboard_fuzz.py): every server callback with random inputs and the upload route with random
bodies, names and headers, from four threads at once. No answer is a 500 (503 only where documented: a full
registry or spool budget), none goes unanswered within its timeout, and the server's resident memory stays
under 1 GiB. How fast each answer comes (the 2 s goal) is bench/fuzz_dashboard.py's, not this test's.
Seeded: a failure repeats."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import requests

from envoy_dissector.dashboard.datasets import new_id
from tests.builders import DashboardProcess, RssSampler, body
from tests.dashboard.dashboard_fuzz import CAPTURE, DISPATCH, entry, fuzz

SEED = 33
CALLBACK_CALLS = 360
UPLOADS = 48
THREADS = 4
MAX_RSS = 1024**3


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[DashboardProcess]:
    s = DashboardProcess([str(CAPTURE), "--max-upload-mb", "1", "--max-sessions", "8"],
                         tmp_path_factory.mktemp("fuzz"))
    yield s
    s.stop()


def test_fuzz_callbacks_and_uploads(server, capsys):
    run = fuzz(server, seed=SEED, calls=CALLBACK_CALLS, uploads=UPLOADS, threads=THREADS)
    with capsys.disabled():
        print(f"\nfuzz: {len(run.results)} requests ({sum(r[0] == 'upload' for r in run.results)} uploads) from "
              f"{THREADS} threads, statuses {run.statuses()}, server RSS baseline {run.rss_baseline / 2**20:.0f} MiB, "
              f"peak {run.rss_peak / 2**20:.0f} MiB")
    assert not run.failed(), run.failed()[:10]
    assert sum(r[1] in (200, 204) for r in run.results) > len(run.results) // 4, run.statuses()  # not all refused
    assert run.rss_peak <= MAX_RSS
    assert requests.get(f"{server.base}/", timeout=10).status_code == 200


def test_thousands_of_or_conditions_are_refused_not_computed(server, capsys):
    """The probe's case: a grid callback with 2,500 OR-ed conditions (~170 KB), eight at once; and eight at the
    bounds (10 conditions of 500 characters each on two columns). Answered within the timeout with little
    memory (a refusal, or the bounded query), never by N² work."""
    http = requests.Session()
    deps = http.get(f"{server.base}/_dash-dependencies", timeout=30).json()
    key = next(d["output"] for d in deps if "requests-grid.getRowsResponse" in d["output"])
    session = {"token": new_id()}
    poll_key = next(d["output"] for d in deps if "dataset.options" in d["output"])
    dataset = http.post(f"{server.base}{DISPATCH}", timeout=30, json=body(
        poll_key, entry(deps, poll_key), {0: 1, 2: session}, {})).json()["response"]["dataset"]["options"][0]["value"]
    valid = {("session", "data"): session, ("dataset", "value"): dataset}

    def grid_call(model: dict) -> dict:
        request = {"startRow": 0, "endRow": 100, "filterModel": model, "sortModel": []}
        return body(key, entry(deps, key), {0: request}, valid)

    many = {"path": {"filterType": "text", "operator": "OR", "conditions": [
        {"filterType": "text", "type": "contains", "filter": f"/p{i:05d}-{'x' * 48}"} for i in range(2500)]}}
    at_bounds = {col: {"filterType": "text", "operator": "OR", "conditions": [
        {"filterType": "text", "type": "contains", "filter": f"{i}" + "y" * 499} for i in range(10)]}
        for col in ("path", "authority")}
    results: list[tuple[str, int, float]] = []
    answers: list[dict] = []

    def call(model: dict, label: str) -> None:
        t0 = time.perf_counter()
        r = requests.post(f"{server.base}{DISPATCH}", json=grid_call(model), timeout=60)
        results.append((label, r.status_code, time.perf_counter() - t0))
        if r.status_code == 200:
            answers.append(r.json()["response"])

    with RssSampler(server.pid) as rss:
        threads = [threading.Thread(target=call, args=(m, n)) for m, n in [(many, "2500 OR")] * 8
                   + [(at_bounds, "at the bounds")] * 8]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    with capsys.disabled():
        print(f"\n8 x 2,500 OR conditions and 8 at the bounds at once: slowest {max(r[2] for r in results):.2f} s, "
              f"server RSS baseline {rss.baseline / 2**20:.0f} MiB, peak {rss.peak / 2**20:.0f} MiB")
    assert [r[1] for r in results] == [200] * 16, results
    refused = [a for a in answers if "Not filtered" in str(a)]
    assert len(refused) == 8 and all("2,500 conditions" in str(a) for a in refused)
    assert all(a["requests-grid"]["getRowsResponse"]["rowCount"] == 0 for a in answers)
    assert rss.peak - rss.baseline < 256 * 2**20
