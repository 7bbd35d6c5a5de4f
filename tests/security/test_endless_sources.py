"""A source without line breaks is judged endless after a bound (issue 33, item 8).

A file or device (the real ``/dev/zero``) is refused in one line, exit 2; a pipe or FIFO the user chose is
read on with one warning on stderr, and the lines on both sides of the endless stretch are all counted.
The bounds are lowered through their environment variables so the test reads megabytes, not 64 MiB.
"""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "envoy" / "keepalive" / "envoy.log.gz"
CLI = [sys.executable, "-m", "envoy_dissector.cli"]
MiB = 1024 * 1024
BOUNDS = {"ENVOY_DISSECTOR_MAX_LINE_BYTES": str(1 * MiB), "ENVOY_DISSECTOR_MAX_BYTES_WITHOUT_LINE": str(4 * MiB)}
ZEROS = 20 * MiB


def _capture() -> bytes:
    with gzip.open(FIXTURE, "rb") as fh:
        return fh.read()


def _with_zeros(capture: bytes) -> bytes:
    lines = capture.splitlines(keepends=True)
    return b"".join(lines[:300]) + bytes(ZEROS) + b"\n" + b"".join(lines[300:])


def _run(argv: list[str], feed: bytes | None = None, fifo: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, **BOUNDS}
    if fifo is None:
        return subprocess.run([*CLI, *argv], input=feed, capture_output=True, env=env, check=False, timeout=300)
    writer = threading.Thread(target=fifo.write_bytes, args=(feed,), daemon=True)
    writer.start()
    done = subprocess.run([*CLI, *argv], capture_output=True, env=env, check=False, timeout=300)
    writer.join(timeout=60)
    return done


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_refused_in_one_line() -> None:
    done = _run(["analyze", "/dev/zero"])
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "/dev/zero:" in err and "without a line break" in err and "reading stopped" in err


def test_a_file_of_zeros_is_refused(tmp_path: Path) -> None:
    zeros = tmp_path / "zeros.log"
    zeros.write_bytes(_with_zeros(_capture()))
    done = _run(["parse", str(zeros)])
    assert done.returncode == 2 and b"without a line break" in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["stdin", "fifo"])
def test_a_pipe_is_read_on_with_a_warning(tmp_path: Path, how: str) -> None:
    capture = _capture()
    fifo = None
    if how == "fifo":
        fifo = tmp_path / "live.pipe"
        os.mkfifo(fifo)
    done = _run(["analyze", str(fifo) if fifo else "-", "--json"], feed=_with_zeros(capture), fifo=fifo)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert err.count("without a line break; still reading the pipe") == 1
    diagnostics = json.loads(done.stdout)["diagnostics"]
    assert diagnostics["lines_read"] == capture.count(b"\n") + 1  # the zeros are one (skipped) line
    assert diagnostics["lines_oversize"] == 1
    alone = json.loads(_run(["analyze", "-", "--json"], feed=capture).stdout)["diagnostics"]
    assert diagnostics["requests"] == alone["requests"] > 0
