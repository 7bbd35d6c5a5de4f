"""Fleet mode: dissect many captures as independent Dask tasks, write one dataset, merge the statistics.

Why Dask (``dask.distributed``): pure Python wheels from PyPI, a ``LocalCluster`` of worker processes on
one machine by default and the same code against a remote scheduler (``--scheduler tls://host:8786``); a
dissection is a plain function of one input, so tasks are independent and nothing is shuffled. Ray would
serve too but brings a much larger runtime (its own object store and raylet processes) for no gain here.

Layout written to ``OUT``::

    OUT/requests/origin=<origin>/part-<n>.parquet  contract columns of every request (hive partitions; the
                                                   origin percent-encoded, as polars/pyarrow/Spark decode it)
    OUT/phases/origin=<origin>/part-<n>.parquet    the long phases frame (request_uid, phase, detail, ...)
    OUT/summary.json                           merged: inputs, diagnostics summed, exact percentiles over all
                                               counted requests, per-input findings, stitching across inputs

Percentiles are exact: the merge reads the phase columns of the written dataset back (one row per request,
a few MB per million requests) and applies the same definition as every other output
(:func:`envoy_dissector.analysis.stats.percentiles`). Stitching across pods (x-request-id) is a second stage
on the merged requests, not a per-task job: a call's two halves are in different inputs.
"""
from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from envoy_dissector.analysis.capture import dissect
from envoy_dissector.analysis.stages.stitch import stitch
from envoy_dissector.analysis.stats import SUMMARY_COLUMNS, percentiles
from envoy_dissector.parser.errors import DissectorError, ExitCode, UsageError

if TYPE_CHECKING:
    from distributed.security import Security

#: Columns the merge reads back (percentiles and stitching need only these).
_MERGE_COLUMNS = ("request_uid", "origin", "x_request_id", "complete", "internal", "ds_rx_beg_us", "ds_tx_end_us",
                  "us_tx_beg_us", "us_rx_beg_us", *SUMMARY_COLUMNS)


@dataclass(frozen=True)
class TaskResult:
    """What one dissection task sends back to the client (small: no frames)."""

    source: str
    key: str
    ok: bool
    error: str = ""
    requests: int = 0
    format: str = ""
    diagnostics: dict[str, Any] | None = None
    findings: tuple[dict[str, str], ...] = ()


