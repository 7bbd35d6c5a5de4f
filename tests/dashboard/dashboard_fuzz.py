"""A seeded fuzz of the dashboard as deployed (an ``envoy-dissect dashboard`` subprocess on 127.0.0.1, over
HTTP): every server callback with random inputs (grid filter and sort models of random size, zoom windows, junk
of every JSON type, long and odd strings) and the upload route with random bodies, names and headers, from
several threads at once, while the server's resident memory is sampled.

Shared by tests/dashboard/test_fuzz.py (no 500, every request answered, RSS under 1 GiB) and
bench/fuzz_dashboard.py (the speed goal: no answer slower than 2 s; how long each callback takes).
"""
from __future__ import annotations

import gzip
import os
import random
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from envoy_dissector.dashboard.datasets import new_id
from tests.builders import DashboardProcess, RssSampler, body, pattern

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "fixtures" / "istio-thread" / "lua-cpu" / "envoy.log.gz"
SMALL = ROOT / "fixtures" / "istio-thread" / "keepalive" / "envoy.log.gz"
DISPATCH = "/_dash-update-component"
UPLOAD = "/_dissector/upload"
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


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system, from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(out: list[Answer], label: str, post: Callable[..., requests.Response], url: str, pid: int,
          **kw: Any) -> None:
    t0, cpu0 = time.perf_counter(), cpu_seconds(pid)
    try:
        status = post(url, timeout=30, **kw).status_code
    except requests.Timeout:  # no answer within the timeout: a hang, a failure
        status = -3
    except requests.RequestException as exc:  # a refused upload's connection may close while it is sent
        status = -1 if "Connection" in type(exc).__name__ or "Connection" in str(exc) else -2
    out.append((label, status, time.perf_counter() - t0, cpu_seconds(pid) - cpu0))


#: label (the callback's output or ``upload``), HTTP status (or -1 connection closed by a refusal, -2 another client
#: error, -3 no answer within the timeout), seconds, the server's CPU seconds meanwhile (its own work when one
#: thread asks at a time; with several, the others' too)
Answer = tuple[str, int, float, float]


@dataclass
class FuzzRun:
    """Every answer (``Answer``) and the server's RSS over the run."""

    results: list[Answer] = field(default_factory=list)
    rss_baseline: int = 0
    rss_peak: int = 0

    def statuses(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for _, status, _, _ in self.results:
            counts[status] = counts.get(status, 0) + 1
        return dict(sorted(counts.items()))

    def failed(self) -> list[Answer]:
        """Answers that are errors: a 5xx but the documented 503 (a full registry or spool budget), or none."""
        return [r for r in self.results if (r[1] >= 500 and r[1] != 503) or r[1] in (-2, -3)]


def entry(deps: list[dict], output: str) -> dict:
    return next(d for d in deps if d["output"] == output)


def fuzz(server: DashboardProcess, *, seed: int, calls: int, uploads: int, threads: int) -> FuzzRun:
    """``calls`` callback requests and ``uploads`` uploads from ``threads`` threads against ``server``."""
    http = requests.Session()
    deps = [d for d in http.get(f"{server.base}/_dash-dependencies", timeout=30).json()
            if d.get("clientside_function") is None]
    poll_key = next(d["output"] for d in deps if "dataset.options" in d["output"])
    session = {"token": new_id()}
    polled = http.post(f"{server.base}{DISPATCH}", timeout=30,
                       json=body(poll_key, entry(deps, poll_key), {0: 1, 2: session}, {})).json()
    dataset = polled["response"]["dataset"]["options"][0]["value"]
    valid = {("session", "data"): session, ("dataset", "value"): dataset, ("compare-a", "value"): dataset,
             ("compare-b", "value"): dataset, ("jobs-seen", "data"): [],
             ("requests-grid", "getRowsRequest"): {"startRow": 0, "endRow": 100}}
    run = FuzzRun()
    every = max(1, calls // max(1, uploads))

    def worker(n: int) -> None:
        rng = random.Random(seed * 100 + n)
        client = requests.Session()
        for i in range(calls // threads):
            dep = rng.choice(deps)
            spec_entry = entry(deps, dep["output"])
            specs = spec_entry["inputs"] + spec_entry["state"]
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
            payload = body(dep["output"], spec_entry, values, valid)
            timed(run.results, dep["output"], client.post, f"{server.base}{DISPATCH}", server.pid, json=payload)
            if uploads and i % every == 0:
                data = upload_body(rng)
                odd = "".join(rng.choice(string.ascii_letters + string.punctuation) for _ in range(rng.randint(0, 40)))
                headers = {"X-Dissector-Session": rng.choice([new_id(), session["token"], odd]),
                           "Content-Type": rng.choice(["application/octet-stream", "text/plain", "x/y"])}
                params = {"name": text(rng, 300), **({"log_format": text(rng)} if rng.random() < 0.2 else {})}
                timed(run.results, "upload", client.post, f"{server.base}{UPLOAD}", server.pid, params=params,
                      data=data, headers=headers)

    with RssSampler(server.pid) as rss:
        workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    run.rss_baseline, run.rss_peak = rss.baseline, rss.peak
    return run
