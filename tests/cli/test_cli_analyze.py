"""`envoy-dissect analyze`: report, stdin, kubectl multi-pod input, filters, exports, errors."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis.schema import CONTRACT_COLUMNS
from envoy_dissector.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "fixtures/istio-thread/lua-cpu/envoy.log.gz"
MULTI = ROOT / "fixtures/kubectl/multi-pod"


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envoy_dissector.cli.main", *args], input=stdin,
                          capture_output=True, cwd=ROOT, timeout=120,
                          text=stdin is None)  # type: ignore[call-overload]


def test_report_names_the_saturated_worker_and_the_lua_filter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(LUA), "--quiet"]) == 0
    out = capsys.readouterr().out
    access = pl.read_ndjson(LUA.parent / "access.jsonl")
    assert f"{access.height} requests ({access.height} complete" in out
    assert "saturated" in out and "envoy.filters.http.lua" in out
    for phase in ("downstream_read", "header_parse", "filter_chain", "upstream_wait", "total", "loop_queue"):
        assert phase in out


def test_stdin_gives_the_same_requests_as_the_file(tmp_path: Path) -> None:
    raw = gzip.decompress(LUA.read_bytes())
    proc = subprocess.run([sys.executable, "-m", "envoy_dissector.cli.main", "analyze", "-", "-o",
                           str(tmp_path / "stdin.parquet"), "--quiet"], input=raw, capture_output=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert main(["analyze", str(LUA), "-o", str(tmp_path / "file.parquet"), "--quiet"]) == 0
    a = pl.read_parquet(tmp_path / "stdin.parquet").drop("request_uid", "origin")
    b = pl.read_parquet(tmp_path / "file.parquet").drop("request_uid", "origin")
    assert a.equals(b)


@pytest.mark.parametrize("name", ["sequential.log.gz", "interleaved.log.gz"])
def test_kubectl_multi_pod_keeps_pods_apart(tmp_path: Path, name: str) -> None:
    out = tmp_path / "r.jsonl"
    assert main(["analyze", str(MULTI / name), "-o", str(out), "--quiet"]) == 0
    requests = pl.read_ndjson(out)
    origins = requests["origin"].unique().to_list()
    assert len(origins) == 2 and all("/" in o for o in origins)
    truth = pl.concat([pl.read_ndjson(p) for p in sorted(MULTI.glob("*/access.jsonl"))]) if list(
        MULTI.glob("*/access.jsonl")) else None
    client = requests.filter(~pl.col("internal"))
    if truth is not None:
        matched = truth.join(client, on="x_request_id", how="inner")
        assert matched.height >= 0.99 * truth.height
    # Each pod's requests carry only that pod's connections: no request mixes origins.
    assert client.group_by("request_uid").agg(pl.col("origin").n_unique())["origin"].max() == 1


def test_exports_every_format(tmp_path: Path) -> None:
    outs = [tmp_path / n for n in ("r.parquet", "r.csv", "r.jsonl", "s.json", "t.trace.json")]
    assert main(["analyze", str(LUA), "--quiet", *[x for o in outs for x in ("-o", str(o))]]) == 0
    parquet = pl.read_parquet(outs[0])
    assert tuple(parquet.columns) == CONTRACT_COLUMNS
    assert pl.read_csv(outs[1], infer_schema=False).height == parquet.height == pl.read_ndjson(outs[2]).height
    summary = json.loads(outs[3].read_text())
    assert summary["format"] == "istio-thread"
    d = summary["diagnostics"]
    assert d["lines_read"] == d["lines_in_records"] + d["lines_malformed"]
    assert set(summary["phases"]["total"]) == {"p50", "p90", "p99", "max"}
    assert summary["workers"] and 0 <= summary["workers"][0]["utilisation"] <= 1
    assert {f["severity"] for f in summary["findings"]} <= {"info", "warning", "critical"}
    assert json.loads(outs[4].read_text())["traceEvents"]


def test_filters_restrict_report_and_outputs(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    assert main(["analyze", str(ROOT / "fixtures/istio-thread/retries-503/envoy.log.gz"), "--status", "5xx", "-o",
                 str(out), "--quiet"]) == 0
    r = pl.read_parquet(out)
    assert r.height > 0 and (r["status"] >= 500).all()
    assert main(["analyze", str(ROOT / "fixtures/istio-thread/retries-503/envoy.log.gz"), "--status", "200", "-o",
                 str(out), "--quiet"]) == 0
    assert pl.read_parquet(out).filter(~pl.col("internal")).height == 0
    assert main(["analyze", str(LUA), "--since", "+0s", "--until", "+0.01s", "-o", str(out), "--quiet"]) == 0
    window = pl.read_parquet(out)
    full = pl.read_ndjson(LUA.parent / "access.jsonl")
    assert 0 < window.height < full.height


@pytest.mark.parametrize(("args", "code", "text"), [
    (["analyze", "/no/such/file.log"], 2, "no such file"),
    (["analyze", "README.md"], 3, "not an Envoy"),
    (["analyze", str(LUA), "-o", "out.xlsx"], 64, "unknown output type"),
    (["analyze", str(LUA), "--status", "teapot"], 64, "--status"),
    (["analyze", str(LUA), "-o", "/proc/no-such-dir/summary.json"], 73, "cannot write"),
])
def test_errors_are_one_line_with_exit_codes(args: list[str], code: int, text: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == code
    assert text in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "text"), [
    (["analyze", str(LUA), "--top", "-5"], "negative"),
    (["analyze", str(LUA), "--top", "many"], "whole number"),
    (["analyze", str(LUA), "--no-such-option"], "unrecognized arguments"),
    (["no-such-command"], "invalid choice"),
    ([], "required"),
])
def test_usage_errors_exit_64_as_documented(args: list[str], text: str) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 64, proc.stderr
    assert text in proc.stderr and "Traceback" not in proc.stderr
    doc = (ROOT / "docs/output.md").read_text()
    assert re.search(r"^\| 64 \| bad usage", doc, re.M)


def test_version() -> None:
    proc = run_cli("--version")
    assert proc.returncode == 0 and re.fullmatch(r"envoy-dissect \S+\ncompiled parser: (on|off \(.+\))\n", proc.stdout), (
        proc.stdout)


def test_a_filter_that_matches_nothing_says_so() -> None:
    proc = run_cli("analyze", str(LUA), "-q", "--status", "5xx")
    assert proc.returncode == 0
    assert "no request matches the filters (--status 5xx)" in proc.stdout


def test_top_zero_lists_no_request() -> None:
    proc = run_cli("analyze", str(LUA), "-q", "--top", "0")
    assert proc.returncode == 0 and "slowest" not in proc.stdout
