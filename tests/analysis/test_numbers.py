"""One number per fact: the same p50 in the report, summary.json, the notebook API and the dashboard;
Envoy's own duration beside ours; busy time that agrees with utilisation; a report that fits one screen."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from truth import ABS_TOLERANCE_US, FIXTURES, REL_TOLERANCE, Truth, capture_of, discover, fixture_ids, matched, truth

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.outputs.report import WIDTH, render
from envoy_dissector.analysis.stats import counted, median, percentiles
from envoy_dissector.analysis.units import format_us, in_unit
from envoy_dissector.dashboard import views
from envoy_dissector.dashboard.datasets import Registry
from envoy_dissector.parser.errors import DissectorError
from tests.builders import analysed

ALL = discover()
ROOT = FIXTURES.parent
#: One capture per log (the multi-pod pods share theirs), plus the seed-000 reconstruction.
LOGS = sorted({(t.log, t.log_format) for t in ALL}) + [(FIXTURES / "old-format" / "seed000" / "envoy.log", None)]
#: Envoy's default layout writes millisecond timestamps: our difference of two of them is only known to ±1 ms.
MS_RESOLUTION_US = 1_000


def _report_p50(text: str) -> dict[str, float]:
    """The p50 column of the report's phase table, in µs, by row label (``loop_queue`` etc.)."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("phase "))
    unit = lines[head].split()[1].strip("()")  # "phase (µs)  p50  p90 ...": the table's one unit
    out = {}
    for line in lines[head + 1:]:
        if not line.strip() or line.lstrip().startswith("("):
            break
        if line.startswith("-"):
            continue
        label, p50 = line[:20].strip(), line[20:29].strip().replace(",", "")
        out[label] = float(p50) * (1000 if unit == "ms" else 1)
    return out


@pytest.mark.parametrize("rel", ["istio-thread/lua-cpu", "istio-thread/workers", "istio-thread/upstream-delay"])
def test_one_p50_per_phase_everywhere(rel: str, tmp_path: Path) -> None:
    """Report, summary.json (CLI), notebook API and dashboard show the same p50 for every phase."""
    t = truth(rel)
    out = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "analyze", str(t.log), "-q",
                           "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    from_json = {p: v["p50"] for p, v in json.loads(out.read_text())["phases"].items()}
    cap = dissect(str(t.log))
    notebook = {p: v["p50"] for p, v in cap.summary()["phases"].items()}
    report = _report_p50(proc.stdout)
    ds = Registry().add(cap, name=rel, owner=None)
    table = views.percentile_table(ds.summary())
    p50_unit = _header(table)[1].removeprefix("p50 (").removesuffix(")")
    dashboard = {row[0]: row[1] for row in _cells(table)}
    r = counted(cap.requests)
    assert from_json == notebook
    for phase, p50 in from_json.items():
        assert p50 == median(r[f"{phase}_us"]), phase  # the notebook's own median is the same number
        assert dashboard[phase] == in_unit(p50, p50_unit), phase
        if phase in report:  # rows that are zero in every request are hidden (and said so)
            unit_step = 10 if p50 >= 10_000 else 1  # ms cells carry two decimals
            assert abs(report[phase] - p50) < unit_step, (phase, report[phase], p50)
        else:
            assert not percentiles(cap.requests)[phase]["max"] and phase in proc.stdout
    # Findings quote the same medians.
    for f in cap.findings():
        for phase, value in re.findall(r"median (\w+) ([\d,.]+ (?:µs|ms))", f.evidence):
            if phase in from_json:
                assert value == format_us(from_json[phase]), (f.id, phase, value)


def _header(table: object) -> list[str]:
    return [th.children for th in table.children[0].children.children]  # type: ignore[attr-defined]


def _cells(table: object) -> list[list[str]]:
    body = table.children[1]  # type: ignore[attr-defined]
    return [[str(td.children) for td in tr.children] for tr in body.children]


