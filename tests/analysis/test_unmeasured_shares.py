"""``wasm_us`` and ``tracing_us`` are null where they cannot be measured (docs/output.md, the null rule): a debug-level
capture logs no filter callbacks (``... headers called``) and no VM calls, so a 0 there would claim a measurement.
The same lab scenario at trace level measures them (0 when no filter took time). Every file export, streamed and
whole."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
DEBUG = FIXTURES / "debug-level" / "istio-thread" / "keepalive" / "envoy.log.gz"
TRACE = FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"
SHARES = ["wasm_us", "tracing_us"]


def _exports(source: Path, tmp_path: Path, *mode: str) -> dict[str, pl.DataFrame]:
    outs = {s: tmp_path / f"requests{s}" for s in (".csv", ".jsonl", ".parquet")}
    args = [sys.executable, "-m", "envoy_dissector.cli", "analyze", str(source), "-q", *mode]
    for out in outs.values():
        args += ["-o", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return {".csv": pl.read_csv(outs[".csv"], infer_schema_length=None), ".parquet": pl.read_parquet(outs[".parquet"]),
            ".jsonl": pl.DataFrame([json.loads(x) for x in outs[".jsonl"].read_text().splitlines()],
                                   infer_schema_length=None)}


@pytest.mark.parametrize("mode", [[], ["--keep-events"]], ids=["streamed", "whole"])
def test_debug_level_shares_are_null_in_every_export(tmp_path: Path, mode: list[str]) -> None:
    for suffix, frame in _exports(DEBUG, tmp_path, *mode).items():
        assert frame.height > 0, suffix
        assert frame.select(pl.col(SHARES).is_null().all()).row(0) == (True, True), suffix


def test_trace_level_measures_them() -> None:
    requests = dissect(str(TRACE)).requests.filter(~pl.col("internal"))
    assert requests.height > 0
    assert requests.select(pl.col(SHARES).is_not_null().all()).row(0) == (True, True)


def test_the_report_does_not_call_them_zero() -> None:
    said = " ".join(dissect(str(DEBUG)).quality().statements)
    assert "wasm_us, tracing_us left empty" in said and "are 0" not in said
