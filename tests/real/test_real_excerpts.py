"""Real Envoy / istio-proxy excerpts written by other people (fixtures/real/, see its README.md).

``fixtures/real/manifest.json`` is the truth: for each excerpt, whether it must be accepted (or the
message it must be rejected with), the format and wrappers our detector should report, its record
count, a ceiling on unknown records, how many client requests it holds, its level, the exit code
of ``envoy-dissect analyze`` with every output suffix, and for some excerpts phases worked out by
hand from the raw timestamps (docs/phases.md; debug-level rules of issue 9 §3).

Where today's code falls short, the check is marked ``xfail(strict=True)`` in ``KNOWN_GAPS`` with
the part of issue 9 that fixes it: once a fix lands the check passes, the strict mark turns that
into a failure, and the entry is removed. The manifest is never bent to today's behaviour.
"""
from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.capture import Capture
from envoy_dissector.cli.main import main
from envoy_dissector.parser.errors import InputError
from tests.builders import analysed

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
MANIFEST: dict[str, Any] = json.loads((REAL / "manifest.json").read_text(encoding="utf-8"))
EXCERPTS: list[dict[str, Any]] = MANIFEST["excerpts"]
OUTPUT_SUFFIXES = (".json", ".parquet", ".csv", ".jsonl", ".trace.json")


def _number(excerpt: dict[str, Any]) -> str:
    return str(excerpt["file"])[:3]


_S2 = "issue 9 §2 (older layouts and vocabularies)"
_S3 = "issue 9 §3 (debug-level and cut-off excerpts)"

#: (excerpt number, check) -> why today's code fails it. A check is ``accepted``, ``format``,
#: ``wrappers``, ``records``, ``unknown``, ``client_requests``, ``level``, ``cli``, ``accounting``, ``aside``,
#: ``repaired``, or
#: ``phase:<column>`` / ``milestone:<column>`` / ``column:<column>`` for hand-computed values.
KNOWN_GAPS: dict[tuple[str, str], str] = {}


def _params(check: str, excerpts: list[dict[str, Any]] | None = None) -> list[Any]:
    params = []
    for e in EXCERPTS if excerpts is None else excerpts:
        reason = KNOWN_GAPS.get((_number(e), check))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(e, id=_number(e), marks=marks))
    return params


ACCEPTED = [e for e in EXCERPTS if e["accepted"]]


def _capture(file: str) -> Capture:
    return analysed(REAL / file)  # (once per test process: test_numbers and test_stage_frames read them too)


def _client_requests(cap: Capture) -> pl.DataFrame:
    return cap.requests.filter(~pl.col("internal"))


@pytest.mark.parametrize("excerpt", _params("accepted"))
def test_accepted_or_rejected_with_the_expected_message(excerpt: dict[str, Any]) -> None:
    if excerpt["accepted"]:
        cap = _capture(excerpt["file"])
        assert cap.diagnostics_info.records > 0
    else:
        with pytest.raises(InputError) as err:
            dissect(str(REAL / excerpt["file"]))
        message = str(err.value).replace(str(REAL / excerpt["file"]), "")  # the file name must not match
        assert excerpt["expected_error"].lower() in message.lower()


@pytest.mark.parametrize("excerpt", _params("format", ACCEPTED))
def test_detected_format(excerpt: dict[str, Any]) -> None:
    assert _capture(excerpt["file"]).format == excerpt["format"]


@pytest.mark.parametrize("excerpt", _params("wrappers", [e for e in ACCEPTED if e["wrappers"]]))
def test_detected_wrappers(excerpt: dict[str, Any]) -> None:
    assert set(excerpt["wrappers"]) <= set(_capture(excerpt["file"]).wrappers)


@pytest.mark.parametrize("excerpt", _params("records", ACCEPTED))
def test_record_count(excerpt: dict[str, Any]) -> None:
    assert _capture(excerpt["file"]).diagnostics_info.records == excerpt["records"]


@pytest.mark.parametrize("excerpt", _params("unknown", ACCEPTED))
def test_unknown_records_within_ceiling(excerpt: dict[str, Any]) -> None:
    assert _capture(excerpt["file"]).diagnostics_info.records_unknown <= excerpt["unknown_records_max"]


@pytest.mark.parametrize("excerpt", _params("client_requests", ACCEPTED))
def test_client_requests_found(excerpt: dict[str, Any]) -> None:
    assert _client_requests(_capture(excerpt["file"])).height == excerpt["client_requests"]


@pytest.mark.parametrize("excerpt", _params("level", ACCEPTED))
def test_capture_level(excerpt: dict[str, Any]) -> None:
    assert _capture(excerpt["file"]).quality().level == excerpt["level"]


@pytest.mark.parametrize("excerpt", _params("accounting", ACCEPTED))
def test_every_line_accounted_for_by_kind(excerpt: dict[str, Any]) -> None:
    d = _capture(excerpt["file"]).diagnostics_info
    assert d.lines_read == d.lines_in_records + d.lines_malformed
    assert sum(d.lines_aside_by_kind.values()) == d.lines_malformed


