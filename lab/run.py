"""Run one lab scenario end to end and write a capture directory.

A capture directory holds:

* ``envoy.log`` — Envoy's trace log in the chosen ``--log-format``;
* ``access.jsonl`` — Envoy's access log: per-request truth (``%COMMON_DURATION%`` µs);
* ``client.jsonl`` — what the load generator measured per request;
* ``upstream.jsonl`` — what the upstream saw and how long it took per request;
* ``meta.json`` — scenario, settings, log format, Envoy version and command line, counts, times;
* ``envoy.yaml`` — the bootstrap used (and ``envoy.stderr``: Envoy's last words after the log file closed).

All traffic is to 127.0.0.1, bounded in count and time, and stops by itself.
"""
from __future__ import annotations

import dataclasses
import json
import platform
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from envoy_dissector.lab.authz import AuthzServer
from envoy_dissector.lab.collector import ZipkinCollector
from envoy_dissector.lab.envoy import EnvoyConfig, EnvoyProcess, EnvoySettings, LabError, envoy_version, free_port
from envoy_dissector.lab.formats import DEFAULT_LOG_FORMAT, resolve_log_format
from envoy_dissector.lab.load import LoadResult, run_load
from envoy_dissector.lab.scenarios import Scenario, get_scenario
from envoy_dissector.lab.upstream import UpstreamServer
from envoy_dissector.lab.wasm_module import build_module

#: Envoy counters recorded in meta.json ``envoy_counters`` (Envoy's own view of wasm, tracing and TLS work).
_COUNTER_PREFIXES = ("wasmcustom.", "tracing.zipkin.", "cluster.", "listener.", "http.lab.downstream_rq_total")
_COUNTER_SUFFIXES = (".ssl.handshake", ".upstream_cx_total", ".upstream_rq_total", ".downstream_cx_total")


def kept_counter(name: str) -> bool:
    """The counters a capture's meta.json keeps (the rest of admin /stats is noise for the tests)."""
    if name.startswith(("cluster.", "listener.")):
        return name.endswith(_COUNTER_SUFFIXES) and "admin" not in name
    return True

