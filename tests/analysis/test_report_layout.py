"""The terminal report's layout rules (docs/output.md): it fits the width on every fixture, one unit per table,
no wrap inside a short parenthesis, queueing named when it is most of a slow request's time."""
from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.outputs.comparison import compare, render_comparison
from envoy_dissector.analysis.outputs.report import render
from envoy_dissector.analysis.outputs.terminal import MAX_WIDTH, report_width
from tests.builders import analysed

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LOGS = sorted({*FIXTURES.rglob("envoy.log*"), *FIXTURES.rglob("*.log.gz")})
NUMBER = re.compile(r"^-?[\d,]+(\.\d+)?$|^–$")
UNITS = ("µs", "ms")


def _log_format(log: Path) -> str | None:
    meta = log.parent / "meta.json"
    if meta.exists():
        fmt = json.loads(meta.read_text()).get("log_format", {})
        if fmt.get("name") == "custom":
            return str(fmt["pattern"])
    return None


@pytest.fixture(scope="module", params=LOGS, ids=[str(p.relative_to(FIXTURES)) for p in LOGS])
def capture(request):
    return analysed(request.param, _log_format(request.param))  # (shared with the other modules reading it)


def _phase_table(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("phase ("))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip() or lines[i].startswith(("  (", " (")))
    return lines[start:end]  # the header and the rows, not the legend or the note below them


def _split_short_parentheses(lines: list[str]) -> list[str]:
    """Parentheses of at most 30 characters ("(40 complete)") that a wrap split over two lines."""
    split = []
    for line, following in itertools.pairwise(lines):
        opened = re.search(r"\(([^()]*)$", line)
        if opened:
            rest = following.strip()
            close = rest.find(")")
            whole = f"({opened.group(1)} {rest[: close + 1]}" if close >= 0 else None
            if whole is not None and len(whole) <= 30:
                split.append(whole)
    return split


@pytest.mark.parametrize("width", [80, 100])
def test_report_fits_and_keeps_one_unit_per_table(capture, width: int) -> None:
    text = render(capture, width=width)
    too_wide = [line for line in text.splitlines() if len(line) > width]
    assert not too_wide, too_wide
    assert not _split_short_parentheses(text.splitlines()), text
    if "phase (" not in text:
        return
    table = _phase_table(text)
    unit = re.match(r"phase \((µs|ms)\)", table[0]).group(1)  # type: ignore[union-attr]
    for row in table[1:]:
        if row.startswith("-"):
            continue
        cells = row[20:56].split()
        assert len(cells) == 4 and all(NUMBER.match(c) for c in cells), row
    assert sum(text.count(f"({u})") for u in UNITS) <= 3  # the phase table's, the slowest table's, the cost table's
    assert unit in UNITS


def test_report_fits_80_columns_wherever_the_capture_lies(tmp_path: Path) -> None:
    """A finding's evidence starts with its origin, the file's path: a deep clone must not widen the report."""
    deep = tmp_path.joinpath(*["a-directory-name-of-some-length"] * 4)
    deep.mkdir(parents=True)
    log = deep / "envoy.log.gz"
    log.write_bytes((FIXTURES / "legacy-1.19/source-prefix/http2/envoy.log.gz").read_bytes())
    text = render(dissect(str(log)), width=80)
    assert str(log) + ":" not in text  # the finding's origin label is longer than a line here
    assert "/envoy.log.gz:" in text, text  # its end (the file name) is kept
    assert max(len(line) for line in text.splitlines()) <= 80, text


def test_slowest_names_queueing_when_it_dominates() -> None:
    """lua-cpu: 8 connections on one worker; the slowest requests spent most of their time waiting for it."""
    cap = dissect(str(FIXTURES / "istio-thread/lua-cpu/envoy.log.gz"))
    text = render(cap, width=80, top=5)
    slow = (cap.requests.filter(pl.col("complete") & ~pl.col("internal"))
            .sort(["total_us", "request_uid"], descending=[True, False]).head(5))
    queued = (slow["loop_queue_us"] + slow["queue_before_read_us"]) * 2 >= slow["total_us"] + slow["queue_before_read_us"]
    assert queued.sum() >= 1  # the scenario's point: the slowest requests waited for the worker
    rows = text.split("slowest 5 requests")[1].splitlines()[2::2][:5]
    assert ["queueing (worker)" in row for row in rows] == queued.to_list()


def test_compare_fits_80_and_100_columns() -> None:
    a, b = (dissect(str(FIXTURES / f"istio-thread/{n}/envoy.log.gz")) for n in ("tracing-zipkin", "tracing-off"))
    table = compare(a, b)
    long_name = "/a/very/long/directory/name/for/captures/" * 3 + "tracing-zipkin.log.gz"
    for width in (80, 100):
        text = render_comparison(table, long_name, "b.log", width=width)
        assert max(len(line) for line in text.splitlines()) <= width
        assert text.endswith(")") and "tracing-zipkin.log.gz" in text
        units = re.findall(r"^\((µs|ms)\)", text, flags=re.M)
        assert len(units) == 1


def _analyze(env: dict[str, str]) -> str:
    log = FIXTURES / "istio-thread/tracing-zipkin/envoy.log.gz"
    out = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "analyze", "-q", str(log)],
                         capture_output=True, text=True, env=env, check=True)
    return out.stdout


@pytest.mark.parametrize("columns, limit", [("80", 80), ("", MAX_WIDTH), ("200", MAX_WIDTH)])
def test_cli_report_follows_columns(columns: str, limit: int) -> None:
    """COLUMNS is respected; piped output without it is at most 100 wide, and never wider."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    text = _analyze(env)
    widest = max(len(line) for line in text.splitlines())
    assert widest <= limit
    assert widest > limit - 10  # the width is used, not a narrower fixed layout


def test_report_width_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "72")
    assert report_width(sys.stdout) == 72
    monkeypatch.setenv("COLUMNS", "20")
    assert report_width(sys.stdout) == 60
    monkeypatch.delenv("COLUMNS")
    assert report_width(None) == MAX_WIDTH
