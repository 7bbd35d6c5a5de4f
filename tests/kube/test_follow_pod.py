"""``dashboard --follow pod/NAME`` refused in one line, before any level changes: a pod that is not there (the
real ``kubernetes`` client against the API stand-in over HTTP on 127.0.0.1), cluster options given with a file,
a name that is not one pod. The follow itself (a real Envoy, a real browser) is tests/dashboard/test_follow_browser.py."""
from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")

from tests.kube.kube_standin import ApiServerStandIn, Container, Pod

NS = "shop"
CLI = [sys.executable, "-m", "envoy_dissector.cli", "dashboard"]


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    api = ApiServerStandIn(tmp_path / "api").start()
    try:
        api.add_user("admin", "admin-token")
        api.add_pod(Pod(name="web-0", namespace=NS, labels={"app": "web"},
                        containers={"istio-proxy": Container("istio-proxy", api.new_log("web-0"))}))
        yield api.write_kubeconfig(tmp_path / "kubeconfig", "admin-token", namespace=NS)
    finally:
        api.stop()


def _dashboard(*args: str) -> subprocess.CompletedProcess[str]:
    with socket.socket() as sock:  # (a free port, should a bug serve instead of refusing)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = subprocess.run([*CLI, "--port", str(port), *args], capture_output=True, text=True, check=False,
                          timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    assert " dashboard on http" not in done.stdout  # (refused before serving)
    return done


def test_a_pod_that_is_not_there_is_one_line(kubeconfig: Path) -> None:
    done = _dashboard("--follow", "pod/nope", "-n", NS, "--kubeconfig", str(kubeconfig))
    assert done.returncode == 7, done.stderr
    assert done.stderr.strip().splitlines() == ['envoy-dissect: error: pod "nope" not found in namespace shop']


@pytest.mark.parametrize(("args", "message"), [
    (["--follow", "web-0", "-n", NS], "-n: only with --follow pod/NAME (--follow web-0 is a file)"),
    (["--follow", "envoy.log", "--context", "kind", "-c", "app"],
     "--context, -c: only with --follow pod/NAME (--follow envoy.log is a file)"),
    (["--follow", "pod/web-0/istio-proxy"], "--follow pod/web-0/istio-proxy: name one pod, as pod/NAME"),
    (["--follow", "pod/"], "--follow pod/: name one pod, as pod/NAME"),
])
def test_follow_options_that_do_not_fit_are_usage_errors(args: list[str], message: str) -> None:
    done = _dashboard(*args)
    assert done.returncode == 64, done.stderr
    assert done.stderr.strip().splitlines() == [f"envoy-dissect: error: {message}"]