@pytest.mark.parametrize("t", ALL, ids=fixture_ids(ALL))
def test_envoy_duration_agrees_with_the_access_log(t: Truth) -> None:
    """``envoy_duration_us`` (ds_tx_end_us − ds_rx_beg_us) is Envoy's DS_RX_BEG→DS_TX_END within max(50 µs, 5 %)
    for ≥ 95 % of requests (with millisecond timestamps, within their 1 ms resolution on top)."""
    key = "ds_rx_beg_to_ds_tx_end_us"
    j = matched(t).filter(pl.col("request_uid").is_not_null() & pl.col("complete") & pl.col(key).is_not_null())
    slack = 0 if t.microseconds else MS_RESOLUTION_US
    diff = (pl.col("envoy_duration_us") - pl.col(key)).abs()
    ok = j.filter(diff <= pl.max_horizontal(pl.lit(ABS_TOLERANCE_US), pl.col(key) * REL_TOLERANCE) + slack)
    assert j.height > 0
    assert ok.height >= 0.95 * j.height, f"{t.rel}: {ok.height}/{j.height}"
    # Both durations are exported: ours (socket to socket) covers Envoy's.
    assert (j["total_us"] >= j["envoy_duration_us"] - slack).mean() >= 0.95  # type: ignore[operator]


@pytest.mark.parametrize("log, log_format", LOGS, ids=[str(p.relative_to(FIXTURES)) for p, _ in LOGS])
def test_busy_time_and_utilisation_agree(log: Path, log_format: str | None) -> None:
    """busy_us is counted inside the traffic window (no slice running on to shutdown), so utilisation is
    exactly busy / window and busy never exceeds the window."""
    w = capture_of(log, log_format).workers()
    assert w.height
    assert (w["busy_us"] <= w["window_us"]).all()
    ratio = (w["busy_us"] / w["window_us"]).clip(0, 1)
    assert ((ratio - w["utilisation"]).abs() < 1e-9).all()


@pytest.mark.parametrize("log, log_format", LOGS, ids=[str(p.relative_to(FIXTURES)) for p, _ in LOGS])
def test_report_fits_one_screen(log: Path, log_format: str | None) -> None:
    """≤ 100 columns, and wrapping never cuts a word of the evidence or the fix."""
    cap = capture_of(log, log_format)
    text = render(cap)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    words = set(text.split())
    for f in cap.findings():
        for word in (f.evidence + " " + f.fix).split():
            assert word in words, (f.id, word)


#: Every other log under fixtures/ (real excerpts, debug- and info-level captures) with no truth files.
OTHER_LOGS = sorted(p for p in FIXTURES.rglob("*.log*")
                    if p.suffix in (".log", ".gz") and p not in {log for log, _ in LOGS} and "multi-pod" not in str(p))


@pytest.mark.parametrize("log", OTHER_LOGS, ids=[str(p.relative_to(FIXTURES)) for p in OTHER_LOGS])
def test_report_fits_one_screen_on_every_other_log(log: Path) -> None:
    try:
        cap = analysed(log)  # (shared with test_stage_frames, which reads the same captures)
    except DissectorError:  # info level, no timestamps...: one error line, no report (exit codes in output.md)
        return
    assert max(len(line) for line in render(cap).splitlines()) <= WIDTH


def test_report_hides_phases_that_are_zero_everywhere_and_says_so() -> None:
    text = render(capture_of(FIXTURES / "old-format" / "seed000" / "envoy.log"))
    rows = _report_p50(text)
    assert "upstream_connect" not in rows and "upstream_wait" in rows
    assert "not shown: upstream_connect" in text
    for label in ("total", "envoy_duration", "loop_queue", "queue_before_read"):
        assert label in rows


def test_report_one_header_per_origin() -> None:
    """Two inputs in different formats: each named with its own format and span."""
    a, b = truth("istio-thread/keepalive"), truth("istio/workers")
    cap = dissect([str(a.log), str(b.log)])
    text = render(cap)
    origins = {o["origin"]: o for o in cap.summary()["capture"]["origins"]}
    assert origins[str(a.log)]["format"] == "istio-thread" and origins[str(b.log)]["format"] == "istio"
    assert origins[str(b.log)]["requests"] == b.access().height
    flat = " ".join(text.split())  # the header wraps where the origin's path length puts it
    assert f"{a.log.relative_to(ROOT)}: format istio-thread" in flat or f"{a.log}: format istio-thread" in flat
    assert "format istio ·" in flat and "2 origins" in flat
    assert f"· {a.access().height} requests" in flat and f"· {b.access().height} requests" in flat
    assert max(len(line) for line in text.splitlines()) <= WIDTH


def test_workers_line_is_bounded() -> None:
    """Many origins: one summary line for the workers, not one entry per worker."""
    logs = [str(t.log) for t in ALL if t.origin_prefix is None and t.log_format is None][:12]
    cap = dissect(logs)
    text = render(cap)
    workers = [line for line in text.splitlines() if line.startswith("workers:")]
    assert len(workers) == 1 and cap.workers().height > 4
    assert max(len(line) for line in text.splitlines()) <= WIDTH
