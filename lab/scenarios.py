"""Named lab scenarios: Envoy settings + load shape + upstream behaviour.

Request counts are small on purpose: Envoy writes ~15 KB of trace log per
request, and the committed fixtures must stay small. ``run_scenario(...,
requests=N)`` overrides the total.

>>> get_scenario("keepalive").name, "http2" in SCENARIOS
('keepalive', True)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from envoy_dissector.lab.envoy import EnvoySettings
from envoy_dissector.lab.load import LoadSettings
from envoy_dissector.lab.upstream import UpstreamSettings
from envoy_dissector.parser.errors import UsageError


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One reproducible experiment."""

    name: str
    description: str
    envoy: EnvoySettings = field(default_factory=EnvoySettings)
    load: LoadSettings = field(default_factory=LoadSettings)
    upstream: UpstreamSettings = field(default_factory=UpstreamSettings)
    baseline: str | None = None
    """Name of the unloaded scenario to compare with (same Envoy config, one connection)."""
    expect_status: int = 200
    """Status every request should get."""


_LUA_CPU_MS: Final = 1.0
_WASM_BURN_US: Final = (300, 200)
_AUTHZ_DELAY_MS: Final = 1.0
_HEALTH_CHECK_INTERVAL_MS: Final = 5

_ALL: Final = (
    Scenario(
        name="keepalive",
        description="1 client connection, HTTP/1.1 keep-alive, 50 sequential requests; 1 worker.",
        load=LoadSettings(connections=1, requests_per_connection=50),
    ),
    Scenario(
        name="workers",
        description="2 workers, 16 concurrent keep-alive connections × 4 requests.",
        envoy=EnvoySettings(concurrency=2),
        load=LoadSettings(connections=16, requests_per_connection=4),
    ),
    Scenario(
        name="new-upstream-conn",
        description="Cluster max_requests_per_connection: 1 — every request opens a new upstream connection.",
        envoy=EnvoySettings(max_requests_per_connection=1),
        load=LoadSettings(connections=1, requests_per_connection=30),
    ),
    Scenario(
        name="http2",
        description="HTTP/2 cleartext (prior knowledge) downstream, 2 connections × 20 requests, "
                    "up to 5 streams in flight per connection; upstream HTTP/1.1.",
        load=LoadSettings(connections=2, requests_per_connection=20, http2=True, streams=5),
    ),
    Scenario(
        name="large-body",
        description="500 KiB response bodies (many read/write and encode data lines), 1 connection × 10.",
        load=LoadSettings(connections=1, requests_per_connection=10),
        upstream=UpstreamSettings(body_bytes=500 * 1024),
    ),
    Scenario(
        name="upstream-delay",
        description="Upstream sleeps 5 ms before answering; 1 connection × 30.",
        load=LoadSettings(connections=1, requests_per_connection=30),
        upstream=UpstreamSettings(delay_ms=5.0),
    ),
    Scenario(
        name="retries-503",
        description="Cluster points at a closed 127.0.0.1 port; retry_on connect-failure,reset, "
                    "num_retries 2 → 3 attempts then 503 (UF,URX); 1 connection × 10.",
        envoy=EnvoySettings(retries_to_closed_port=True),
        load=LoadSettings(connections=1, requests_per_connection=10),
        expect_status=503,
    ),
    Scenario(
        name="lua-cpu",
        description=f"Lua filter burns {_LUA_CPU_MS:g} ms CPU per request on 1 worker (--concurrency 1), "
                    "8 concurrent connections × 5: requests queue on the event loop. "
                    "Compare with lua-cpu-baseline.",
        envoy=EnvoySettings(concurrency=1, lua_cpu_ms=_LUA_CPU_MS),
        load=LoadSettings(connections=8, requests_per_connection=5),
        baseline="lua-cpu-baseline",
    ),
    Scenario(
        name="lua-cpu-baseline",
        description=f"Unloaded baseline for lua-cpu: same Lua filter ({_LUA_CPU_MS:g} ms CPU), 1 worker, "
                    "1 connection × 20 sequential requests (no queueing).",
        envoy=EnvoySettings(concurrency=1, lua_cpu_ms=_LUA_CPU_MS),
        load=LoadSettings(connections=1, requests_per_connection=20),
    ),
    Scenario(
        name="fault-delay",
        description="Fault filter delays every request 2 ms (Envoy's timer: not exact); 1 connection × 20.",
        envoy=EnvoySettings(fault_delay_ms=2.0),
        load=LoadSettings(connections=1, requests_per_connection=20),
    ),
    Scenario(
        name="wasm-stats",
        description=f"A proxy-wasm filter shaped like Istio's stats filter (root id stats_inbound, V8 runtime) burns "
                    f"{_WASM_BURN_US[0]} µs in proxy_on_request_headers and {_WASM_BURN_US[1]} µs in proxy_on_log "
                    "per request and measures itself; 1 worker, 2 connections × 20.",
        envoy=EnvoySettings(wasm_stats_us=_WASM_BURN_US),
        load=LoadSettings(connections=2, requests_per_connection=20),
    ),
    Scenario(
        name="tracing-zipkin",
        description="Zipkin tracing at 100% sampling to a local collector (POST /api/v2/spans, 202): the tracer "
                    "flushes span batches as internal requests; 1 worker, 2 connections × 25. "
                    "Compare with tracing-off.",
        envoy=EnvoySettings(zipkin_tracing=True),
        load=LoadSettings(connections=2, requests_per_connection=25),
        baseline="tracing-off",
    ),
    Scenario(
        name="ext-authz",
        description=f"The ext_authz filter asks a local authorization server (http_service, cluster ext_authz) "
                    f"about every request; the server allows it after {_AUTHZ_DELAY_MS:g} ms and times itself "
                    "(authz.jsonl); 1 worker, 2 connections × 25.",
        envoy=EnvoySettings(ext_authz_delay_ms=_AUTHZ_DELAY_MS),
        load=LoadSettings(connections=2, requests_per_connection=25),
    ),
    Scenario(
        name="health-check",
        description=f"Active HTTP health checks (GET /healthz every {_HEALTH_CHECK_INTERVAL_MS} ms) on the "
                    "upstream cluster interleave with client traffic; 1 worker, 2 connections × 25.",
        envoy=EnvoySettings(health_check_interval_ms=_HEALTH_CHECK_INTERVAL_MS),
        load=LoadSettings(connections=2, requests_per_connection=25),
    ),
    Scenario(
        name="tracing-off",
        description="The tracing-zipkin load without tracing (its baseline); 1 worker, 2 connections × 25.",
        load=LoadSettings(connections=2, requests_per_connection=25),
    ),
)

#: All scenarios by name.
SCENARIOS: Final = MappingProxyType({s.name: s for s in _ALL})


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``.

    Raises:
        UsageError: no such scenario (the message lists them).
    """
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UsageError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
