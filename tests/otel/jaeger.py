"""A real Jaeger for the OpenTelemetry export's tests: v2 all-in-one, in-memory storage, on 127.0.0.1 only.

Jaeger is built from the Go module proxy once and cached outside the repository
(``~/.cache/envoy-dissector/jaeger-v1.76.0/jaeger``, or ``$JAEGER_BIN``): ``go mod init x && go get -tool
github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 && go build``, a few CPU-minutes the first time. A module build
has no web UI assets; the query API (``/api/traces``) is all the tests read. A config file binds the OTLP
receivers (gRPC, HTTP) and the query API to free ports on 127.0.0.1; the collector's own metrics are off.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = "v1.76.0"
MODULE = "github.com/jaegertracing/jaeger/cmd/jaeger"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "envoy-dissector" / f"jaeger-{VERSION}"
#: Where Go is when it is not on PATH (the project's machines install it there).
GO_FALLBACK = Path("/usr/local/go/bin/go")
BUILD_TIMEOUT_S = 1500

#: (``enable_tracing: false``: Jaeger's query extension traces itself by default, to OTLP on 127.0.0.1:4317,
#: a port not ours; with nothing there, its shutdown waited 10 s for that export)
_CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    max_clock_skew_adjust: 0s
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc}
      http:
        endpoint: 127.0.0.1:{otlp_http}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


class Unavailable(Exception):
    """Jaeger cannot be had here (no Go to build it with); the message says why."""


def go_binary() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return str(GO_FALLBACK) if GO_FALLBACK.is_file() else None


def find_or_build() -> Path:
    """The Jaeger binary: ``$JAEGER_BIN``, the cached build, or a new build (one at a time across processes).

    Raises:
        Unavailable: no binary and no Go to build one.
        RuntimeError: the build failed (its output's tail in the message).
    """
    given = os.environ.get("JAEGER_BIN")
    if given:
        return Path(given)
    binary = CACHE / "jaeger"
    if binary.is_file():
        return binary
    go = go_binary()
    if go is None:
        raise Unavailable(f"Jaeger {VERSION} is not built ({binary}) and Go is not installed to build it "
                          "(or set JAEGER_BIN)")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be building it right now
        if binary.is_file():
            return binary
        work = CACHE / "build"
        work.mkdir(exist_ok=True)
        steps = ([] if (work / "go.mod").is_file() else [[go, "mod", "init", "x"]]) + [
            [go, "get", "-tool", f"{MODULE}@{VERSION}"],
            ["nice", "-n", "10", go, "build", "-o", str(binary.with_suffix(".part")), MODULE]]
        for step in steps:
            done = subprocess.run(step, cwd=work, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(step)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
        binary.with_suffix(".part").rename(binary)
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Jaeger:
    """A running Jaeger: where to send OTLP and where to read traces back."""

    otlp_http_port: int
    query_port: int

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_http_port}"

    def post_otlp_json(self, body: bytes) -> None:
        """One OTLP/JSON ``ExportTraceServiceRequest`` to the receiver (as a collector would forward a file's line)."""
        request = urllib.request.Request(f"{self.otlp_endpoint}/v1/traces", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.query_port}{path}{query}", timeout=30) as answer:
            return json.loads(answer.read())

    def services(self) -> list[str]:
        return list(self.get("/api/services")["data"] or [])

    def traces(self, service: str, start_us: int, end_us: int, limit: int = 100_000) -> list[dict[str, Any]]:
        """Every trace with a span of ``service`` between the two times (Jaeger's search, the UI's API)."""
        return list(self.get("/api/traces", service=service, start=start_us, end=end_us, limit=limit)["data"] or [])

    def trace(self, trace_id: str) -> dict[str, Any]:
        return self.get(f"/api/traces/{trace_id}")["data"][0]  # type: ignore[no-any-return]

    def wait_for_services(self, names: set[str], timeout_s: float = 30.0) -> None:
        """Jaeger stores what it received asynchronously: wait until these services are known."""
        deadline = time.monotonic() + timeout_s
        while not names <= set(self.services()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Jaeger never listed {sorted(names - set(self.services()))}")
            time.sleep(0.2)


@contextmanager
def running_jaeger(binary: Path, startup_timeout_s: float = 60.0) -> Iterator[Jaeger]:
    """Start Jaeger with a config binding everything to 127.0.0.1 on free ports; stop it on exit."""
    ports = {name: free_port() for name in ("otlp_grpc", "otlp_http", "query_http", "query_grpc")}
    with tempfile.TemporaryDirectory(prefix="envoy-dissector-jaeger-") as tmp:
        config = Path(tmp) / "jaeger.yaml"
        config.write_text(_CONFIG.format(**ports), encoding="utf-8")
        log = open(Path(tmp) / "jaeger.log", "wb")
        process = subprocess.Popen([str(binary), "--config", f"file:{config}"], stdout=log, stderr=subprocess.STDOUT,
                                   cwd=tmp)
        jaeger = Jaeger(otlp_http_port=ports["otlp_http"], query_port=ports["query_http"])
        try:
            deadline = time.monotonic() + startup_timeout_s
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"Jaeger exited ({process.returncode}):\n"
                                       f"{(Path(tmp) / 'jaeger.log').read_text(errors='replace')[-3000:]}")
                try:
                    jaeger.services()
                    with socket.create_connection(("127.0.0.1", ports["otlp_http"]), timeout=1):
                        break
                except (OSError, urllib.error.URLError):
                    if time.monotonic() > deadline:
                        raise RuntimeError("Jaeger did not answer on 127.0.0.1 in time") from None
                    time.sleep(0.2)
            yield jaeger
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


if __name__ == "__main__":  # build or find it ahead of the tests: python tests/otel/jaeger.py
    print(find_or_build())
