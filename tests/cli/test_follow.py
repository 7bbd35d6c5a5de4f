"""Follow mode without a live Envoy: the file follower (rotation, truncation), the rolling view's window and
text, and ``analyze --follow`` end to end on real lab captures (stdin that ends, a file that grows, Ctrl-C)."""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis.capture import dissect
from envoy_dissector.analysis.outputs.live import LiveWindow, render_line, render_screen
from envoy_dissector.analysis.stats import counted, percentile
from envoy_dissector.cli.main import main
from envoy_dissector.cli.tail import FileFollower, LivePipe, follow_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KEEPALIVE = FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"
LUA = FIXTURES / "istio-thread" / "lua-cpu" / "envoy.log.gz"
#: Istio 1.11's text format: no thread ids
LEGACY = FIXTURES / "legacy-1.19" / "plain" / "http2" / "envoy.log.gz"
#: Longest wait for a subprocess to reach a state (a deadline on a loaded machine, not a speed goal).
WAIT_S = 90


def _lines(path: Path) -> list[bytes]:
    return gzip.decompress(path.read_bytes()).splitlines(keepends=True)


def _collect(follower: FileFollower, stop: threading.Event, out: list[bytes]) -> threading.Thread:
    def run() -> None:
        for data in follower.chunks(stop):
            out.append(data)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_follower_reads_across_rotation_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "envoy.log"
    log.write_bytes(b"one\ntwo\n")
    follower = FileFollower(log, poll_s=0.01)
    stop, got = threading.Event(), []
    thread = _collect(follower, stop, got)
    _wait_for(lambda: b"".join(got) == b"one\ntwo\n", "the first lines")
    with log.open("ab") as fh:  # the old file grows a last time, then logrotate renames it and creates a new one
        fh.write(b"three\n")
    log.rename(tmp_path / "envoy.log.1")
    log.write_bytes(b"four\n")
    _wait_for(lambda: b"".join(got).endswith(b"four\n"), "the rotated file's lines")
    assert follower.rotations == 1
    log.write_bytes(b"")  # copytruncate: the same file, emptied, then written again
    _wait_for(lambda: follower.truncations == 1, "the truncation")
    with log.open("ab") as fh:
        fh.write(b"five\n")
    stop.set()
    thread.join(WAIT_S)
    assert b"".join(got) == b"one\ntwo\nthree\nfour\nfive\n"