#: Files every capture directory has.
CAPTURE_FILES = ("envoy.log", "access.jsonl", "client.jsonl", "upstream.jsonl", "meta.json")
_SETTLE_S = 0.3
_ZIPKIN_FLUSH_S = 5.5


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def run_scenario(name: str | Scenario, out_dir: Path | str, log_format: str = DEFAULT_LOG_FORMAT,
                 requests: int | None = None, *, concurrency: int | None = None, log_level: str | None = None,
                 startup_timeout_s: float = 20.0) -> Path:
    """Run scenario ``name`` against a fresh Envoy and write a capture into ``out_dir``.

    Args:
        name: a scenario name from :data:`~envoy_dissector.lab.scenarios.SCENARIOS`
            (or a :class:`Scenario`).
        out_dir: directory to create/overwrite the capture files in.
        log_format: a format name from :data:`~envoy_dissector.lab.formats.LOG_FORMATS`
            or a raw Envoy ``--log-format`` pattern.
        requests: total request count (spread over the scenario's connections); default: the scenario's.
        concurrency: override Envoy's ``--concurrency``.
        log_level: override Envoy's ``-l`` level (``debug`` gives a capture without socket lines).
        startup_timeout_s: how long to wait for Envoy's admin ``/ready``.

    Returns:
        ``out_dir`` as a :class:`Path`.

    Raises:
        UsageError: unknown scenario or log format.
        LabError: Envoy/upstream/load could not run.
    """
    scenario = name if isinstance(name, Scenario) else get_scenario(name)
    format_name, pattern = resolve_log_format(log_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for fname in (*CAPTURE_FILES, "envoy.yaml", "envoy.stderr", "authz.jsonl", "collector.jsonl"):
        (out / fname).unlink(missing_ok=True)
    envoy_settings = scenario.envoy
    if concurrency is not None:
        envoy_settings = dataclasses.replace(envoy_settings, concurrency=concurrency)
    if log_level is not None:
        envoy_settings = dataclasses.replace(envoy_settings, log_level=log_level)

    started = time.time()
    upstream_log = out / "upstream.jsonl"
    upstream = UpstreamServer(scenario.upstream, upstream_log)
    if envoy_settings.retries_to_closed_port:
        # Nothing listens on the cluster's port: every connect is refused.
        upstream_port = free_port()
    else:
        upstream.start()
        upstream_port = upstream.port
    wasm_module = build_module(out / "stats_burn.wasm") if envoy_settings.wasm_stats_us is not None else None
    collector = ZipkinCollector(out / "collector.jsonl") if envoy_settings.zipkin_tracing else None
    if collector is not None:
        collector.start()
    authz = (AuthzServer(out / "authz.jsonl", delay_ms=envoy_settings.ext_authz_delay_ms)
             if envoy_settings.ext_authz_delay_ms is not None else None)
    if authz is not None:
        authz.start()
    config = EnvoyConfig(settings=envoy_settings, upstream_port=upstream_port, listener_port=free_port(),
                         log_format=pattern, work_dir=out, wasm_module=wasm_module,
                         collector_port=collector.port if collector is not None else None,
                         authz_port=authz.port if authz is not None else None)
    envoy = EnvoyProcess(config, startup_timeout_s=startup_timeout_s)
    counters: dict[str, int] = {}
    try:
        envoy.start()
        ready = time.time()
        load = run_load(envoy.listener_port, scenario.load, out / "client.jsonl", total_requests=requests)
        time.sleep(_SETTLE_S)  # let Envoy log the client closes before it stops
        if envoy_settings.zipkin_tracing:
            time.sleep(_ZIPKIN_FLUSH_S)  # the tracer flushes a partial batch on its timer
        counters = envoy.counters(*_COUNTER_PREFIXES)
    finally:
        exit_code = envoy.stop()
        if collector is not None:
            collector.stop()
        if authz is not None:
            authz.stop()
        if envoy_settings.retries_to_closed_port:
            upstream_log.touch()
        else:
            upstream.stop()
        (out / "admin-address.txt").unlink(missing_ok=True)
    finished = time.time()
    if envoy.killed:
        raise LabError(f"Envoy did not stop within {envoy.stop_timeout_s:.0f} s of SIGTERM and was killed")

    return finish_capture(out, scenario, envoy_settings=envoy_settings, requests=requests,
                          log_format=(format_name, pattern), envoy=envoy, exit_code=exit_code,
                          upstream_port=upstream_port, load=load, times=(started, ready, finished),
                          counters=counters,
                          collector=({"flushes": collector.flushes, "spans": collector.spans}
                                     if collector is not None else None),
                          authz={"checks": authz.checks} if authz is not None else None)


def finish_capture(out: Path, scenario: Scenario, *, envoy_settings: EnvoySettings, requests: int | None,
                   log_format: tuple[str, str], envoy: EnvoyProcess, exit_code: int, upstream_port: int,
                   load: LoadResult, times: tuple[float, float, float], counters: dict[str, int],
                   collector: dict[str, int] | None = None, authz: dict[str, int] | None = None) -> Path:
    """Check a finished run against its client's view and write ``meta.json`` into ``out``."""
    format_name, pattern = log_format
    started, ready, finished = times
    upstream_log = out / "upstream.jsonl"
    log_path = out / "envoy.log"
    access_rows = [json.loads(line) for line in (out / "access.jsonl").read_text().splitlines() if line]
    status_counts = Counter(str(r.get("status")) for r in access_rows)
    warnings: list[str] = []
    client_ids = {r.x_request_id for r in load.records}
    access_ids = {r.get("x_request_id") for r in access_rows}
    if client_ids != access_ids:
        warnings.append(f"{len(client_ids ^ access_ids)} x-request-ids differ between client.jsonl and access.jsonl")
    if load.errors:
        warnings.append(f"{load.errors} client requests failed")
    unexpected = sum(n for s, n in status_counts.items() if s != str(scenario.expect_status))
    if unexpected:
        warnings.append(f"{unexpected} responses without the expected status {scenario.expect_status}")
    if load.hit_wall_limit:
        warnings.append("load stopped at its wall-time limit")
    log_bytes = log_path.stat().st_size if log_path.exists() else 0
    meta = {
        "scenario": scenario.name,
        "description": scenario.description,
        "baseline": scenario.baseline,
        "settings": {
            "envoy": dataclasses.asdict(envoy_settings),
            "load": dataclasses.asdict(scenario.load),
            "upstream": dataclasses.asdict(scenario.upstream),
            "requests_override": requests,
        },
        "log_format": {"name": format_name, "pattern": pattern},
        "envoy": {
            "version": envoy_version(envoy.binary),
            "command": envoy.command,
            "exit_code": exit_code,
            "start_attempts": envoy.start_attempts,
            "admin_requests": envoy.admin_requests,
            "listener_port": envoy.listener_port,
            "admin_port": envoy.admin_port,
            "upstream_port": upstream_port,
            "env": {"TZ": "UTC"},
        },
        "counts": {
            "client_requests": load.requests,
            "client_errors": load.errors,
            "access_log_lines": len(access_rows),
            "upstream_requests": _count_lines(upstream_log),
            "envoy_log_lines": _count_lines(log_path),
            "envoy_log_bytes": log_bytes,
            "envoy_log_bytes_per_request": round(log_bytes / load.requests) if load.requests else None,
            "status": dict(sorted(status_counts.items())),
        },
        "timing": {
            "started_utc": _utc(started),
            "envoy_ready_utc": _utc(ready),
            "finished_utc": _utc(finished),
            "load_wall_s": round(load.wall_s, 4),
            "client_rps": round(load.rps, 1),
        },
        "envoy_counters": {k: v for k, v in sorted(counters.items()) if kept_counter(k)},
        "collector": collector,
        "authz": authz,
        "warnings": warnings,
        "host": {"python": sys.version.split()[0], "platform": platform.platform()},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out
