"""Odd file names and option values: one line and an exit code each, never a traceback (issue 33, items 7, 10).

Real files (a name with bytes that are not UTF-8, a 300-character name, a symlink loop, /proc/self/mem,
JSON nested 1,000 deep) through the real command line in a subprocess, whose stdout and stderr are real
pipes with their own encoding (where a surrogate in a name used to raise).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "envoy" / "keepalive" / "envoy.log.gz"
CLI = [sys.executable, "-m", "envoy_dissector.cli"]
NOT_UTF8 = b"proxy-\xff\xfe.log.gz"


def cli(*argv: str | bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run([*CLI, *argv], capture_output=True, check=False, timeout=300, cwd=cwd)
    assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    return done


def one_line_error(done: subprocess.CompletedProcess[bytes], code: int) -> str:
    text = done.stderr.decode("utf-8", errors="replace")
    assert done.returncode == code, text
    lines = [line for line in text.splitlines() if line.startswith("envoy-dissect")]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def odd_name(tmp_path: Path) -> Path:
    target = Path(os.fsdecode(bytes(tmp_path) + b"/" + NOT_UTF8))
    shutil.copyfile(FIXTURE, target)
    return target


def test_analyze_a_file_named_with_bytes_that_are_not_utf8(odd_name: Path) -> None:
    done = cli("analyze", os.fsencode(odd_name), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["diagnostics"]["requests"] > 0
    done = cli("analyze", os.fsencode(odd_name))
    assert done.returncode == 0 and b"proxy-\\xff\\xfe.log.gz" in done.stdout  # shown escaped


def test_parse_and_a_glob_over_such_a_name(odd_name: Path, tmp_path: Path) -> None:
    out = tmp_path / "requests.csv"
    done = cli("parse", b"proxy-*.log.gz", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "proxy-\\xff\\xfe.log.gz" in out.read_text(encoding="utf-8")  # the origin column
    missing = one_line_error(cli("analyze", b"missing-\xff.log", cwd=tmp_path), 2)
    assert "missing-\\xff.log: no such file" in missing


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/mem is Linux's")
def test_a_file_that_opens_but_cannot_be_read() -> None:
    assert "/proc/self/mem: read failed: Input/output error" in one_line_error(cli("analyze", "/proc/self/mem"), 2)


def test_a_name_too_long_and_a_symlink_loop(tmp_path: Path) -> None:
    assert "file name too long" in one_line_error(cli("analyze", str(tmp_path / ("a" * 300))), 2)
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    line = one_line_error(cli("parse", str(tmp_path / "loop-a")), 2)
    assert "symbolic link loop" in line and "no such file" not in line


@pytest.mark.parametrize("nested", ["[" * 1000 + "]" * 1000, '{"a":' * 1000 + "1" + "}" * 1000],
                         ids=["arrays", "objects"])
def test_json_nested_a_thousand_deep(tmp_path: Path, nested: str) -> None:
    alone = tmp_path / "deep.jsonl"
    alone.write_text(f'{{"message":{nested}}}\n' * 3)
    assert "not an Envoy / istio-proxy log" in one_line_error(cli("analyze", str(alone)), 3)
    with gzip.open(REPO / "fixtures" / "istio-json" / "workers" / "envoy.log.gz", "rt") as fh:
        lines = fh.read().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([*lines[:200], nested, *lines[200:]]) + "\n")
    done = cli("analyze", str(mixed), "--json")
    assert done.returncode == 0, done.stderr
    diagnostics = json.loads(done.stdout)["diagnostics"]
    assert diagnostics["lines_read"] == len(lines) + 1 and diagnostics["lines_malformed"] >= 1


@pytest.mark.parametrize(("argv", "says"), [
    (["analyze", str(FIXTURE), "--top", "99999999999999999999"], "--top: 99999999999999999999 is out of range"),
    (["analyze", str(FIXTURE), "--top", "-1"], "--top: -1 is negative"),
    (["dashboard", "--port", "99999"], "--port: 99999 is out of range (1-65535)"),
    (["dashboard", "--port", "0"], "--port: 0 is out of range"),
    (["dashboard", "--max-upload-mb", "nan"], "--max-upload-mb: nan is out of range"),
    (["dashboard", "--max-upload-mb", "inf"], "--max-upload-mb: inf is out of range"),
    (["dashboard", "--session-idle-minutes", "nan"], "--session-idle-minutes: nan is out of range"),
    (["dashboard", "--preauth-timeout", "0"], "--preauth-timeout: 0 is out of range"),
    (["fleet", str(FIXTURE), "-o", "unused", "--dashboard-port", "70000"], "--dashboard-port: 70000 is out of range"),
], ids=["top-huge", "top-negative", "port-99999", "port-0", "upload-nan", "upload-inf", "idle-nan", "preauth-0",
        "fleet-port"])
def test_option_values_out_of_range_are_usage_errors(argv: list[str], says: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from envoy_dissector.cli.main import main

    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 64
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "says"), [
    (["dashboard", "--port", "99999"], "--port: 99999 is out of range (1-65535)"),
    (["dashboard", "--max-upload-mb", "inf"], "--max-upload-mb: inf is out of range"),
], ids=["port", "upload"])
def test_the_refusal_is_one_line_before_anything_listens(argv: list[str], says: str) -> None:
    assert says in one_line_error(cli(*argv), 64)


def test_fleet_over_a_name_that_is_not_utf8(odd_name: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    out = tmp_path / "dataset"
    done = cli("fleet", os.fsencode(odd_name), "-o", str(out), "--workers", "1", "-q")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["inputs"][0]["ok"] and summary["inputs"][0]["requests"] > 0