def test_follower_from_end_and_a_file_created_later(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    follower = FileFollower(log, poll_s=0.01)
    stop, got = threading.Event(), []
    thread = _collect(follower, stop, got)
    log.write_bytes(b"first\n")
    _wait_for(lambda: got, "the file created after the follow began")
    stop.set()
    thread.join(WAIT_S)
    assert b"".join(got) == b"first\n"
    old = tmp_path / "old.log"
    old.write_bytes(b"before\n")
    pipe = LivePipe("old.log")
    stop2 = threading.Event()
    feeder = threading.Thread(target=follow_file(FileFollower(old, from_end=True, poll_s=0.01), pipe),
                              args=(stop2,), daemon=True)
    feeder.start()
    time.sleep(0.1)
    with old.open("ab") as fh:
        fh.write(b"after\npartial")
    time.sleep(0.1)
    stop2.set()
    feeder.join(WAIT_S)
    with open(pipe.source.path, "rb") as fh:  # type: ignore[arg-type]
        assert fh.read() == b"after\npartial\n"  # (the partial last line is ended at the end of the follow)
    pipe.close()


@pytest.fixture(scope="module")
def lua_capture():  # type: ignore[no-untyped-def]
    return dissect(str(LUA))


def test_window_numbers_are_the_window_requests(lua_capture) -> None:  # type: ignore[no-untyped-def]
    requests, phases = lua_capture.requests, lua_capture.phases
    window = LiveWindow(window_s=3600)
    for part in requests.iter_slices(7):
        window.add(part, phases.join(part.select("request_uid"), on="request_uid", how="semi"))
    snap = window.snapshot()
    client = counted(requests)
    assert snap.requests_total == requests.filter(~pl.col("internal")).height
    assert snap.window_requests == client.height
    assert snap.phases["total"] == (percentile(client["total_us"], 0.5), percentile(client["total_us"], 0.99))
    assert snap.phases["filter_chain"][0] == percentile(client["filter_chain_us"], 0.5)
    p99 = percentile(client["total_us"], 0.99)
    assert snap.slow and all(row["total_us"] >= p99 for row in snap.slow)  # type: ignore[operator]
    assert [f.id for f in snap.new_findings] == [f.id for f in snap.findings]
    assert any(f.id.startswith("slow-filter-") for f in snap.findings)  # the Lua filter burning CPU
    assert window.snapshot().new_findings == []  # each finding is new once


def test_window_is_bounded_in_rows_and_log_time(lua_capture) -> None:  # type: ignore[no-untyped-def]
    requests = lua_capture.requests.sort("ds_rx_beg_us", nulls_last=True)
    window = LiveWindow(max_requests=5)
    for part in requests.iter_slices(3):
        window.add(part, lua_capture.phases.head(0))
    kept, _ = window.frames()
    assert kept.height <= 5
    assert set(kept["request_uid"]) <= set(requests.tail(5)["request_uid"])
    starts = requests["ds_rx_beg_us"].drop_nulls()
    span_s = (int(starts.max()) - int(starts.min())) / 1e6  # type: ignore[arg-type]
    narrow = LiveWindow(window_s=span_s / 4)
    for part in requests.iter_slices(3):
        narrow.add(part, lua_capture.phases.head(0))
    kept, _ = narrow.frames()
    newest = int(starts.max())  # type: ignore[arg-type]
    assert kept.height and kept["ds_rx_beg_us"].min() >= newest - int(span_s / 4 * 1e6)  # type: ignore[operator]


def test_view_fits_80_columns(lua_capture) -> None:  # type: ignore[no-untyped-def]
    window = LiveWindow(window_s=3600)
    long_path = lua_capture.requests.with_columns(path=pl.lit("/" + "x" * 200))
    window.add(long_path, lua_capture.phases)
    snap = window.snapshot()
    screen = render_screen(snap, source="/var/log/" + "very-long-name-" * 8 + ".log", lines_read=123_456)
    assert all(len(line) <= 80 for line in screen.splitlines())
    assert "p50" in screen and "newest slow requests" in screen and "findings" in screen
    assert all(len(line) <= 80 for line in render_line(snap))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # (argparse's own usage errors exit from inside)
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, message", [
    (["analyze", "--follow", "a.log", "b.log"], "--follow takes one FILE"),
    (["analyze", "--follow", "a.log", "--status", "5xx"], "--status: not with --follow"),
    (["analyze", "--follow", "a.log", "--keep-events"], "--keep-events: not with --follow"),
    (["analyze", "--follow", "a.log", "--whole"], "--keep-events: not with --follow"),
    (["analyze", "a.log", "--from-end"], "--from-end goes with --follow"),
    (["analyze", "--follow", "a.log", "-o", "x.txt"], "unknown output type"),
    (["analyze", "--follow", "a.log", "--refresh", "0"], "out of range"),
])
def test_follow_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = _run(capsys, *argv)
    assert code == 64 and message in err and "Traceback" not in err


def test_follow_stdin_to_its_end_equals_analyze(tmp_path: Path) -> None:
    """``kubectl logs -f … | analyze --follow -``: when the stream ends, the final report and files are the ones
    ``analyze`` writes for the same lines."""
    text = gzip.decompress(KEEPALIVE.read_bytes())
    live, whole = tmp_path / "live.jsonl", tmp_path / "whole.jsonl"
    done = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "analyze", "--follow", "-", "-o", str(live),
                           "--refresh", "0.2"], input=text, capture_output=True, timeout=WAIT_S * 2)
    assert done.returncode == 0, done.stderr.decode()
    (tmp_path / "same.log").write_bytes(text)
    assert main(["analyze", str(tmp_path / "same.log"), "-q", "-o", str(whole)]) == 0
    ours = [json.loads(line) for line in live.read_text().splitlines()]
    theirs = [json.loads(line) for line in whole.read_text().splitlines()]
    drop = ("origin", "request_uid")
    assert [{k: v for k, v in r.items() if k not in drop} for r in ours] == [
        {k: v for k, v in r.items() if k not in drop} for r in theirs]
    out = done.stdout.decode()
    assert "50 requests (50 complete)" in out


