"""Whole-number options given a negative or zero count are refused with one line and the usage exit code (64)
before anything starts (no cluster, no Envoy, no server, no output), never a traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = str(REPO / "fixtures" / "envoy" / "keepalive" / "envoy.log.gz")
USAGE = 64


@pytest.mark.parametrize(("argv", "option"), [
    (["dashboard", FIXTURE, "--max-datasets", "-1"], "--max-datasets"),
    (["dashboard", FIXTURE, "--max-sessions", "-3"], "--max-sessions"),
    (["fleet", FIXTURE, "-o", "{out}", "--workers", "-2"], "--workers"),
    (["fetch", "some-pod", "-o", "{out}/pod.log", "--max-log-requests", "-1"], "--max-log-requests"),
    (["lab", "keepalive", "-o", "{out}", "--requests", "-5"], "--requests"),
    (["lab", "keepalive", "-o", "{out}", "--concurrency", "-1"], "--concurrency"),
], ids=["max-datasets", "max-sessions", "workers", "max-log-requests", "lab-requests", "lab-concurrency"])
def test_a_negative_count_is_one_usage_line(tmp_path: Path, argv: list[str], option: str) -> None:
    out = tmp_path / "out"
    args = [a.replace("{out}", str(out)) for a in argv]
    done = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    assert "Traceback" not in done.stderr
    assert done.returncode == USAGE, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("envoy-dissect") and option in lines[0], done.stderr
    assert not out.exists() or not any(out.iterdir())
