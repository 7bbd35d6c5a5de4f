"""What `envoy-dissect fleet` prints on stderr: our progress, not Dask's chatter or its shutdown races.

A real local cluster through the real command line. By default Dask's scheduler, nannies and workers log only
warnings and errors (every node's start and stop at INFO were tens of lines per run); ``--dask-log-level info``
brings them back. A heartbeat in flight when the cluster closes can find the scheduler's stream already shut,
which Dask logs with a traceback: each worker drops that record once it is closing, and only then.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason='fleet mode needs the [fleet] extra (dask[distributed])')
pytest.importorskip("cryptography", reason='fleet mode needs the [fleet] extra (cryptography)')

from distributed import Client
from distributed.core import Status

from envoy_dissector.fleet.cluster import ClosingHeartbeatFilter, local_cluster

REPO = Path(__file__).resolve().parents[2]
INPUT = str(REPO / "fixtures" / "envoy" / "keepalive" / "envoy.log.gz")


def _fleet(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_LOGGING")}
    return subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "fleet", INPUT, "-o", str(out),
                           "--workers", "1", *args], capture_output=True, text=True, check=False, timeout=300,
                          env=env)


def test_quiet_run_prints_only_where_it_wrote(tmp_path: Path) -> None:
    done = _fleet(tmp_path / "out", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"wrote {tmp_path}/out/requests, {tmp_path}/out/phases (hive partitions "
                                        f"origin=...) and {tmp_path}/out/summary.json"]


def test_default_run_prints_progress_and_no_dask_info(tmp_path: Path) -> None:
    done = _fleet(tmp_path / "out")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("[1/1] ") and "requests" in lines[0], done.stderr
    assert not [line for line in lines if " - INFO - " in line], done.stderr


def test_dask_info_on_request(tmp_path: Path) -> None:
    done = _fleet(tmp_path / "out", "-q", "--dask-log-level", "info")
    assert done.returncode == 0, done.stderr
    assert "distributed.scheduler - INFO" in done.stderr  # the parent's scheduler
    assert "distributed.worker - INFO" in done.stderr  # and the worker's own process


def test_a_user_set_level_wins(tmp_path: Path) -> None:
    env = {**os.environ, "DASK_LOGGING__DISTRIBUTED": "info"}
    done = subprocess.run([sys.executable, "-m", "envoy_dissector.cli", "fleet", INPUT, "-o", str(tmp_path / "o"),
                           "--workers", "1", "-q"], capture_output=True, text=True, check=False, timeout=300,
                          env=env)
    assert done.returncode == 0 and "distributed.scheduler - INFO" in done.stderr, done.stderr


class _Node:
    """Anything with a Dask status (the filter holds it weakly, as it holds its worker)."""

    def __init__(self, status: Status) -> None:
        self.status = status


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, message, None, None)


@pytest.mark.parametrize("status", [Status.closing, Status.closed, Status.closing_gracefully])
def test_heartbeat_failures_are_dropped_once_closing(status: Status) -> None:
    node = _Node(status)
    keep = ClosingHeartbeatFilter(node)  # type: ignore[arg-type]
    assert not keep.filter(_record("Failed to communicate with scheduler during heartbeat."))
    assert not keep.filter(_record("Heartbeat to scheduler failed"))
    assert keep.filter(_record("Compute Failed"))


@pytest.mark.parametrize("status", [Status.running, Status.paused, Status.init])
def test_heartbeat_failures_are_kept_while_running(status: Status) -> None:
    keep = ClosingHeartbeatFilter(_Node(status))  # type: ignore[arg-type]
    assert keep.filter(_record("Failed to communicate with scheduler during heartbeat."))


def test_a_gone_worker_drops_nothing() -> None:
    node = _Node(Status.closed)
    keep = ClosingHeartbeatFilter(node)  # type: ignore[arg-type]
    del node
    assert keep.filter(_record("Failed to communicate with scheduler during heartbeat."))


def _worker_filters() -> list[str]:
    return [type(f).__name__ for f in logging.getLogger("distributed.worker").filters]


def test_each_worker_process_has_the_filter() -> None:
    made = local_cluster(1)
    try:
        with Client(made) as client:
            client.wait_for_workers(1)
            assert "ClosingHeartbeatFilter" in client.submit(_worker_filters, pure=False).result()
    finally:
        made.close()