@contextmanager
def _following(args: list[str], stdout: Path, stderr: Path) -> Iterator[None]:
    """``envoy-dissect analyze --follow`` with ``args`` while the body runs; then Ctrl-C, which must exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.cli", "analyze", "--follow", *args],
                            stdout=stdout.open("wb"), stderr=stderr.open("wb"))
    try:
        yield
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT_S) == 0, stderr.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_follow_a_growing_file_appends_then_sigint_reports(tmp_path: Path) -> None:
    lines = _lines(KEEPALIVE)
    log, live = tmp_path / "envoy.log", tmp_path / "live.jsonl"
    log.write_bytes(b"".join(lines[:1000]))
    stdout, stderr = tmp_path / "out", tmp_path / "err"
    with _following([str(log), "-o", str(live), "-o", str(tmp_path / "summary.json"), "--refresh", "0.2"],
                    stdout, stderr):
        for start in range(1000, len(lines), 500):
            with log.open("ab") as fh:
                fh.write(b"".join(lines[start:start + 500]))
            time.sleep(0.05)
        # appended as they finish, before the end: the requests whose later lines have been read
        _wait_for(lambda: live.exists() and len(live.read_text().splitlines()) >= 30, "rows appended live")
        assert not (tmp_path / "summary.json").exists()  # (written whole at the end only)
    rows = [json.loads(line) for line in live.read_text().splitlines()]
    assert len({r["x_request_id"] for r in rows if r["x_request_id"]}) == 50 == len(rows) - 1  # + the admin request
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["diagnostics"]["lines_read"] == len(lines)  # every line accounted for
    out = stdout.read_text()
    assert "requests 0 rate" in out.splitlines()[0]  # plain periodic lines (not a terminal) ...
    assert "50 requests (50 complete)" in out  # ... then the final report
    assert os.path.getsize(live) > 0


def test_on_a_terminal_the_view_is_redrawn_in_80_columns(tmp_path: Path) -> None:
    """stdout a terminal (a pseudo-terminal here): the screen is cleared and redrawn, every line within 80
    columns, and Ctrl-C still ends with the final report."""
    import pty

    log = tmp_path / "envoy.log"
    log.write_bytes(b"".join(_lines(KEEPALIVE)))
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.cli", "analyze", "--follow", str(log),
                             "--refresh", "0.2"], stdin=subprocess.DEVNULL, stdout=follower,
                            stderr=subprocess.PIPE, env=dict(os.environ, COLUMNS="80"))
    os.close(follower)
    seen = bytearray()

    def read_available() -> None:
        import select

        while select.select([leader], [], [], 0.05)[0]:
            try:
                seen.extend(os.read(leader, 65536))
            except OSError:  # (the terminal's other end closed)
                return

    try:
        _wait_for(lambda: read_available() or seen.count(b"\x1b[H\x1b[2J") >= 2, "two redraws")
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + WAIT_S
        while proc.poll() is None and time.monotonic() < deadline:
            read_available()
        assert proc.wait(timeout=WAIT_S) == 0, proc.stderr.read().decode()  # type: ignore[union-attr]
        read_available()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    text = seen.decode("utf-8", "replace").replace("\r\n", "\n")
    screen = text.split("\x1b[H\x1b[2J")[1]
    assert "envoy-dissect follow · " in screen and "newest slow requests" in screen
    assert all(len(line) <= 80 for line in screen.splitlines())
    assert "50 requests (50 complete)" in text.split("\x1b[H\x1b[2J")[-1]  # the final report, after a clear


def test_a_log_without_thread_ids_shows_its_requests_before_ctrl_c(tmp_path: Path) -> None:
    """Lines without thread ids are windowed as one worker: every request is in the rolling view before Ctrl-C (the
    log pauses once written whole, so the last ones are emitted too), the view says that the worker lanes come at
    the end, and Ctrl-C gives the report ``analyze`` gives."""
    log = tmp_path / "envoy.log"
    log.write_bytes(gzip.decompress(LEGACY.read_bytes()))
    stdout, stderr = tmp_path / "out", tmp_path / "err"
    clients = dissect(LEGACY).requests.filter(~pl.col("internal")).height
    with _following([str(log), "--refresh", "0.2"], stdout, stderr):
        _wait_for(lambda: f" requests {clients} rate" in stdout.read_text(), "every request in the rolling view")
        assert "no thread ids in this log: worker lanes are inferred at Ctrl-C" in stdout.read_text()
    assert f"{clients} requests ({clients} complete)" in stdout.read_text()
