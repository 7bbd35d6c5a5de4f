"""Real debug-level, cut-off and info-level excerpts written by other people (tests/analysis/real/).

Copied verbatim from the corpus with their manifest entries (real/manifest.json: source address, author,
date, Envoy version). Expectations come from that manifest: the level, how many client requests the
excerpt holds, the CLI's exit code, and phases computed by hand from the raw timestamps (docs/phases.md,
debug-level fallbacks) — never from what the tool printed.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from envoy_dissector.analysis import Capture
from envoy_dissector.cli.main import main
from tests.builders import analysed

REAL = Path(__file__).resolve().parent / "real"
MANIFEST = json.loads((REAL / "manifest.json").read_text())
EXCERPTS: list[dict[str, Any]] = MANIFEST["excerpts"]
ACCEPTED = [e for e in EXCERPTS if e["cli_exit"] == 0]
HAND = [(e, h) for e in EXCERPTS for h in e.get("hand_phases", [])]


def _ids(excerpts: list[dict[str, Any]]) -> list[str]:
    return [e["file"][:3] for e in excerpts]


def _capture(e: dict[str, Any]) -> Capture:
    """The excerpt analysed once per test process (three tests read each)."""
    return analysed(REAL / e["file"])


def test_manifest_names_every_copied_excerpt_with_its_source() -> None:
    files = sorted(p.name for p in REAL.glob("*.log"))
    assert sorted(e["file"] for e in EXCERPTS) == files
    for e in EXCERPTS:
        assert e["source"]["url"].startswith("http") and e["level"] in ("trace", "debug", "info")
    assert {e["level"] for e in EXCERPTS} == {"trace", "debug", "info"}


@pytest.mark.parametrize("e", ACCEPTED, ids=_ids(ACCEPTED))
def test_level_and_tick_are_detected(e: dict[str, Any]) -> None:
    q = _capture(e).quality()
    assert q.level == e["level"]
    assert q.resolution == {"us": "µs", "ms": "ms"}[e["ts_resolution"]]


@pytest.mark.parametrize("e", ACCEPTED, ids=_ids(ACCEPTED))
def test_client_requests_are_found_and_cut_ones_say_so(e: dict[str, Any]) -> None:
    r = _capture(e).requests
    client = r.filter(~pl.col("internal")) if r.height else r
    assert client.height == e["client_requests"]
    for row in client.filter(~pl.col("complete")).iter_rows(named=True):
        assert row["outcome"] == "cut by the capture" or row["outcome"].startswith(("local reply", "stream reset"))
        assert row["missing_boundaries"] or row["boundary_fallbacks"]  # says why it is partial


@pytest.mark.parametrize("e", EXCERPTS, ids=_ids(EXCERPTS))
def test_cli_exit_code_and_message(e: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every output written, or exit 8 at info level; in-process (an unexpected exception fails the test)."""
    outs = [tmp_path / f"o{s}" for s in (".json", ".csv", ".parquet", ".jsonl", ".trace.json")]
    args = ["analyze", str(REAL / e["file"]), "-q"]
    code = main([*args, *[a for o in outs for a in ("-o", str(o))]])
    err = capsys.readouterr().err
    assert code == e["cli_exit"], err
    if e["cli_exit"] == 8:
        assert len(err.strip().splitlines()) == 1
        assert "info level" in err and "istioctl proxy-config log POD --level trace" in err
        return
    assert all(o.exists() for o in outs)
    summary = json.loads(outs[0].read_text())
    assert summary["capture_quality"]["level"] == e["level"]
    if e["client_requests"] and not summary["diagnostics"]["requests_complete"]:
        assert summary["partial_requests"] and all("missing_boundaries" in p for p in summary["partial_requests"])
        assert main(args) == 0
        report = capsys.readouterr().out
        assert "partial requests" in report and "known: " in report


@pytest.mark.parametrize(("e", "hand"), HAND, ids=[f"{e['file'][:3]}-S{h['request']['stream_id']}" for e, h in HAND])
def test_hand_computed_phases(e: dict[str, Any], hand: dict[str, Any]) -> None:
    r = _capture(e).requests
    ids = hand["request"]
    row = r.filter((pl.col("downstream_conn_id") == ids["downstream_conn_id"])
                   & (pl.col("stream_id") == ids["stream_id"]))
    assert row.height == 1
    assert not row["internal"][0]
    wrong = []
    for column, expected in hand["phases"].items():
        values = [row[c][0] for c in column.split("+")]
        assert None not in values, column
        if abs(sum(values) - expected["value"]) >= hand["tick_us"]:
            wrong.append(f"{column}: {sum(values)} µs, by hand {expected['value']} µs "
                         f"({expected['from']} -> {expected['to']})")
    if wrong and row["upstream_conn_id"][0] is None and "attaching to next request" in (REAL / e["file"]).read_text():
        # The connect time needs the upstream connection, linked by the pool's `attaching to next request`
        # (Envoy <= 1.13 vocabulary, issue 9 §2): until the grammar reads it, router holds the connect.
        pytest.xfail("pre-1.13 pool vocabulary not read yet: no upstream link: " + "; ".join(wrong))
    assert not wrong, wrong
