"""Hostile kubeconfigs, credential plugins and API servers (issue 33, items 6 and 9).

The real command line in a subprocess, with the real ``kubernetes`` client, against the API stand-in over
HTTP on 127.0.0.1: a server that sends one byte at a time is given up on after ``--request-timeout``
(the whole response, and each chunk of a log stream); an exec plugin's stderr full of credentials is
never printed and a plugin that hangs is stopped; ``tokenFile: /dev/zero``, a "billion laughs" kubeconfig
and one nested 10,000 deep are refused in one line. Each run has a subprocess timeout far above the bound
it tests: without the bound the test fails by that timeout, not by a wall-clock assertion.
"""
from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from tests.kube.kube_standin import ApiServerStandIn, Container, Pod

NS = "shop"
CLI = [sys.executable, "-m", "envoy_dissector.cli"]
SECRETS = ("hunter2-password", "s3cr3t-token-0123456789abcdef")
#: The trickling tests' bounds: a response's deadline is connect + read, 3 s (a trickled response needs minutes)
TIMEOUTS = ("--connect-timeout", "1s", "--request-timeout", "2s")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServerStandIn]:
    standin = ApiServerStandIn(tmp_path / "api").start()
    standin.add_user("u", "good-token")
    log = standin.new_log("web-0")
    log.append_many([b"line %d" % i for i in range(2000)], [1_795_000_000_000_000_000 + i for i in range(2000)])
    standin.add_pod(Pod(name="web-0", namespace=NS, labels={"app": "web"},
                        containers={"istio-proxy": Container("istio-proxy", log)}))
    try:
        yield standin
    finally:
        standin.stop()


def _kubeconfig(api: ApiServerStandIn, path: Path, user: dict[str, Any]) -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "c", "cluster": {"server": api.url}}],
              "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}],
              "users": [{"name": "u", "user": user}]}
    path.write_text(json.dumps(config))
    return path


def _fetch(kubeconfig: Path, out: Path, *more: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, "fetch", "web-0", "--kubeconfig", str(kubeconfig), "-o", str(out), "--no-analyze",
                           "--allow-no-trace", *more], capture_output=True, text=True, check=False, timeout=timeout_s)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _error_line(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("envoy-dissect: error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def test_a_well_formed_kubeconfig_with_an_alias_still_works(api: ApiServerStandIn, tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(f"""apiVersion: v1
kind: Config
current-context: c
clusters: [{{name: c, cluster: &cluster {{server: "{api.url}"}}}}, {{name: d, cluster: *cluster}}]
contexts: [{{name: c, context: {{cluster: c, user: u, namespace: {NS}}}}}]
users: [{{name: u, user: {{token: good-token}}}}]
""")
    done = _fetch(config, tmp_path / "out", "-q")
    assert done.returncode == 0, done.stderr
    fetched = list((tmp_path / "out").rglob("*.log"))
    assert len(fetched) == 1 and len(fetched[0].read_text().splitlines()) == 2000


def test_a_server_sending_one_byte_at_a_time_is_given_up_on(api: ApiServerStandIn, tmp_path: Path) -> None:
    api.trickle_s, api.trickle_path = 0.2, "/pods/web-0"  # the pod's JSON alone would take minutes
    done = _fetch(_kubeconfig(api, tmp_path / "kc", {"token": "good-token"}), tmp_path / "out",
                  *TIMEOUTS)
    assert done.returncode == 5
    assert "did not answer within 3 s" in _error_line(done)  # connect 1 s + read 2 s


def test_a_log_stream_trickling_is_given_up_on_per_chunk(api: ApiServerStandIn, tmp_path: Path) -> None:
    api.trickle_s, api.trickle_path = 0.2, "/log"
    done = _fetch(_kubeconfig(api, tmp_path / "kc", {"token": "good-token"}), tmp_path / "out", *TIMEOUTS)
    assert done.returncode == 5
    assert "the log of web-0/istio-proxy: the API server did not answer within" in _error_line(done)
    assert not list((tmp_path / "out").rglob("*.log")) and not list((tmp_path / "out").rglob("*.part"))


class _Admin(http.server.BaseHTTPRequestHandler):
    """Envoy's admin ``/logging`` on 127.0.0.1 (all the port-forward test reaches of the pod)."""

    def do_POST(self) -> None:
        body = b"active loggers:\n" + b"".join(b"  %s: info\n" % name for name in (b"admin", b"conn_handler", b"http"))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def admin() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Admin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_forward_trickling_is_given_up_on(api: ApiServerStandIn, admin: int, tmp_path: Path) -> None:
    """The websocket port-forward to Envoy's admin: its handshake and response, one byte per 0.2 s, stay
    within the timeouts (connect 1 s + read 2 s), not the minute they take to arrive."""
    api.add_pod(Pod(name="web-1", namespace=NS, labels={"app": "web"}, admin_port=admin,
                    containers={"istio-proxy": Container("istio-proxy", api.new_log("web-1"))}))
    api.trickle_s, api.trickle_path = 0.2, "/portforward"
    done = subprocess.run([*CLI, "capture", "web-1", "--kubeconfig", str(_kubeconfig(api, tmp_path / "kc", {
        "token": "good-token"})), "-o", str(tmp_path / "out"), "--no-analyze", "--via", "port-forward",
        "--duration", "1s", *TIMEOUTS], capture_output=True, text=True, check=False, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 5, done.stderr
    assert ("Envoy's admin of web-1/istio-proxy (port-forward): the API server did not answer within 3 s"
            in _error_line(done))
    assert api.requests_to("/portforward"), "the port-forward was tried"


def _exec_user(code: str) -> dict[str, Any]:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                     "args": ["-c", code], "interactiveMode": "Never"}}


def test_an_exec_plugins_stderr_is_never_printed(api: ApiServerStandIn, tmp_path: Path) -> None:
    plugin = (f"import sys; sys.stderr.write('login failed: password: {SECRETS[0]} token {SECRETS[1]}\\n'); "
              f"print('Bearer {SECRETS[1]}'); sys.exit(1)")
    done = _fetch(_kubeconfig(api, tmp_path / "kc", _exec_user(plugin)), tmp_path / "out")
    for secret in SECRETS:
        assert secret not in done.stderr and secret not in done.stdout
    assert done.returncode == 6  # no credentials
    # one line: the plugin's failure is the error (not a library warning and then "unauthorized")
    assert done.stderr.splitlines() == [_error_line(done)]
    assert "no credentials: exec: credential plugin python" in done.stderr, done.stderr
    assert "exited with status 1" in done.stderr


def test_an_exec_plugin_without_a_credential_is_one_error_line(api: ApiServerStandIn, tmp_path: Path) -> None:
    """The client library itself logs this failure (``exec: missing token ...``) and goes on without
    credentials: the command stops with it as its one line."""
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"password": SECRETS[0]}}
    done = _fetch(_kubeconfig(api, tmp_path / "kc", _exec_user(f"print({json.dumps(json.dumps(credential))})")),
                  tmp_path / "out")
    assert done.returncode == 6 and SECRETS[0] not in done.stderr + done.stdout
    assert done.stderr.splitlines() == [_error_line(done)]
    assert "no credentials: exec: missing token or clientCertificateData" in done.stderr, done.stderr


