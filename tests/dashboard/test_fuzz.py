"""A bounded fuzz of the dashboard as deployed (waitress in a subprocess on 127.0.0.1, over HTTP): every
server callback with random inputs (grid filter and sort models of random size, zoom windows, junk of every
JSON type, long and odd strings) and the upload route with random bodies, names and headers, from four
threads at once. No answer is a 500 (503 only where documented: a full registry or spool budget), none
goes unanswered within its timeout, and the server's resident memory stays under 1 GiB (how fast each
answer comes is a speed goal, for a benchmark, not this test). Seeded: a failure repeats."""
from __future__ import annotations

import gzip
import random
import string
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from envoy_dissector.dashboard.datasets import new_id
from tests.builders import DashboardProcess, RssSampler, body, pattern

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "fixtures" / "istio-thread" / "lua-cpu" / "envoy.log.gz"
SMALL = ROOT / "fixtures" / "istio-thread" / "keepalive" / "envoy.log.gz"
DISPATCH = "/_dash-update-component"
UPLOAD = "/_dissector/upload"
SEED = 33
CALLBACK_CALLS = 360
UPLOADS = 48
THREADS = 4
MAX_RSS = 1024**3
COLUMNS = ["path", "status", "total_us", "method", "authority", "thread", "internal", "x_request_id", "nope",
           "stream_id", "downstream_conn_id"]
TYPES = ["contains", "notContains", "equals", "notEqual", "startsWith", "endsWith", "lessThan", "greaterThan",
         "inRange", "blank", "notBlank", "regex", None, 5]
ODD = ["", " ", "C12", "c0", "503", "%", ".*", "(", "\\", "'", '"', "\u202e", "\x00", "🙂" * 3, "a\nb", "[redacted]",
       "/ready", "1e308", "NaN", "-0"]


def text(rng: random.Random, longest: int = 2000) -> str:
    if rng.random() < 0.4:
        return rng.choice(ODD)
    alphabet = string.printable + "éü漢🙂\u0301"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, rng.choice([8, 64, longest]))))


def junk(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, 2**53 + 1, 2**70, -(2**64), rng.randint(-10**6, 10**6)])
    if kind == 3:
        return rng.choice([0.5, -1e300, 1e300, 1e-300, rng.uniform(-1e9, 1e9)])
    if kind in (4, 5):
        return text(rng)
    if kind == 6:
        return [junk(rng, depth + 1) for _ in range(rng.randint(0, 20))]
    if kind == 7:
        return {text(rng, 20): junk(rng, depth + 1) for _ in range(rng.randint(0, 10))}
    return grid_request(rng)


def condition(rng: random.Random) -> dict:
    return {"filterType": rng.choice(["text", "number", "set", 1]), "type": rng.choice(TYPES),
            "filter": rng.choice([text(rng), rng.randint(-10**9, 10**9), None, [1], rng.uniform(-1e6, 1e6)]),
            "filterTo": rng.choice([None, text(rng, 20), rng.randint(0, 10**9)])}


def grid_request(rng: random.Random) -> dict:
    model: dict[str, object] = {}
    for _ in range(rng.randint(0, 4)):
        if rng.random() < 0.5:
            model[rng.choice(COLUMNS)] = {"operator": rng.choice(["OR", "AND", "XOR"]),
                                          "conditions": [condition(rng) for _ in range(rng.choice([1, 2, 10, 11, 40]))]}
        else:
            model[rng.choice(COLUMNS)] = condition(rng)
    return {"startRow": rng.choice([0, 100, -5, 10**12, "a", 1.5]), "endRow": rng.choice([100, 200, 10**9, None]),
            "filterModel": model,
            "sortModel": [{"colId": rng.choice(COLUMNS), "sort": rng.choice(["asc", "desc", None])}
                          for _ in range(rng.choice([0, 1, 3, 100]))]}


def relayout(rng: random.Random) -> dict:
    a, b = rng.uniform(-1e12, 1e12), rng.uniform(-1e12, 1e12)
    return rng.choice([{"xaxis.range[0]": a, "xaxis.range[1]": b}, {"xaxis.range": [a, b]},
                       {"xaxis.autorange": True}, {"xaxis.range[0]": text(rng, 30)}])


def upload_body(rng: random.Random) -> bytes:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.randbytes(rng.randint(0, 256 * 1024))
    if kind == 1:
        return "".join(text(rng, 200) + "\n" for _ in range(rng.randint(1, 500))).encode("utf-8", "replace")
    if kind == 2:
        return gzip.compress(rng.randbytes(rng.randint(1, 64 * 1024)))[: rng.randint(0, 1 << 16)]
    if kind == 3:
        return gzip.compress(b"x" * rng.randint(1, 3 * 1024 * 1024))  # past the 1 MB cap once decompressed
    if kind == 4:
        return rng.choice([b"PK\x03\x04", b"BZh9", b"\x7fELF", b"%PDF-1.4", b"\x1f\x8b"]) + rng.randbytes(1000)
    if kind == 5:
        raw = gzip.decompress(SMALL.read_bytes())
        cut = rng.randint(0, len(raw))
        return raw[:cut] + rng.randbytes(rng.randint(0, 100)) + raw[cut:]
    if kind == 6:
        return b""
    return SMALL.read_bytes()


