"""The mesh path in the lab: two real Envoys shaped like Istio sidecars, mutual TLS between them.

    client ──plaintext──► A (client sidecar, outbound) ══mTLS══► B (server sidecar, inbound) ──► app

* A: plaintext listener; cluster ``outbound|80||app.shop.svc.cluster.local`` to B with an
  ``UpstreamTlsContext`` (client certificate, SNI ``outbound_.80_._.app.shop.svc.cluster.local``) and a
  small ``max_requests_per_connection`` so that several A→B handshakes happen under keep-alive load.
* B: ``DownstreamTlsContext`` with ``require_client_certificate``, a TLS inspector, ``use_remote_address:
  false`` (A's ``x-request-id`` is kept, as Istio's inbound does), cluster ``inbound|80||`` to the app.

Each Envoy writes its own trace log and access log (its own truth) into ``OUT/a`` and ``OUT/b``, both
complete capture directories; ``OUT/meta.json`` records the run and both Envoys' handshake counters.
Certificates come from a throwaway CA made with ``openssl`` for this run and are deleted after it.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Final

from envoy_dissector.lab.certs import make_mesh_certificates
from envoy_dissector.lab.envoy import EnvoyConfig, EnvoyProcess, EnvoySettings, LabError, free_port
from envoy_dissector.lab.formats import DEFAULT_LOG_FORMAT, resolve_log_format
from envoy_dissector.lab.load import LoadSettings, run_load
from envoy_dissector.lab.run import _COUNTER_PREFIXES, _SETTLE_S, finish_capture
from envoy_dissector.lab.scenarios import Scenario
from envoy_dissector.lab.upstream import UpstreamServer, UpstreamSettings

SNI: Final = "outbound_.80_._.app.shop.svc.cluster.local"
OUTBOUND_CLUSTER: Final = "outbound|80||app.shop.svc.cluster.local"
INBOUND_CLUSTER: Final = "inbound|80||"
#: Requests per A→B connection before A opens a new one (each new one is a TLS handshake).
REQUESTS_PER_UPSTREAM_CONNECTION: Final = 8

CLIENT_SIDECAR: Final = Scenario(
    name="mesh-mtls-a",
    description="Client sidecar (outbound): plaintext from the client, mutual TLS to the server sidecar "
                f"(SNI {SNI}); a new upstream connection every {REQUESTS_PER_UPSTREAM_CONNECTION} requests.",
    envoy=EnvoySettings(cluster_name=OUTBOUND_CLUSTER, upstream_tls_sni=SNI,
                        max_requests_per_connection=REQUESTS_PER_UPSTREAM_CONNECTION),
    load=LoadSettings(connections=3, requests_per_connection=16),
)
SERVER_SIDECAR: Final = Scenario(
    name="mesh-mtls-b",
    description="Server sidecar (inbound): mutual TLS from the client sidecar (client certificate required), "
                "use_remote_address false (the client's x-request-id is kept), plaintext to the app.",
    envoy=EnvoySettings(cluster_name=INBOUND_CLUSTER, downstream_tls=True, use_remote_address=False),
    load=CLIENT_SIDECAR.load,
)


def run_mesh(out_dir: Path | str, log_format: str = DEFAULT_LOG_FORMAT, requests: int | None = None, *,
             startup_timeout_s: float = 20.0, trace_headers: str = "") -> Path:
    """Run client → A → (mTLS) → B → app and write ``OUT/a``, ``OUT/b`` and ``OUT/meta.json``.

    ``trace_headers``: the trace context the client sends (``LoadSettings.trace_headers``: ``w3c``, ``b3``,
    ``mixed``; none by default).

    Raises:
        LabError: Envoy, openssl, the app or the load could not run.
    """
    format_name, pattern = resolve_log_format(log_format)
    out = Path(out_dir)
    side_a, side_b = out / "a", out / "b"
    for side in (side_a, side_b):
        if side.exists():
            shutil.rmtree(side)
        side.mkdir(parents=True)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="envoy-dissector-mesh-certs-") as tmp:
        client_tls, server_tls = make_mesh_certificates(Path(tmp), server_sni=SNI)
        app = UpstreamServer(UpstreamSettings(), side_b / "upstream.jsonl").start()
        b = EnvoyProcess(EnvoyConfig(settings=SERVER_SIDECAR.envoy, upstream_port=app.port, listener_port=free_port(),
                                     log_format=pattern, work_dir=side_b, tls=server_tls),
                         startup_timeout_s=startup_timeout_s)
        a: EnvoyProcess | None = None
        counters: dict[str, dict[str, int]] = {"a": {}, "b": {}}
        exit_codes = {"a": 0, "b": 0}
        try:
            b.start()
            a = EnvoyProcess(EnvoyConfig(settings=CLIENT_SIDECAR.envoy, upstream_port=b.listener_port,
                                         listener_port=free_port(), log_format=pattern, work_dir=side_a,
                                         tls=client_tls), startup_timeout_s=startup_timeout_s)
            a.start()
            ready = time.time()
            load = run_load(a.listener_port, replace(CLIENT_SIDECAR.load, trace_headers=trace_headers),
                            side_a / "client.jsonl", total_requests=requests)
            time.sleep(_SETTLE_S)
            counters = {"a": a.counters(*_COUNTER_PREFIXES), "b": b.counters(*_COUNTER_PREFIXES)}
        finally:
            if a is not None:
                exit_codes["a"] = a.stop()
            exit_codes["b"] = b.stop()
            app.stop()
            for side in (side_a, side_b):
                (side / "admin-address.txt").unlink(missing_ok=True)
    finished = time.time()
    if b.killed or (a is not None and a.killed):
        raise LabError("an Envoy did not stop within its SIGTERM timeout and was killed")
    assert a is not None
    shutil.copyfile(side_a / "client.jsonl", side_b / "client.jsonl")  # B's client is A: the same requests
    shutil.copyfile(side_b / "upstream.jsonl", side_a / "upstream.jsonl")
    for name, scenario, envoy, upstream_port in (("a", CLIENT_SIDECAR, a, b.listener_port),
                                                  ("b", SERVER_SIDECAR, b, app.port)):
        finish_capture(out / name, scenario, envoy_settings=scenario.envoy, requests=requests,
                       log_format=(format_name, pattern), envoy=envoy, exit_code=exit_codes[name],
                       upstream_port=upstream_port, load=load, times=(started, ready, finished),
                       counters=counters[name])
    handshakes = {
        "a_upstream": counters["a"].get(f"cluster.{OUTBOUND_CLUSTER}.ssl.handshake", 0),
        "b_downstream": sum(v for k, v in counters["b"].items()
                            if k.startswith("listener.") and k.endswith(".ssl.handshake")),
    }
    meta = {"scenario": "mesh-mtls", "description": __doc__.split("\n\n")[0] if __doc__ else "",
            "sides": {"a": "client sidecar (outbound)", "b": "server sidecar (inbound)"},
            "sni": SNI, "clusters": {"a": OUTBOUND_CLUSTER, "b": INBOUND_CLUSTER},
            "log_format": {"name": format_name, "pattern": pattern},
            "requests": load.requests, "ssl_handshakes": handshakes, "trace_headers": trace_headers or None}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out