def test_an_exec_plugin_that_hangs_is_stopped(api: ApiServerStandIn, tmp_path: Path) -> None:
    done = _fetch(_kubeconfig(api, tmp_path / "kc", _exec_user("import time; time.sleep(600)")), tmp_path / "out",
                  "--exec-timeout", "2s")
    assert "did not answer within 2 s" in done.stderr and done.returncode == 6, done.stderr


def test_an_exec_plugin_gives_a_token(api: ApiServerStandIn, tmp_path: Path) -> None:
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": "good-token"}}
    done = _fetch(_kubeconfig(api, tmp_path / "kc", _exec_user(f"print({json.dumps(json.dumps(credential))})")),
                  tmp_path / "out", "-q")
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_token_file_that_never_ends_is_refused(api: ApiServerStandIn, tmp_path: Path) -> None:
    done = _fetch(_kubeconfig(api, tmp_path / "kc", {"tokenFile": "/dev/zero"}), tmp_path / "out")
    assert done.returncode == 5
    assert "tokenFile /dev/zero: not a regular file" in _error_line(done)


def test_billion_laughs_is_refused(api: ApiServerStandIn, tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    config = tmp_path / "laughs"
    config.write_text("\n".join(lines) + "\n")
    assert config.stat().st_size < 1024
    done = _fetch(config, tmp_path / "out")
    assert done.returncode == 5 and "billion laughs" in _error_line(done)


def test_a_deeply_nested_kubeconfig_is_refused(api: ApiServerStandIn, tmp_path: Path) -> None:
    config = tmp_path / "deep"
    config.write_text("clusters: " + "[" * 10_000 + "]" * 10_000 + "\n")
    done = _fetch(config, tmp_path / "out")
    assert done.returncode == 5 and "nested more than 64 levels deep" in _error_line(done)


@pytest.mark.parametrize("option", ["--connect-timeout", "--request-timeout"])
def test_a_timeout_of_zero_is_a_usage_error(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from envoy_dissector.cli.main import main

    assert main(["fetch", "web-0", option, "0s", "--kubeconfig", str(tmp_path / "none"), "-o", str(tmp_path)]) == 64
    assert f"{option} must be positive" in capsys.readouterr().err
