"""`envoy-dissect parse` (cli/parse.py): accounting on stdout, event exports, exit codes."""
from __future__ import annotations

import json
import shutil
import subprocess

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.cli.main import main
from envoy_dissector.parser.schema import EVENT_COLUMNS


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["parse", "-q", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_line_accounting(capsys, fixture_by_rel, parsed_fixture):
    fx = fixture_by_rel("envoy/workers/envoy.log.gz")
    d = parsed_fixture(fx).diagnostics
    code, out, err = run_cli(capsys, str(fx.path))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("format: envoy (")
    assert f"lines read {d.lines_read}: in records {d.lines_in_records}, malformed {d.lines_malformed}" in lines
    assert any(line.startswith(f"records {d.records}: unknown {d.records_unknown} (") for line in lines)
    assert any(line.startswith("warning: timestamps have millisecond resolution") for line in lines)


def test_json_diagnostics(capsys, fixture_by_rel, parsed_fixture):
    fx = fixture_by_rel("kubectl/multi-pod/interleaved.log.gz")
    code, out, _ = run_cli(capsys, str(fx.path), "--json")
    assert code == 0
    got = json.loads(out)
    want = json.loads(json.dumps(parsed_fixture(fx).diagnostics.as_dict()))
    path_stats = ("shapes", "grammar_calls", "fallback_lines")  # depend on fast/slow path (ENVOY_DISSECTOR_FAST)
    assert {k: v for k, v in got.items() if k not in path_stats} == {k: v for k, v in want.items()
                                                                   if k not in path_stats}
    assert got["wrappers"] == ["kubectl-prefix", "kubectl-timestamps"]
    assert got["lines_read"] == got["lines_in_records"] + got["lines_malformed"]


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_writes_events(capsys, tmp_path, fixture_by_rel, parsed_fixture, suffix):
    fx = fixture_by_rel("istio-thread/retries-503/envoy.log.gz")
    out_path = tmp_path / f"events{suffix}"
    code, _, _ = run_cli(capsys, str(fx.path), "-o", str(out_path))
    assert code == 0 and out_path.exists()
    want = parsed_fixture(fx).events
    if suffix == ".parquet":
        got = pl.read_parquet(out_path)
        assert got.columns == list(EVENT_COLUMNS)
        assert_frame_equal(got, want)
    elif suffix == ".csv":
        got = pl.read_csv(out_path, infer_schema_length=0)
        assert got.columns == list(EVENT_COLUMNS) and got.height == want.height
        assert got["kind"].to_list() == want["kind"].cast(str).to_list()
    else:
        got = pl.read_ndjson(out_path, infer_schema_length=None)
        assert sorted(got.columns) == sorted(EVENT_COLUMNS) and got.height == want.height
        assert got["stream_id"].cast(pl.UInt64).to_list() == want["stream_id"].to_list()


def test_custom_log_format_and_no_redact(capsys, tmp_path, fixture_by_rel):
    fx = fixture_by_rel("custom/keepalive/envoy.log.gz")
    out_path = tmp_path / "e.parquet"
    code, out, _ = run_cli(capsys, str(fx.path), "--log-format", fx.log_format, "--no-redact", "-o", str(out_path))
    assert code == 0 and out.startswith("format: custom (custom --log-format")
    assert "malformed 0" in out
    assert pl.read_parquet(out_path)["thread"].null_count() == 0


def test_bad_output_suffix_is_a_usage_error(capsys, tmp_path, fixture_by_rel):
    target = tmp_path / "events.xlsx"
    code, out, err = run_cli(capsys, str(fixture_by_rel("istio/keepalive/envoy.log.gz").path), "-o", str(target))
    assert code == 64
    assert err.strip() == f"envoy-dissect: error: -o {target}: use one of .parquet, .csv, .jsonl"
    assert out == "" and not target.exists()


def test_not_an_envoy_log(capsys, tmp_path):
    path = tmp_path / "app.log"
    path.write_text("INFO starting app\nINFO listening on :8080\n")
    code, _, err = run_cli(capsys, str(path))
    assert code == 3
    assert err.startswith(f"envoy-dissect: error: {path}:1: not an Envoy / istio-proxy log")
    assert len(err.strip().splitlines()) == 1


def test_console_script(tmp_path, fixture_by_rel):
    exe = shutil.which("envoy-dissect")
    if exe is None:
        pytest.skip("package not installed with its console script (pip install -e .)")
    fx = fixture_by_rel("istio-thread/fault-delay/envoy.log.gz")
    out_path = tmp_path / "e.parquet"
    run = subprocess.run([exe, "parse", str(fx.path), "-o", str(out_path)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "format: istio-thread" in run.stdout
    assert pl.read_parquet(out_path).height == int(run.stdout.split("\nrecords ")[1].split(":")[0])
