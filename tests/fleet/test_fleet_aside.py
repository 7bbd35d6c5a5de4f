"""The fleet's merged diagnostics sum the lines set aside by kind (pilot-agent, access log, …) over its inputs, as
they sum every other count; ``envoy-dissect parse`` prints them (real Dask local cluster, real excerpts)."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from envoy_dissector.analysis import dissect

pytest.importorskip("distributed", reason='fleet mode needs the [fleet] extra (dask[distributed])')

from envoy_dissector.fleet.engine import run_fleet

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
WITH_LINES_ASIDE = [str(REAL / name) for name in (
    "082-lab-istio-kubectl-logs-pod-start-agent-and-pretty-json-access-log-v1.40-debug.log",
    "102-lab-istio-json-pod-start-json-pilot-agent-and-access-log-v1.40-trace.log")]


def test_merged_diagnostics_sum_the_lines_aside_by_kind(tmp_path: Path) -> None:
    summary = run_fleet(WITH_LINES_ASIDE, tmp_path / "dataset", workers=1)
    expected: Counter[str] = Counter()
    for source in WITH_LINES_ASIDE:
        expected.update(dissect(source).diagnostics_dict()["lines_aside_by_kind"])
    assert len(expected) >= 2
    assert summary["diagnostics"]["lines_aside_by_kind"] == dict(sorted(expected.items()))
    assert sum(expected.values()) == summary["diagnostics"]["lines_malformed"]


def test_parse_prints_the_lines_aside_by_kind() -> None:
    source = WITH_LINES_ASIDE[0]
    aside = dissect(source).diagnostics_dict()["lines_aside_by_kind"]
    done = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "parse", "-q", source],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("lines set aside by kind: "))
    assert line == "lines set aside by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(aside.items()))