def partition_key(index: int, source: str) -> str:
    """A hive-safe partition value for input number ``index`` (``0003-proxy.log``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(source).name)[:80] or "input"
    return f"{index:04d}-{name}"


def partition_dir(origin: str) -> str:
    """``origin=<percent-encoded origin>``; an origin too long for a file name keeps its tail and a hash."""
    quoted = urllib.parse.quote(origin, safe="")
    if len(quoted) > 200:
        digest = hashlib.sha256(origin.encode()).hexdigest()[:12]
        quoted = urllib.parse.quote(origin[-120:], safe="") + "~" + digest
    return f"origin={quoted}"


def dissect_to_dataset(source: str, key: str, out: str, options: dict[str, Any]) -> TaskResult:
    """One task: dissect ``source`` and write its partitions under ``out``. Runs in a worker process.

    One input may hold several origins (``kubectl --prefix`` of several pods, Envoy restarts): each gets its
    partition; the file name carries the input's key, so inputs never overwrite each other.
    """
    try:
        cap = dissect(source, format=options.get("format", "auto"), log_format=options.get("log_format"),
                      redact=options.get("redact", True))
    except DissectorError as exc:
        return TaskResult(source, key, ok=False, error=str(exc))
    requests = cap.requests.select(cap.contract_requests.columns)
    phases = cap.phases.join(requests.select("request_uid", "origin"), on="request_uid", how="inner")
    for name, frame in (("requests", requests), ("phases", phases)):
        for (origin,), part_frame in frame.group_by("origin"):
            part = Path(out) / name / partition_dir(str(origin))
            part.mkdir(parents=True, exist_ok=True)
            part_frame.drop("origin").write_parquet(part / f"part-{key}.parquet")
    return TaskResult(source, key, ok=True, requests=cap.requests.height, format=cap.format,
                      diagnostics=cap.diagnostics_dict(), findings=tuple(f.as_dict() for f in cap.findings()))


#: Diagnostics' counts per kind, summed kind by kind over the captures.
_COUNTS_BY_KIND = ("events_by_kind", "lines_aside_by_kind")


def _sum_diagnostics(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {key: {} for key in _COUNTS_BY_KIND}
    for d in parts:
        for k, v in d.items():
            if isinstance(v, bool) or not isinstance(v, int):
                continue
            total[k] = total.get(k, 0) + v
        for key in _COUNTS_BY_KIND:
            for kind, n in d.get(key, {}).items():
                total[key][kind] = total[key].get(kind, 0) + n
    for key in _COUNTS_BY_KIND:
        total[key] = dict(sorted(total[key].items()))
    return total


def merge(out: Path, results: Sequence[TaskResult]) -> dict[str, Any]:
    """Merged summary of a written dataset (see the module docstring); also written to ``out/summary.json``."""
    done = [r for r in results if r.ok]
    summary: dict[str, Any] = {
        "inputs": [{"source": r.source, "origin_key": r.key, "ok": r.ok, "format": r.format, "requests": r.requests,
                    **({"error": r.error} if r.error else {})} for r in results],
        "diagnostics": _sum_diagnostics([r.diagnostics for r in done if r.diagnostics]),
        "findings": [{"origin_key": r.key, **f} for r in done for f in r.findings],
    }
    if done:
        frame = pl.scan_parquet(out / "requests" / "**" / "*.parquet", hive_partitioning=True).select(
            *_MERGE_COLUMNS).collect()
        summary["phases"] = percentiles(frame)
        _, stitching = stitch(frame)
        summary["stitching"] = stitching.as_dict()
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    return summary


class SchedulerUnreachable(DissectorError):
    """The Dask scheduler cannot be reached or refuses this client (exit 69, sysexits EX_UNAVAILABLE)."""

    exit_code = ExitCode.SCHEDULER_UNREACHABLE


def _connect(client_class: Any, cluster: Any, scheduler: str | None, security: Security | None) -> Any:
    """A Dask client of the local cluster, or of ``scheduler``; a refused or failed connection is one line."""
    if cluster is not None:
        return client_class(cluster)
    try:
        return client_class(scheduler, security=security)
    except (OSError, TimeoutError) as exc:
        raise SchedulerUnreachable(f"fleet: cannot use the Dask scheduler at {scheduler}: {exc}") from None


def run_fleet(sources: Sequence[str], out: Path | str, *, scheduler: str | None = None,
              security: Security | None = None, workers: int | None = None, dashboard_port: int | None = None,
              options: dict[str, Any] | None = None,
              progress: Callable[[TaskResult], None] | None = None) -> dict[str, Any]:
    """Dissect every source as its own task on Dask, write the dataset under ``out``, return the merged summary.

    ``scheduler``: address of a running Dask scheduler, reached with ``security``
    (:func:`~envoy_dissector.fleet.cluster.remote_security` builds it); default a local cluster of
    ``workers`` processes (one thread each, default: the machine's cores) on 127.0.0.1 with mutual TLS and no
    HTTP endpoint (:func:`~envoy_dissector.fleet.cluster.local_cluster`; ``dashboard_port`` adds Dask's).

    Raises:
        UsageError: the ``fleet`` extra is missing, no inputs, or ``out`` is not an empty/new directory.
    """
    try:
        from distributed import Client, as_completed

        from envoy_dissector.fleet.cluster import local_cluster
    except ImportError:
        raise UsageError('fleet mode needs Dask: pip install "envoy-dissector[fleet]"') from None
    if not sources:
        raise UsageError("fleet: no inputs")
    target = Path(out)
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"fleet: {target} exists and is not empty (the dataset is written fresh)")
    target.mkdir(parents=True, exist_ok=True)
    opts = dict(options or {})
    keys = [partition_key(i, s) for i, s in enumerate(sources)]
    cluster = None
    if scheduler is None:
        cluster = local_cluster(workers, dashboard_port=dashboard_port)
    results: list[TaskResult] = []
    try:
        with _connect(Client, cluster, scheduler, security) as client:
            dataset = str(target.resolve())
            futures = [client.submit(dissect_to_dataset, s, k, dataset, opts, key=f"dissect-{k}", pure=False)
                       for s, k in zip(sources, keys, strict=True)]
            for future in as_completed(futures):
                result: TaskResult = future.result()
                results.append(result)
                if progress is not None:
                    progress(result)
    finally:
        if cluster is not None:
            cluster.close()
    order = {k: i for i, k in enumerate(keys)}
    return merge(target, sorted(results, key=lambda r: order[r.key]))
