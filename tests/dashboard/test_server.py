"""The dashboard as deployed: ``envoy-dissect dashboard`` on waitress in a subprocess on 127.0.0.1, driven
over real HTTP. Access token and Host checks, ten browser sessions uploading at once (one past its cap),
and gzip bombs. Server memory is the process's resident set (psutil), sampled every 50 ms; the numbers
are printed (``pytest -s``)."""
from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

import pytest
import requests

from envoy_dissector.dashboard.datasets import new_id
from tests.builders import DISPATCH, UPLOAD, Callbacks, RssSampler, analysed, upload

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "istio-thread"
SMALL = FIXTURES / "keepalive" / "envoy.log.gz"
TOKEN = "team-token-0123456789abcdef"
CAPTURES = sorted(FIXTURES.glob("*/envoy.log.gz"))
MiB = 1024 * 1024


def test_token_and_host_over_real_http(dashboard_process):
    server = dashboard_process(str(SMALL), "--token", TOKEN)
    base = server.base
    assert server.url == f"{base}/?token={TOKEN}"
    bare = requests.Session()
    r = bare.get(f"{base}/", timeout=30)
    assert r.status_code == 401 and "access token" in r.text
    assert r.headers["Server"] == "envoy-dissector"  # waitress, not Werkzeug's development server
    assert r.headers["X-Frame-Options"] == "DENY" and r.headers["X-Content-Type-Options"] == "nosniff"
    assert bare.get(f"{base}/?token=wrong-token-0123456789", timeout=30).status_code == 401
    for path in ("/_dash-layout", "/_dash-dependencies", "/assets/upload.js"):
        assert bare.get(base + path, timeout=30).status_code == 401, path
    r = upload(bare, base, new_id(), SMALL.read_bytes(), "x.log.gz")
    assert r.status_code == 401
    assert bare.post(base + DISPATCH, json={"output": "overview.children"}, timeout=30).status_code == 401
    assert [p for d in server.upload_dirs() for p in d.iterdir()] == []

    # the printed address: token in the query once, then a cookie and a clean address
    browser = requests.Session()
    r = browser.get(server.url, allow_redirects=False, timeout=30)
    assert r.status_code == 303 and r.headers["Location"] == "/"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert browser.get(f"{base}/", timeout=30).status_code == 200
    assert browser.get(f"{base}/_dash-layout", timeout=30).status_code == 200
    session = new_id()
    r = upload(browser, base, session, SMALL.read_bytes(), "mine.log.gz")
    assert r.status_code == 200, r.text
    assert requests.get(f"{base}/_dash-layout", headers={"Authorization": f"Bearer {TOKEN}"},
                        timeout=30).status_code == 200

    # DNS rebinding: the right token, the wrong name
    for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example", "[::2]"):
        r = browser.get(f"{base}/", headers={"Host": host}, timeout=30)
        assert r.status_code == 403 and "--allowed-host" in r.text, host
    assert requests.get(f"{base}/", headers={"Host": f"localhost:{server.port}", "Authorization": f"Bearer {TOKEN}"},
                        timeout=30).status_code == 200


