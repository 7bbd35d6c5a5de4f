"""private_tmp: a dashboard server's temporary files (the upload's redacted text, body buffers) are in
one private directory (0700, files 0600), removed on SIGTERM and SIGINT, and by the next server when the
server was killed outright. The real server in a subprocess, driven over HTTP on 127.0.0.1."""
from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest
import requests

from envoy_dissector.dashboard import private_tmp
from envoy_dissector.dashboard.datasets import new_id
from tests.builders import Callbacks, DashboardProcess, upload

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "fixtures" / "istio-thread" / "keepalive" / "envoy.log.gz"


def upload_and_read_lines(server: DashboardProcess) -> None:
    """Upload a gzip capture (kept as its redacted text) and open a request's log lines (read from that file)."""
    http, session = requests.Session(), new_id()
    assert upload(http, server.base, session, SMALL.read_bytes(), "up.log.gz").status_code == 200
    calls = Callbacks(http, server.base)
    deadline = time.time() + 120
    while (polled := calls.poll(session))[1]:
        assert time.time() < deadline, "the analysis did not finish"
        time.sleep(0.3)
    dataset = next(o["value"] for o in polled[0] if o["label"].startswith("uploaded: "))
    deps = http.get(f"{server.base}/_dash-dependencies", timeout=30).json()
    lines_key = next(d["output"] for d in deps if d["output"] == "log-lines.children")
    resp = calls._call(lines_key, [{"id": "show-lines", "property": "n_clicks", "value": 1}],
                       [{"id": "selected-request", "property": "data", "value": None},
                        {"id": "dataset", "property": "value", "value": dataset},
                        {"id": "session", "property": "data", "value": {"token": session}}])
    assert resp["log-lines"]["children"]


def ours(tmp: Path) -> list[Path]:
    """What the server made in its TMPDIR (the test's own log file aside)."""
    return [p for p in tmp.iterdir() if p.name != "server.out"]


def wait_exit(server: DashboardProcess) -> int:
    return server.proc.wait(30)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_temporary_files_are_private_and_gone_after_a_signal(tmp_path, sig):
    server = DashboardProcess([str(SMALL)], tmp_path)
    try:
        upload_and_read_lines(server)
        (root,) = server.private_dirs()
        assert ours(tmp_path) == [root], "every temporary file is inside the private directory"
        inside = list(root.rglob("*"))
        files = [p for p in inside if p.is_file()]
        assert any(p.name.startswith("upload-") and p.suffix == ".log" for p in files), "the upload is kept"
        for p in [root, *inside]:
            mode = stat.S_IMODE(p.stat().st_mode)
            assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))
        server.proc.send_signal(sig)
        assert wait_exit(server) == 128 + sig
        assert ours(tmp_path) == []
    finally:
        server.stop()


def test_the_next_server_removes_what_a_killed_one_left(tmp_path):
    alive = tmp_path / f"{private_tmp.PREFIX}{os.getpid()}-running"  # a running process's: kept
    alive.mkdir()
    first = DashboardProcess([str(SMALL)], tmp_path)
    try:
        upload_and_read_lines(first)
        (left,) = [p for p in first.private_dirs() if p != alive]
        first.proc.send_signal(signal.SIGKILL)
        wait_exit(first)
        assert any(p.name.startswith("upload-") for p in left.rglob("*"))
    finally:
        first.stop()
    second = DashboardProcess([str(SMALL)], tmp_path)
    try:
        assert not left.exists()
        assert alive.is_dir()
        assert len(second.private_dirs()) == 2  # its own and the running process's
    finally:
        second.stop()
