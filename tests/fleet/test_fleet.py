"""Fleet mode on a real Dask local cluster (worker processes) gives what one process gives.

Four or more inputs, one task each; the dataset read back equals the single-process requests, the merged
percentiles equal the single-process ones, and stitching across inputs (two sidecars of a real mesh run)
finds the same pairs and clock offset.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.stats import percentiles

pytest.importorskip("distributed", reason='fleet mode needs the [fleet] extra (dask[distributed])')

from envoy_dissector.fleet.engine import partition_dir, run_fleet

REPO = Path(__file__).resolve().parents[2]
INPUTS = [str(REPO / "fixtures" / p) for p in (
    "istio-thread/keepalive/envoy.log.gz", "istio/workers/envoy.log.gz", "envoy/keepalive/envoy.log.gz",
    "istio-json/workers/envoy.log.gz", "kubectl/multi-pod/interleaved.log.gz")]


def _dataset(out: Path, name: str = "requests") -> pl.DataFrame:
    return pl.scan_parquet(out / name / "**" / "*.parquet", hive_partitioning=True).collect()


@pytest.fixture(scope="module")
def fleet_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("fleet") / "dataset"
    summary = run_fleet(INPUTS, out, workers=2)
    return out, summary


def test_every_input_ran_as_a_task(fleet_out: tuple[Path, dict]) -> None:
    out, summary = fleet_out
    assert [i["source"] for i in summary["inputs"]] == INPUTS
    assert all(i["ok"] for i in summary["inputs"])
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary, default=str))


def test_dataset_equals_single_process(fleet_out: tuple[Path, dict]) -> None:
    out, _ = fleet_out
    single = dissect(INPUTS)
    ours = _dataset(out)
    expected = single.requests.select(single.contract_requests.columns)
    assert ours.height == expected.height
    cols = expected.columns
    assert ours.select(cols).sort("request_uid").equals(expected.sort("request_uid"))
    phases = _dataset(out, "phases").drop("origin")
    assert phases.sort("request_uid", "start_us", "phase", "detail").equals(
        single.phases.select(phases.columns).sort("request_uid", "start_us", "phase", "detail"))


def test_merged_percentiles_equal_single_process(fleet_out: tuple[Path, dict]) -> None:
    _, summary = fleet_out
    single = dissect(INPUTS)
    assert summary["phases"] == percentiles(single.requests)
    for key in ("lines_read", "records", "records_unknown", "requests", "requests_complete"):
        assert summary["diagnostics"][key] == single.diagnostics_dict()[key], key


def test_partitions_are_hive_origins(fleet_out: tuple[Path, dict]) -> None:
    out, _ = fleet_out
    names = {p.name for p in (out / "requests").iterdir()}
    assert partition_dir(INPUTS[0]) in names
    assert any(n.startswith("origin=productpage-v1") for n in names)  # kubectl --prefix: one per pod


def test_refuses_a_non_empty_output(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me")
    done = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "fleet", INPUTS[0], "-o", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 64 and "not empty" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(shutil.which("envoy") is None or shutil.which("openssl") is None, reason="needs envoy, openssl")
def test_stitching_across_inputs_matches_single_process(tmp_path: Path) -> None:
    from envoy_dissector.lab.mesh import run_mesh

    mesh = run_mesh(tmp_path / "mesh", requests=24)
    sides = [str(mesh / "a" / "envoy.log"), str(mesh / "b" / "envoy.log")]
    summary = run_fleet(sides, tmp_path / "dataset", workers=2)
    single = dissect(sides)
    assert summary["stitching"]["pairs"] == single.stitching.pairs >= 24 * 0.99
    assert summary["stitching"]["clock_offsets"][0]["offset_us"] == single.stitching.clock_offsets[0].offset_us