@pytest.mark.parametrize("excerpt", _params("aside", [e for e in ACCEPTED if e.get("lines_aside")]))
def test_other_programs_lines_set_aside_by_kind(excerpt: dict[str, Any]) -> None:
    """pilot-agent's lines, access logs, a paste's prompt, elisions and markdown are counted by kind."""
    assert dict(_capture(excerpt["file"]).diagnostics_info.lines_aside_by_kind) == excerpt["lines_aside"]


@pytest.mark.parametrize("excerpt", _params("repaired", [e for e in ACCEPTED if "lines_repaired" in e]))
def test_damaged_lines_read_tolerantly(excerpt: dict[str, Any]) -> None:
    assert _capture(excerpt["file"]).diagnostics_info.lines_repaired == excerpt["lines_repaired"]


def _hand_values() -> list[Any]:
    """One case per hand-computed phase or milestone: (excerpt, request ids, column(s), expected, tick)."""
    cases = []
    for e in EXCERPTS:
        for hand in e["hand_phases"]:
            for kind, key in (("phase", "phases"), ("milestone", "milestones"), ("column", "columns")):
                for column, value in hand.get(key, {}).items():
                    check = f"{kind}:{column}"
                    reason = KNOWN_GAPS.get((_number(e), check))
                    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
                    cases.append(pytest.param(e, hand["request"], column, value, hand["tick_us"],
                                              id=f"{_number(e)}-{column}", marks=marks))
    return cases


@pytest.mark.parametrize(("excerpt", "ids", "column", "expected", "tick_us"), _hand_values())
def test_hand_computed_phase(excerpt: dict[str, Any], ids: dict[str, int], column: str,
                             expected: dict[str, Any], tick_us: int) -> None:
    requests = _capture(excerpt["file"]).requests
    row = requests.filter((pl.col("downstream_conn_id") == ids["downstream_conn_id"])
                          & (pl.col("stream_id") == ids["stream_id"]))
    assert row.height == 1, f"request C{ids['downstream_conn_id']}:S{ids['stream_id']} not found"
    values = [row[c][0] for c in column.split("+")]
    assert None not in values, f"{column} is null ({expected['from']} -> {expected['to']})"
    assert abs(sum(values) - expected["value"]) < tick_us, (
        f"{column}: {sum(values)} µs, by hand {expected['value']} µs ({expected['from']} -> {expected['to']})")


def _analyze(args: list[str]) -> tuple[int, str]:
    """``envoy-dissect analyze ARGS`` in this interpreter (``main``, the entry point's only call): exit code and
    stderr. An exception that escapes ``main`` would be the traceback a user sees: it fails the test here."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["analyze", *args])
        except SystemExit as exc:  # (argparse)
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue()


@pytest.mark.parametrize("excerpt", _params("cli"))
def test_cli_every_output_without_traceback(excerpt: dict[str, Any], tmp_path: Path) -> None:
    outputs = [tmp_path / f"out{suffix}" for suffix in OUTPUT_SUFFIXES]
    args = [str(REAL / excerpt["file"]), "-q"]
    for out in outputs:
        args += ["-o", str(out)]
    code, stderr = _analyze(args)
    assert "Traceback" not in stderr, stderr[-2000:]
    assert code == excerpt["cli_exit"], stderr[-2000:]
    if code == 0:  # every output written; only the requests' .jsonl may be empty (no request)
        assert all(out.exists() for out in outputs)
        assert all(out.stat().st_size > 0 for out in outputs if out.suffix != ".jsonl")
    else:
        assert stderr.startswith("envoy-dissect: error:") or "envoy-dissect:" in stderr


def test_the_installed_entry_point_gives_an_excerpts_exit_code(tmp_path: Path) -> None:
    """``python -m envoy_dissector.cli`` once, on a rejected excerpt (the cases above call ``main`` in process)."""
    rejected = next(e for e in EXCERPTS if not e["accepted"])
    done = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "analyze", str(REAL / rejected["file"]), "-q",
                           "-o", str(tmp_path / "out.csv")], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == rejected["cli_exit"] != 0, done.stderr[-2000:]
    assert done.stderr.startswith("envoy-dissect: error:"), done.stderr


def test_manifest_lists_every_excerpt_once() -> None:
    files = sorted(p.name for p in REAL.iterdir() if p.name.endswith((".log", ".log.gz")))
    listed = [e["file"] for e in EXCERPTS]
    assert sorted(listed) == files
    assert len(set(listed)) == len(listed)
    for e in EXCERPTS:
        assert e["source"]["url"] and e["format"] in (None, "envoy", "istio", "istio-thread", "istio-json", "consul", "custom")
        assert e["level"] in ("trace", "debug", "info")
        assert e["accepted"] or e["expected_error"]
