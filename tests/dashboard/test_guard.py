"""guard: a team dashboard (token required) judged in waitress before a body is read, over real HTTP on
loopback: idle and trickling connections are closed, unauthenticated bodies are never spooled, the bodies
in flight share a budget, refusals are JSON. Every loop is bounded (a number of tries or a deadline)."""
from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from envoy_dissector.dashboard import guard
from envoy_dissector.dashboard.datasets import new_id
from tests.builders import DashboardProcess

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "fixtures" / "istio-thread" / "keepalive" / "envoy.log.gz"
TOKEN = "team-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MiB = 1024 * 1024
#: how long a closed connection may take to be noticed (the guard looks every CLEANUP_INTERVAL_S)
SLACK_S = 5.0
#: the server's --preauth-timeout: shorter than the default (10 s) so the waits below are short, and a server
#: that ignored the option would keep the idle connections past PREAUTH_S + SLACK_S
PREAUTH_S = 3.0


@pytest.fixture(scope="module")
def team(tmp_path_factory) -> Iterator[DashboardProcess]:
    """A dashboard that requires its token (on 127.0.0.1, as a team dashboard on another address would);
    one for the module's tests (each leaves it with no connection of its own open)."""
    server = DashboardProcess([str(SMALL), "--token", TOKEN, "--max-upload-mb", "1", "--preauth-timeout", str(PREAUTH_S)],
                              tmp_path_factory.mktemp("team"))
    yield server
    server.stop()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def closed_by_server(sock: socket.socket, wait_s: float) -> bool:
    """Whether the server closes ``sock`` within ``wait_s`` (what it sent before is read and dropped)."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        sock.settimeout(max(0.05, deadline - time.time()))
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def response_of(sock: socket.socket, wait_s: float = 10) -> tuple[int, dict]:
    """Status and JSON body of the one response on ``sock`` (the server closes the connection after it)."""
    sock.settimeout(wait_s)
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split()[1]), json.loads(body)


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def post_head(port: int, length: int, headers: dict[str, str] | None = None) -> socket.socket:
    sock = connect(port)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    sock.sendall(f"POST /_dissector/upload?name=big.log HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
                 f"X-Dissector-Session: {new_id()}\r\n{extra}\r\n".encode())
    return sock


def largest_deleted_file(pid: int) -> int:
    """Size of the largest unlinked regular file the process holds open (waitress's body buffers)."""
    largest = 0
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            if os.readlink(fd).endswith("(deleted)"):
                largest = max(largest, os.stat(fd).st_size)
        except OSError:
            continue
    return largest


@contextmanager
def many(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def test_a_hundred_idle_connections_from_one_client_do_not_starve_the_server(team):
    with many([connect(team.port) for _ in range(100)]) as idle:
        r = requests.get(f"{team.base}/_dash-layout", headers=AUTH, timeout=SLACK_S)
        assert r.status_code == 200
        # the client's oldest unauthenticated connections were closed as new ones came
        assert sum(closed_by_server(s, 0.2) for s in idle) >= 100 - guard.MAX_PENDING_PER_CLIENT
        assert all(closed_by_server(s, PREAUTH_S + SLACK_S) for s in idle[-guard.MAX_PENDING_PER_CLIENT:])


def test_a_hundred_idle_clients_are_closed_after_the_preauth_timeout(team):
    # 100 loopback addresses (127.0.0.2 ...): the per-client bound does not apply, the connection limit is reached
    with many([connect(team.port, f"127.0.0.{i}") for i in range(2, 102)]) as idle:
        r = requests.get(f"{team.base}/_dash-layout", headers=AUTH, timeout=PREAUTH_S + 2 * SLACK_S)
        assert r.status_code == 200
        # (those past the connection limit waited in the listen queue: accepted later, closed as late)
        assert all(closed_by_server(s, PREAUTH_S + SLACK_S) for s in idle)


def test_a_header_sent_a_byte_at_a_time_is_cut_off(team):
    with many([connect(team.port)]) as (sock,):
        sent = 0
        try:
            for _ in range(int((PREAUTH_S + SLACK_S) / 0.25)):
                sock.sendall(b"GET / HTTP/1.1\r\nX-Slow: "[sent % 24: sent % 24 + 1] or b"a")
                sent += 1
                time.sleep(0.25)
            cut = False
        except OSError:
            cut = True
        assert cut or closed_by_server(sock, SLACK_S)


def test_unauthenticated_uploads_are_refused_before_their_body_is_read(team):
    with many([post_head(team.port, 200 * MiB) for _ in range(4)]) as socks:
        for sock in socks:  # the answer comes before a byte of the body is sent
            status, body = response_of(sock)
            assert status == 401 and "access token" in body["error"]
        for sock in socks:  # a body sent after it is not read (the server may already have closed: a broken pipe)
            try:
                sock.sendall(b"x" * MiB)
            except OSError:
                pass
        assert largest_deleted_file(team.pid) < MiB
        for sock in socks:  # the server reads no more: the connection is closed
            assert closed_by_server(sock, SLACK_S)
    assert [p for d in team.upload_dirs() for p in d.iterdir()] == []


def test_bodies_in_flight_share_a_budget(team):
    # --max-upload-mb 1: a body may be 3 MiB (with the gzip slack), two such may be on their way at once
    length = 3 * MiB - 1
    first, second = post_head(team.port, length, AUTH), post_head(team.port, length, AUTH)
    with many([first, second]):
        first.sendall(b"x" * 1000)
        second.sendall(b"x" * 1000)
        time.sleep(0.5)  # (both headers judged)
        with many([post_head(team.port, length, AUTH)]) as (third,):
            status, body = response_of(third)
            assert status == 503 and "receiving other uploads" in body["error"]
        small = requests.post(f"{team.base}/_dissector/upload", params={"name": "s.log"}, data=b"x" * 100,
                              headers={**AUTH, "X-Dissector-Session": new_id()}, timeout=10)
        assert small.status_code == 503  # the budget is bytes, and it is spent
        first.close()
        deadline, status = time.time() + SLACK_S, 0
        while time.time() < deadline and status != 415:  # the closed connection gave its share back
            with many([post_head(team.port, 100, AUTH)]) as (retry,):
                retry.sendall(b"\0" * 100)
                status, _ = response_of(retry)
            time.sleep(0.1)
        assert status == 415  # read and judged by the upload route (binary content)


def test_refusals_are_json_with_the_security_headers(team):
    r = requests.get(f"{team.base}/", timeout=10)
    assert r.status_code == 401 and r.headers["Content-Type"] == "application/json"
    assert r.headers["X-Frame-Options"] == "DENY" and r.headers["Cache-Control"] == "no-store"
    r = requests.get(f"{team.base}/", headers={**AUTH, "Host": "evil.example"}, timeout=10)
    assert r.status_code == 403 and "--allowed-host" in r.json()["error"]
    r = requests.get(f"{team.base}/", headers={**AUTH, "X-Big": "x" * (80 * 1024)}, timeout=10)
    assert r.status_code == 431 and r.json()["error"]
    with many([post_head(team.port, 64 * MiB, AUTH)]) as (sock,):
        status, body = response_of(sock)
        assert status == 413 and body["error"].startswith("big.log: more than this server's upload limit of 1 MB")
    # the token's three forms still pass
    assert requests.get(f"{team.base}/_dash-layout", cookies={"dissector_access": TOKEN}, timeout=10).ok
    r = requests.get(f"{team.base}/?token={TOKEN}", allow_redirects=False, timeout=10)
    assert r.status_code == 303