def timed(out: list[tuple[str, int, float]], label: str, post: Callable[..., requests.Response], url: str,
          **kw: Any) -> None:
    t0 = time.perf_counter()
    try:
        status = post(url, timeout=30, **kw).status_code
    except requests.Timeout:  # no answer within the timeout: a hang, a failure
        status = -3
    except requests.RequestException as exc:  # a refused upload's connection may close while it is sent
        status = -1 if "Connection" in type(exc).__name__ or "Connection" in str(exc) else -2
    out.append((label, status, time.perf_counter() - t0))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[DashboardProcess]:
    s = DashboardProcess([str(CAPTURE), "--max-upload-mb", "1", "--max-sessions", "8"],
                         tmp_path_factory.mktemp("fuzz"))
    yield s
    s.stop()


def test_fuzz_callbacks_and_uploads(server, capsys):
    http = requests.Session()
    deps = [d for d in http.get(f"{server.base}/_dash-dependencies", timeout=30).json()
            if d.get("clientside_function") is None]
    poll_key = next(d["output"] for d in deps if "dataset.options" in d["output"])
    session = {"token": new_id()}
    polled = http.post(f"{server.base}{DISPATCH}", timeout=30, json=body(poll_key, _entry(deps, poll_key), {0: 1, 2: session},
                                                                         {})).json()
    dataset = polled["response"]["dataset"]["options"][0]["value"]
    valid = {("session", "data"): session, ("dataset", "value"): dataset, ("compare-a", "value"): dataset,
             ("compare-b", "value"): dataset, ("jobs-seen", "data"): [],
             ("requests-grid", "getRowsRequest"): {"startRow": 0, "endRow": 100}}
    results: list[tuple[str, int, float]] = []

    def worker(n: int) -> None:
        rng = random.Random(SEED * 100 + n)
        client = requests.Session()
        for i in range(CALLBACK_CALLS // THREADS):
            dep = rng.choice(deps)
            entry = _entry(deps, dep["output"])
            specs = entry["inputs"] + entry["state"]
            values: dict[int, object] = {}
            for k, spec in enumerate(specs):
                if spec["property"] == "getRowsRequest":
                    values[k] = grid_request(rng)
                elif spec["property"] == "relayoutData":
                    values[k] = relayout(rng)
                elif spec["property"] == "value" and spec["id"] == "search" and rng.random() < 0.5:
                    values[k] = text(rng)
                elif rng.random() < 0.3 and pattern(spec) is None:
                    values[k] = junk(rng)
            payload = body(dep["output"], entry, values, valid)
            timed(results, dep["output"], client.post, f"{server.base}{DISPATCH}", json=payload)
            if i % (CALLBACK_CALLS // UPLOADS) == 0:
                data = upload_body(rng)
                odd = "".join(rng.choice(string.ascii_letters + string.punctuation) for _ in range(rng.randint(0, 40)))
                headers = {"X-Dissector-Session": rng.choice([new_id(), session["token"], odd]),
                           "Content-Type": rng.choice(["application/octet-stream", "text/plain", "x/y"])}
                params = {"name": text(rng, 300), **({"log_format": text(rng)} if rng.random() < 0.2 else {})}
                timed(results, "upload", client.post, f"{server.base}{UPLOAD}", params=params, data=data,
                      headers=headers)

    with RssSampler(server.pid) as rss:
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    statuses: dict[int, int] = {}
    for _, status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    slowest = max(results, key=lambda r: r[2])
    with capsys.disabled():
        print(f"\nfuzz: {len(results)} requests ({sum(r[0] == 'upload' for r in results)} uploads) from {THREADS} "
              f"threads, statuses {dict(sorted(statuses.items()))}, slowest {slowest[2]:.2f} s ({slowest[0]}), "
              f"server RSS baseline {rss.baseline / 2**20:.0f} MiB, peak {rss.peak / 2**20:.0f} MiB")
    failed = [r for r in results if (r[1] >= 500 and r[1] != 503) or r[1] in (-2, -3)]
    assert not failed, failed[:10]
    assert sum(r[1] in (200, 204) for r in results) > len(results) // 4, statuses  # not all refused
    assert rss.peak <= MAX_RSS
    assert http.get(f"{server.base}/", timeout=10).status_code == 200


def _entry(deps: list[dict], output: str) -> dict:
    return next(d for d in deps if d["output"] == output)


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
        poll_key, _entry(deps, poll_key), {0: 1, 2: session}, {})).json()["response"]["dataset"]["options"][0]["value"]
    valid = {("session", "data"): session, ("dataset", "value"): dataset}

    def grid_call(model: dict) -> dict:
        request = {"startRow": 0, "endRow": 100, "filterModel": model, "sortModel": []}
        return body(key, _entry(deps, key), {0: request}, valid)

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