def test_ten_sessions_upload_at_once_without_cross_talk(dashboard_process, capsys):
    cap = 2
    server = dashboard_process(str(SMALL), "--max-datasets", str(cap), "--max-sessions", "10",
                               "--max-upload-mb", "50")
    base = server.base
    # (each capture analysed once per test process: the analysis modules read the same ones)
    expected = {p.parent.name: int(analysed(p).summary()["capture"]["requests"]) for p in CAPTURES}
    sessions = [new_id() for _ in range(10)]
    # session 0 uploads five captures (past its cap of two); every other session uploads one
    plan = {s: ([CAPTURES[(i + k) % len(CAPTURES)] for k in range(5)] if i == 0 else [CAPTURES[i % len(CAPTURES)]])
            for i, s in enumerate(sessions)}
    statuses: list[int] = []
    errors: list[str] = []
    busy: list[int] = []

    def client(i: int, session: str) -> None:
        http = requests.Session()
        for k, path in enumerate(plan[session]):
            deadline = time.time() + 120
            while True:
                r = upload(http, base, session, path.read_bytes(), f"s{i}-{k}-{path.parent.name}.log.gz")
                if r.status_code != 429 or time.time() > deadline:
                    break
                busy.append(i)  # this session's analysis queue is full (--max-pending): wait as the page would
                time.sleep(0.5)
            statuses.append(r.status_code)
            if r.status_code != 200:
                errors.append(f"s{i}: {r.status_code} {r.text}")
            if i == 0:
                time.sleep(0.2)  # keep the order of session 0's uploads (the LRU keeps its last two)

    with RssSampler(server.pid) as rss:
        threads = [threading.Thread(target=client, args=(i, s)) for i, s in enumerate(sessions)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        calls = Callbacks(requests.Session(), base)
        deadline = time.time() + 300
        while any(calls.poll(s)[1] for s in sessions):
            assert time.time() < deadline, "analyses did not finish"
            time.sleep(0.5)
        took = time.time() - t0

        mine: dict[str, list[dict]] = {}
        for i, s in enumerate(sessions):
            options, _ = calls.poll(s)
            uploaded = [o for o in options if o["label"].startswith("uploaded: ")]
            mine[s] = uploaded
            names = [o["label"].split("uploaded: ")[1].split(" · ")[0] for o in uploaded]
            want = [f"s{i}-{k}-{p.parent.name}.log.gz" for k, p in enumerate(plan[s])][-cap:]
            assert sorted(names) == sorted(want), (i, names, want)  # own uploads only; LRU within the session
            for o in uploaded:
                fixture = o["label"].split(" · ")[0].split("-", 2)[2].removesuffix(".log.gz")
                assert o["label"].endswith(f" · {expected[fixture]} requests"), o["label"]
            shared = next(o for o in options if not o["label"].startswith("uploaded: "))
            assert shared["label"].startswith("envoy.log.gz")  # the shared capture
        # no session can open another's dataset, and its own open with the right content
        for i, s in enumerate(sessions):
            other = sessions[(i + 1) % 10]
            theirs = mine[other][0]["value"]
            assert calls.overview(s, theirs) == json.dumps("Choose a dataset, or upload a log.")
            own = calls.overview(s, mine[s][0]["value"])
            assert mine[s][0]["label"].split("uploaded: ")[1].split(" · ")[0] in own
        # an eleventh session is turned away (all ten are active) instead of evicting anyone
        r = upload(requests.Session(), base, new_id(), SMALL.read_bytes(), "late.log.gz")
        assert r.status_code == 503 and "10 browser sessions" in r.json()["error"]
        for s in sessions:
            assert len(calls.poll(s)[0]) == len(mine[s]) + 1
    leftovers = [p for d in server.upload_dirs() for p in d.iterdir()]
    # an upload's file stays while its dataset lives (a request's log lines are read again from it); the
    # three datasets session 0's cap dropped took theirs with them
    assert len(leftovers) == sum(len(m) for m in mine.values()) == 11
    uploads = len(statuses)
    with capsys.disabled():
        print(f"\n10 sessions, {uploads} uploads ({sum(s == 200 for s in statuses)} accepted, {len(busy)} retries "
              f"after 429 from session 0's full queue), "
              f"{calls.requests} callback requests, {took:.1f} s to all analysed; server RSS "
              f"baseline {rss.baseline / MiB:.0f} MiB, peak {rss.peak / MiB:.0f} MiB, after {rss.last / MiB:.0f} MiB")
    assert uploads == 14 and all(s == 200 for s in statuses) and set(busy) <= {0}
    assert rss.peak < 2048 * MiB


def zeros_bomb() -> bytes:
    """~2 MB of gzip holding 2 GiB of zeros (2048 members of 1 MiB each: gzip readers concatenate them)."""
    return gzip.compress(b"\0" * MiB, 9) * 2048


def text_bomb(gib: int = 4) -> bytes:
    """A few MB of gzip holding ``gib`` GiB of log-like lines (passes the binary check, not the size cap)."""
    line = b"2026-11-22T01:09:40.050266Z\tinfo\tenvoy main source/server/server.cc:467\thello\tthread=1\n"
    return gzip.compress(line * (MiB // len(line)), 9) * (1024 * gib)


def test_gzip_bombs_are_refused_and_the_server_keeps_answering(dashboard_process, capsys):
    server = dashboard_process(str(SMALL))  # default caps: 2048 MB of log text per upload
    base, session, http = server.base, new_id(), requests.Session()
    zeros, text = zeros_bomb(), text_bomb()
    with RssSampler(server.pid) as rss:
        t0 = time.time()
        r = upload(http, base, session, zeros, "bomb.log.gz")
        zeros_s = time.time() - t0
        assert r.status_code == 415, r.text
        assert r.json()["error"].startswith("bomb.log.gz: binary content (NUL bytes)")
        t0 = time.time()
        r = upload(http, base, session, text, "text-bomb.log.gz")
        text_s = time.time() - t0
        assert r.status_code == 413, r.text
        assert "2,048 MB of log text (decompressed)" in r.json()["error"]
        assert http.get(f"{base}/", timeout=30).status_code == 200
        r = upload(http, base, session, SMALL.read_bytes(), "after.log.gz")  # still analyses uploads
        assert r.status_code == 200
    calls = Callbacks(http, base)
    deadline = time.time() + 120
    while (polled := calls.poll(session))[1]:
        assert time.time() < deadline
        time.sleep(0.3)
    assert any(o["label"].startswith("uploaded: after.log.gz") for o in polled[0])
    # refused uploads left nothing behind; the accepted one's file stays with its dataset
    assert len([p for d in server.upload_dirs() for p in d.iterdir()]) == 1
    with capsys.disabled():
        print(f"\ngzip bombs: {len(zeros) / 1e6:.1f} MB of gzip / 2 GiB of zeros refused in {zeros_s:.2f} s; "
              f"{len(text) / 1e6:.1f} MB / 4 GiB of log lines refused at the 2 GiB cap in {text_s:.1f} s; server RSS "
              f"baseline {rss.baseline / MiB:.0f} MiB, peak {rss.peak / MiB:.0f} MiB")
    assert rss.peak - rss.baseline < 200 * MiB


def test_body_larger_than_the_cap_is_refused_by_waitress(dashboard_process):
    server = dashboard_process(str(SMALL), "--max-upload-mb", "1")
    r = upload(requests.Session(), server.base, new_id(), b"a\n" * (2 * MiB), "big.log")
    assert r.status_code == 413 and r.headers["Content-Type"] == "application/json"
    assert r.json()["error"].startswith("big.log: more than this server's upload limit of 1 MB of log text")
    chunked = requests.post(f"{server.base}{UPLOAD}", params={"name": "chunked.log"}, timeout=60,
                            data=iter([b"a\n" * MiB] * 4), headers={"X-Dissector-Session": new_id()})
    assert chunked.status_code == 413 and chunked.json()["error"].startswith("chunked.log: more than")
    assert requests.get(f"{server.base}/", timeout=30).status_code == 200


@pytest.mark.parametrize("name", ["capture.jsonl", "istio-proxy.log.1", "no-extension"])
def test_names_do_not_matter_over_http(dashboard_process, name, tmp_path):
    server = dashboard_process(str(SMALL))
    plain = gzip.decompress(SMALL.read_bytes())
    r = upload(requests.Session(), server.base, new_id(), plain, name)
    assert r.status_code == 200, r.text
