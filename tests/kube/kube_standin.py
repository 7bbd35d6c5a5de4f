"""A small Kubernetes API server stand-in for the ``fetch``/``capture`` tests (real HTTP, 127.0.0.1:0).

It serves what those commands use, in the API server's own wire format, to the
real ``kubernetes`` Python client:

* ``GET  /api/v1/namespaces/NS/pods[?labelSelector=...]``         PodList
* ``GET  /api/v1/namespaces/NS/pods/NAME``                         Pod
* ``GET  /api/v1/namespaces/NS/pods/NAME/log?container=&timestamps=&sinceSeconds=&previous=&tailLines=&limitBytes=``
  ``&follow=`` chunked text, lines stamped RFC3339Nano (Go style: trailing zeros trimmed) when they were read;
  with ``follow=true`` the stream stays open and each new line is sent as the runtime stamps it;
* ``*    /api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH?QUERY``  forwarded to the pod's (real Envoy's) admin
  port, or 503 "connection refused" when the admin only listens on the pod's localhost (as in Istio);
* ``GET  /api/v1/namespaces/NS/pods/NAME/portforward?ports=P`` + websocket upgrade: the
  ``v4.channel.k8s.io`` port-forward protocol (data/error channel per port, initial port frames),
  bridged to the pod's admin port over TCP.

Authentication is ``Authorization: Bearer TOKEN`` (401 otherwise); authorisation is
RBAC-like rules per user (verb, resource, optional resource names), answering 403 with
the API server's message (``User "u" cannot get resource "pods/log" in API group "" in
the namespace "ns"``). Every request is recorded (:attr:`ApiServerStandIn.requests`).

Container logs come from a "runtime" thread that follows a file (a real Envoy's
stderr) and stamps each complete line with the wall clock when it read it, into an
on-disk store, like CRI log files; a container restart keeps the old store as the
``previous`` instance.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def go_rfc3339nano(ns: int) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: fraction with trailing zeros removed (none if zero)."""
    secs, frac = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(secs, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


# -- the "container runtime" -----------------------------------------------------------------------------

def _go_bool(value: str | None) -> bool:
    """A boolean query parameter as the API server reads it (Go's strconv.ParseBool): older Python clients
    send ``True``, newer ones ``true``."""
    return value in ("1", "t", "T", "TRUE", "true", "True")

class ContainerLog:
    """One container instance's log: ``NS_EPOCH LINE`` records in a file, appended by a follower thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("ab")
        self._lock = threading.Lock()
        self._appended = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lines = 0

    def append(self, line: bytes, ts_ns: int | None = None) -> None:
        record = b"%d %s\n" % (ts_ns if ts_ns is not None else time.time_ns(), line)
        with self._lock:
            self._fh.write(record)
            self._fh.flush()
            self.lines += 1
            self._appended.notify_all()

    def append_many(self, lines: list[bytes], ts_ns: list[int]) -> None:
        with self._lock:
            self._fh.write(b"".join(b"%d %s\n" % (t, line) for t, line in zip(ts_ns, lines, strict=True)))
            self._fh.flush()
            self.lines += len(lines)
            self._appended.notify_all()

    def wait_for(self, needles: list[str], timeout_s: float = 30.0) -> None:
        """Return once a record holding each of ``needles`` is in the log (woken by each append)."""
        wanted = [n.encode() for n in needles]

        def present() -> bool:
            data = self.path.read_bytes()
            return all(n in data for n in wanted)

        with self._appended:
            if not self._appended.wait_for(present, timeout_s):
                raise TimeoutError(f"{self.path.name}: not all of {needles} logged within {timeout_s:g} s")

    def rotate(self) -> None:
        """What the kubelet does at containerLogMaxSize: from now on only newer lines are served."""
        with self._lock:
            self._fh.close()
            self._fh = self.path.open("wb")

    def follow(self, source: Path, poll_s: float = 0.002) -> ContainerLog:
        """Stamp every complete line appended to ``source`` from now on (and what is there already)."""

        def run() -> None:
            offset, carry = 0, b""
            while True:
                stopping = self._stop.is_set()
                try:
                    with source.open("rb") as fh:
                        fh.seek(offset)
                        data = fh.read()
                except FileNotFoundError:
                    data = b""
                if data:
                    offset += len(data)
                    data = carry + data
                    cut = data.rfind(b"\n")
                    if cut >= 0:
                        carry = data[cut + 1:]
                        now = time.time_ns()
                        lines = data[:cut].split(b"\n")
                        self.append_many(lines, [now] * len(lines))
                    else:
                        carry = data
                elif stopping:
                    if carry:
                        self.append(carry)
                    return
                else:
                    time.sleep(poll_s)

        self._thread = threading.Thread(target=run, name=f"runtime-{self.path.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Read what is left of the source, then stop following."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def records(self) -> Iterator[tuple[int, bytes]]:
        """Complete records present now: (epoch ns, line)."""
        with self.path.open("rb") as fh:
            carry = b""
            while True:
                block = fh.read(1 << 20)
                if not block:
                    return
                data = carry + block
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data
                    continue
                carry = data[cut + 1:]
                for rec in data[:cut].split(b"\n"):
                    ts, _, line = rec.partition(b" ")
                    yield int(ts), line

    def read_from(self, offset: int) -> tuple[list[tuple[int, bytes]], int]:
        """Complete records from byte ``offset`` on, and the offset after the last of them (``follow=true``)."""
        with self.path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
        cut = data.rfind(b"\n")
        if cut < 0:
            return [], offset
        out = []
        for rec in data[:cut].split(b"\n"):
            ts, _, line = rec.partition(b" ")
            out.append((int(ts), line))
        return out, offset + cut + 1

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self.stop()
        with self._lock:
            self._fh.close()


@dataclass
class Container:
    name: str
    current: ContainerLog
    previous: ContainerLog | None = None
    restart_count: int = 0
    image: str = "docker.io/istio/proxyv2:1.28.0"
    init: bool = False
    """A native sidecar (init container with restartPolicy Always)."""


@dataclass
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    containers: dict[str, Container]
    admin_port: int | None = None
    """The pod's port 15000 (a real Envoy's admin port on 127.0.0.1)."""
    admin_reachable_via_proxy: bool = True
    """False: the admin listens on the pod's localhost only, so the API server's proxy gets refused."""
    phase: str = "Running"
    ip: str = "10.0.0.1"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    created: str = field(default_factory=lambda: go_rfc3339nano(time.time_ns() // 10**9 * 10**9))

    def as_json(self) -> dict[str, Any]:
        def spec(c: Container) -> dict[str, Any]:
            out: dict[str, Any] = {"name": c.name, "image": c.image}
            if c.name == "istio-proxy":
                out["ports"] = [{"containerPort": 15090, "name": "http-envoy-prom", "protocol": "TCP"}]
            if c.init:
                out["restartPolicy"] = "Always"
            return out

        def status(c: Container) -> dict[str, Any]:
            out: dict[str, Any] = {"name": c.name, "ready": self.phase == "Running", "restartCount": c.restart_count,
                                   "image": c.image, "imageID": c.image + "@sha256:" + "0" * 64,
                                   "started": self.phase == "Running",
                                   "state": {"running": {"startedAt": self.created}}}
            if c.previous is not None:
                out["lastState"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
            return out

        main = [c for c in self.containers.values() if not c.init]
        init = [c for c in self.containers.values() if c.init]
        body: dict[str, Any] = {
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid, "labels": self.labels,
                         "creationTimestamp": self.created, "resourceVersion": "1"},
            "spec": {"containers": [spec(c) for c in main], "nodeName": "node-1"},
            "status": {"phase": self.phase, "podIP": self.ip, "hostIP": "192.168.0.1",
                       "containerStatuses": [status(c) for c in main]},
        }
        if init:
            body["spec"]["initContainers"] = [spec(c) for c in init]
            body["status"]["initContainerStatuses"] = [status(c) for c in init]
        return body


@dataclass(frozen=True)
class Rule:
    verbs: tuple[str, ...]
    resources: tuple[str, ...]
    names: tuple[str, ...] | None = None

    def allows(self, verb: str, resource: str, name: str | None) -> bool:
        return ((verb in self.verbs or "*" in self.verbs) and (resource in self.resources or "*" in self.resources)
                and (self.names is None or (name is not None and name.split(":")[0] in self.names)))


@dataclass
class User:
    name: str
    rules: list[Rule] | None  # None: everything allowed


@dataclass
class Fault:
    method: str
    path_contains: str
    status: int
    message: str
    skip: int = 0
    times: int = 1


@dataclass
class RequestRecord:
    method: str
    path: str
    query: dict[str, list[str]]
    user: str | None
    verb: str | None
    resource: str | None
    status: int | None = None


# -- the API server ----------------------------------------------------------------------------------------
class ApiServerStandIn:
    """``with ApiServerStandIn(tmp) as api: api.add_user(...); api.add_pod(...); api.url``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.pods: dict[tuple[str, str], Pod] = {}
        self.users: dict[str, User] = {}
        self.requests: list[RequestRecord] = []
        self.faults: list[Fault] = []
        self.log_bytes_sent: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.tls_context: Any = None
        self.trickle_s: float | None = None
        """Set: responses to paths holding ``trickle_path`` are sent one byte per ``trickle_s`` seconds."""
        self.trickle_path = ""
        self.trickles_cut: list[str] = []
        """The paths of trickled responses the client went away from before their end."""
        self.clock: Callable[[], int] = time.time_ns
        """The API server's now (epoch ns), which ``sinceSeconds`` counts back from."""

    # -- setup ------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        scheme = "https" if self.tls_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def add_user(self, name: str, token: str, rules: list[Rule] | None = None) -> None:
        self.users[token] = User(name, rules)

    def new_log(self, label: str) -> ContainerLog:
        return ContainerLog(self.state_dir / "runtime" / f"{label}-{uuid.uuid4().hex[:8]}.log")

    def add_pod(self, pod: Pod) -> Pod:
        self.pods[(pod.namespace, pod.name)] = pod
        return pod

    def restart_container(self, pod: Pod, container: str, new_log: ContainerLog) -> None:
        """The container was restarted: the current log becomes ``previous``."""
        c = pod.containers[container]
        c.current.stop()
        c.previous, c.current = c.current, new_log
        c.restart_count += 1

    def fail(self, method: str, path_contains: str, status: int, message: str, *, skip: int = 0,
             times: int = 1) -> None:
        """Answer the (skip+1)-th .. (skip+times)-th matching request with ``status`` (a transient API failure)."""
        with self._lock:
            self.faults.append(Fault(method, path_contains, status, message, skip, times))

    def requests_to(self, fragment: str, method: str | None = None) -> list[RequestRecord]:
        return [r for r in self.requests if fragment in r.path and (method is None or r.method == method)]

    def write_kubeconfig(self, path: Path, token: str, *, namespace: str | None = None,
                         extra_contexts: dict[str, str] | None = None, current: str = "standin") -> Path:
        """A kubeconfig (JSON is YAML) whose context ``standin`` points here with ``token``.

        ``extra_contexts``: more contexts, name -> server URL (same token).
        """
        clusters = [{"name": "standin", "cluster": {"server": self.url}}]
        contexts = [{"name": "standin", "context": {"cluster": "standin", "user": "u",
                                                    **({"namespace": namespace} if namespace else {})}}]
        for name, server in (extra_contexts or {}).items():
            clusters.append({"name": name, "cluster": {"server": server}})
            contexts.append({"name": name, "context": {"cluster": name, "user": "u"}})
        config = {"apiVersion": "v1", "kind": "Config", "clusters": clusters, "contexts": contexts,
                  "users": [{"name": "u", "user": {"token": token}}], "current-context": current}
        path.write_text(json.dumps(config, indent=1))
        return path

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> ApiServerStandIn:
        standin = self

        class Handler(_Handler):
            api = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if self.tls_context is not None:
            self._server.socket = self.tls_context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="apiserver-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for pod in self.pods.values():
            for c in pod.containers.values():
                c.current.close()
                if c.previous is not None:
                    c.previous.close()

    def __enter__(self) -> ApiServerStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- decisions ----------------------------------------------------------------------------------------
    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.method == method and fault.path_contains in path and fault.times > 0:
                    if fault.skip > 0:
                        fault.skip -= 1
                        return None
                    fault.times -= 1
                    return fault
        return None


class _Trickle:
    """A response stream that sends one byte per ``pause_s`` seconds (and stops when the client goes away)."""

    def __init__(self, handler: _Handler, inner: Any, pause_s: float) -> None:
        self.handler, self.inner, self.pause_s = handler, inner, pause_s

    def write(self, data: bytes) -> int:
        if self.handler.api.trickle_path not in getattr(self.handler, "path", ""):
            return int(self.inner.write(data))
        try:
            for i in range(len(data)):
                self.inner.write(data[i:i + 1])
                self.inner.flush()
                time.sleep(self.pause_s)
        except OSError:  # the client gave up (what the tests want): drop the rest quietly
            self.handler.close_connection = True
            self.handler.api.trickles_cut.append(self.handler.path)
        return len(data)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    @property
    def closed(self) -> bool:
        return bool(self.inner.closed)


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "HEAD": "get",
          "OPTIONS": "options"}


class _Handler(BaseHTTPRequestHandler):
    api: ApiServerStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def setup(self) -> None:
        super().setup()
        if self.api.trickle_s:
            self.wfile = _Trickle(self, self.wfile, self.api.trickle_s)  # type: ignore[assignment]

    # -- plumbing ---------------------------------------------------------------------------------------
    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._record.status = code

    def _error(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        self._send_json(code, _status(code, reason, message, details))

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- routing ----------------------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        segments = [unquote(s) for s in split.path.split("/")]
        query = parse_qs(split.query, keep_blank_values=True)
        self._record = RequestRecord(method, unquote(split.path), query, None, None, None)
        with self.api._lock:
            self.api.requests.append(self._record)
        body = self._read_body() if method in ("POST", "PUT", "PATCH") else b""
        auth = self.headers.get("Authorization", "")
        user = self.api.users.get(auth[7:]) if auth[:7].lower() == "bearer " else None
        if user is None:
            self._error(401, "Unauthorized", "Unauthorized")
            return
        self._record.user = user.name
        # /api/v1/namespaces/NS/pods[/NAME[/SUB[/REST...]]]
        if len(segments) < 6 or segments[1:4] != ["api", "v1", "namespaces"] or segments[5] != "pods":
            self._error(404, "NotFound", "the server could not find the requested resource")
            return
        ns = segments[4]
        name = segments[6] if len(segments) > 6 else None
        sub = segments[7] if len(segments) > 7 else None
        rest = "/".join(segments[8:]) if len(segments) > 8 else ""
        if name is None:
            verb, resource = ("list" if method == "GET" else _VERBS[method]), "pods"
        elif sub is None:
            verb, resource = _VERBS[method], "pods"
        else:
            verb, resource = _VERBS[method], f"pods/{sub}"
            if sub == "portforward":
                verb = "create"  # websocket upgrades are authorised as create (Kubernetes >= 1.35 default)
        self._record.verb, self._record.resource = verb, resource
        if user.rules is not None and not any(r.allows(verb, resource, name) for r in user.rules):
            who = f'pods "{name}"' if name else "pods"
            self._error(403, "Forbidden", f'{who} is forbidden: User "{user.name}" cannot {verb} resource '
                                          f'"{resource}" in API group "" in the namespace "{ns}"',
                        {"name": name, "kind": "pods"} if name else {"kind": "pods"})
            return
        fault = self.api._fault_for(method, self._record.path)
        if fault is not None:
            self._error(fault.status, "InternalError", fault.message)
            return
        pod_name = name.split(":")[0] if name else None
        pod = self.api.pods.get((ns, pod_name)) if pod_name else None
        if name is not None and pod is None:
            self._error(404, "NotFound", f'pods "{pod_name}" not found', {"name": pod_name, "kind": "pods"})
            return
        if name is None and method == "GET":
            self._list(ns, query)
        elif sub is None and method == "GET":
            assert pod is not None
            self._send_json(200, pod.as_json())
        elif sub == "log" and method == "GET":
            assert pod is not None
            self._log(pod, query)
        elif sub == "proxy":
            assert pod is not None and name is not None
            self._proxy(pod, name, method, rest, urlsplit(self.path).query, body)
        elif sub == "portforward" and method == "GET":
            assert pod is not None
            self._portforward(pod, query)
        else:
            self._error(405, "MethodNotAllowed", f"{method} is not supported here")

    # -- pods ---------------------------------------------------------------------------------------------
    def _list(self, ns: str, query: dict[str, list[str]]) -> None:
        selector = (query.get("labelSelector") or [""])[0]
        try:
            match = _selector(selector)
        except ValueError as exc:
            self._error(400, "BadRequest", f"unable to parse requirement: {exc}")
            return
        items = [p.as_json() for (pns, _), p in sorted(self.api.pods.items()) if pns == ns and match(p.labels)]
        self._send_json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                              "items": items})

    def _log(self, pod: Pod, query: dict[str, list[str]]) -> None:
        def q(key: str) -> str | None:
            values = query.get(key)
            return values[0] if values else None

        name = q("container")
        if name is None:
            if len(pod.containers) != 1:
                names = " ".join(pod.containers)
                self._error(400, "BadRequest", f"a container name must be specified for pod {pod.name}, "
                                               f"choose one of: [{names}]")
                return
            name = next(iter(pod.containers))
        container = pod.containers.get(name)
        if container is None:
            self._error(400, "BadRequest", f"container {name} is not valid for pod {pod.name}")
            return
        log = container.current
        if _go_bool(q("previous")):
            if container.previous is None:
                self._error(400, "BadRequest",
                            f'previous terminated container "{name}" in pod "{pod.name}" not found')
                return
            log = container.previous
        stamps = _go_bool(q("timestamps"))
        since = q("sinceSeconds")
        since_ns = self.api.clock() - int(since) * 1_000_000_000 if since else None
        tail = int(q("tailLines")) if q("tailLines") else None
        limit = int(q("limitBytes")) if q("limitBytes") else None
        follow = _go_bool(q("follow"))
        offset = 0
        if follow:  # the records there now, then each new one as the runtime appends it
            present, offset = log.read_from(0)
            records: Iterator[tuple[int, bytes]] = iter(present)
        else:
            records = log.records()
        if tail is not None:
            records = iter(list(records)[-tail:] if tail > 0 else [])
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._record.status = 200
        sent = 0
        buf: list[bytes] = []
        size = 0
        for ts, line in records:
            if since_ns is not None and ts < since_ns:
                continue
            out = (go_rfc3339nano(ts).encode() + b" " + line + b"\n") if stamps else line + b"\n"
            buf.append(out)
            size += len(out)
            if limit is not None and sent + size >= limit:
                break
            if size >= 32768:
                sent += self._chunk(b"".join(buf))
                buf, size = [], 0
        data = b"".join(buf)
        if limit is not None:
            data = data[:max(0, limit - sent)]
        if data:
            sent += self._chunk(data)
        while follow and not log.closed:  # until the client goes away or the server stops
            time.sleep(0.05)
            fresh, offset = log.read_from(offset)
            data = b"".join((go_rfc3339nano(ts).encode() + b" " + line + b"\n") if stamps else line + b"\n"
                            for ts, line in fresh)
            try:
                if data:
                    sent += self._chunk(data)
                    self.wfile.flush()
            except (OSError, ValueError):  # the client closed the stream
                return
        self.wfile.write(b"0\r\n\r\n")
        with self.api._lock:
            key = f"{pod.name}/{name}"
            self.api.log_bytes_sent[key] = self.api.log_bytes_sent.get(key, 0) + sent

    def _chunk(self, data: bytes) -> int:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        return len(data)

    # -- proxy --------------------------------------------------------------------------------------------
    def _proxy(self, pod: Pod, name: str, method: str, rest: str, raw_query: str, body: bytes) -> None:
        port = int(name.split(":")[1]) if ":" in name else None
        if port is None or pod.admin_port is None or port != 15000 or not pod.admin_reachable_via_proxy:
            self._error(503, "ServiceUnavailable", f"error trying to reach service: dial tcp {pod.ip}:{port}: "
                                                   "connect: connection refused")
            return
        target = "/" + rest + ("?" + raw_query if raw_query else "")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", pod.admin_port, timeout=10)
            conn.request(method, target, body=body or None, headers={"Content-Length": str(len(body))})
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        except OSError as exc:
            self._error(503, "ServiceUnavailable", f"error trying to reach service: {exc}")
            return
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type") or "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._record.status = resp.status

    # -- port-forward over websocket (v4.channel.k8s.io) ---------------------------------------------------
    def _portforward(self, pod: Pod, query: dict[str, list[str]]) -> None:
        if self.headers.get("Upgrade", "").lower() != "websocket":
            self._error(400, "BadRequest", "only websocket port-forwarding is implemented by this stand-in")
            return
        ports = [int(p) for v in query.get("ports", []) for p in v.split(",") if p]
        if not ports:
            self._error(400, "BadRequest", "query parameter \"port\" is required")
            return
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        self.wfile.flush()
        self._record.status = 101
        self.close_connection = True
        write_lock = threading.Lock()

        def send(opcode: int, payload: bytes) -> None:
            n = len(payload)
            if n < 126:
                head = bytes([0x80 | opcode, n])
            elif n < 65536:
                head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
            else:
                head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
            with write_lock:
                try:
                    self.wfile.write(head + payload)
                    self.wfile.flush()
                except (OSError, ValueError):  # the client went away (ValueError: the stream is closed)
                    pass

        upstreams: dict[int, socket.socket] = {}
        for i, port in enumerate(ports):
            port_bytes = port.to_bytes(2, "little")
            send(0x2, bytes([2 * i]) + port_bytes)
            send(0x2, bytes([2 * i + 1]) + port_bytes)
            try:
                if port != 15000 or pod.admin_port is None:
                    raise ConnectionRefusedError("connection refused")
                upstreams[i] = socket.create_connection(("127.0.0.1", pod.admin_port), timeout=10)
            except OSError as exc:
                send(0x2, bytes([2 * i + 1]) + (f"error forwarding port {port} to pod {pod.uid}, uid : "
                                                f"failed to connect to localhost:{port}: {exc}").encode())

        def pump(i: int, sock: socket.socket) -> None:
            try:
                while True:
                    data = sock.recv(65536)
                    if not data:
                        break
                    send(0x2, bytes([2 * i]) + data)
            except OSError:
                pass
            send(0x8, (1000).to_bytes(2, "big"))

        for i, sock in upstreams.items():
            threading.Thread(target=pump, args=(i, sock), daemon=True).start()
        self.connection.settimeout(30)
        try:
            while True:
                frame = _read_frame(self.rfile)
                if frame is None:
                    break
                opcode, payload = frame
                if opcode == 0x8:
                    send(0x8, payload[:2])
                    break
                if opcode == 0x9:
                    send(0xA, payload)
                    continue
                if opcode in (0x0, 0x1, 0x2) and payload:
                    sock = upstreams.get(payload[0] // 2)
                    if sock is not None and payload[0] % 2 == 0 and len(payload) > 1:
                        sock.sendall(payload[1:])
        except OSError:
            pass
        finally:
            for sock in upstreams.values():
                try:
                    sock.close()
                except OSError:
                    pass


def _read_exact(rfile: Any, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = rfile.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _read_frame(rfile: Any) -> tuple[int, bytes] | None:
    head = _read_exact(rfile, 2)
    if head is None:
        return None
    opcode = head[0] & 0x0F
    masked = head[1] & 0x80
    n = head[1] & 0x7F
    if n == 126:
        ext = _read_exact(rfile, 2)
        if ext is None:
            return None
        n = int.from_bytes(ext, "big")
    elif n == 127:
        ext = _read_exact(rfile, 8)
        if ext is None:
            return None
        n = int.from_bytes(ext, "big")
    mask = _read_exact(rfile, 4) if masked else b"\0\0\0\0"
    payload = _read_exact(rfile, n) if n else b""
    if mask is None or payload is None:
        return None
    if masked:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return opcode, payload


_REQ = re.compile(r"^\s*(?P<neg>!)?(?P<key>[A-Za-z0-9_./-]+)\s*(?:(?P<op>==|=|!=)\s*(?P<val>[A-Za-z0-9_.-]*)"
                  r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?\s*$")


def _selector(text: str) -> Callable[[dict[str, str]], bool]:
    """A label selector (equality, set-based in/notin, existence) as a predicate."""
    parts: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    checks: list[Callable[[dict[str, str]], bool]] = []
    for part in parts:
        m = _REQ.match(part)
        if not m:
            raise ValueError(repr(part))
        key = m["key"]
        if m["op"]:
            val, neg = m["val"], m["op"] == "!="
            checks.append(lambda labels, k=key, v=val, n=neg: (labels.get(k) != v) if n else labels.get(k) == v)
        elif m["setop"]:
            values = {v.strip() for v in m["set"].split(",")}
            inside = m["setop"] == "in"
            checks.append(lambda labels, k=key, vs=values, i=inside: (k in labels and labels[k] in vs) if i
                          else labels.get(k) not in vs)
        else:
            neg = bool(m["neg"])
            checks.append(lambda labels, k=key, n=neg: (k not in labels) if n else k in labels)
    return lambda labels: all(c(labels) for c in checks)


# -- real Envoy as a pod's istio-proxy ------------------------------------------------------------------------
def sidecar_envoy_class() -> type:
    """:class:`EnvoyProcess` that logs to stderr (as istio-proxy does; the runtime reads it), not ``--log-path``."""
    from envoy_dissector.lab.envoy import EnvoyProcess

    class SidecarEnvoy(EnvoyProcess):
        def build_command(self) -> list[str]:
            cmd = super().build_command()
            for flag in ("--log-path", "--file-flush-interval-msec"):
                i = cmd.index(flag)
                del cmd[i:i + 2]
            return cmd

    return SidecarEnvoy


def admin_post(admin_port: int, query: str = "") -> tuple[int, str]:
    """POST /logging[?query] straight to Envoy's admin (not through the stand-in)."""
    conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=10)
    try:
        conn.request("POST", "/logging" + (("?" + query) if query else ""), headers={"Content-Length": "0"})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def admin_levels(admin_port: int) -> dict[str, str]:
    """Envoy's current levels, read directly (Envoy 1.40 answers GET /logging with 405; POST lists)."""
    _, text = admin_post(admin_port)
    levels = {}
    for line in text.split("active loggers:", 1)[-1].splitlines():
        name, sep, level = line.strip().partition(": ")
        if sep:
            levels[name] = level
    return levels


@dataclass
class SidecarPod:
    """One pod whose istio-proxy is a real Envoy (in front of the lab's upstream), behind a running stand-in."""

    api: ApiServerStandIn
    envoy: Any  # SidecarEnvoy
    kubeconfig: Path
    namespace: str
    name: str


@contextmanager
def sidecar_pod(tmp_path: Path, *, namespace: str = "shop", name: str = "web-1") -> Iterator[SidecarPod]:
    """A real Envoy as ``name``'s istio-proxy (``istio-thread`` log format, at warning with http:debug, as a pod
    someone debugged once), its stderr the container log, reachable by ``admin``'s kubeconfig."""
    from envoy_dissector.lab.envoy import EnvoyConfig, EnvoySettings, free_port
    from envoy_dissector.lab.formats import LOG_FORMATS
    from envoy_dissector.lab.upstream import UpstreamServer, UpstreamSettings

    upstream = UpstreamServer(UpstreamSettings(), tmp_path / "upstream.jsonl").start()
    api = ApiServerStandIn(tmp_path / "api").start()
    config = EnvoyConfig(settings=EnvoySettings(log_level="info"), upstream_port=upstream.port,
                         listener_port=free_port(), log_format=LOG_FORMATS["istio-thread"], work_dir=tmp_path / "web")
    envoy = sidecar_envoy_class()(config)
    try:
        log = api.new_log(name).follow(config.stderr_path)
        envoy.start()
        assert admin_post(envoy.admin_port, "level=warning")[0] == 200
        assert admin_post(envoy.admin_port, "paths=http:debug")[0] == 200
        api.add_user("admin", "admin-token")
        api.add_pod(Pod(name=name, namespace=namespace, labels={"app": "web"}, admin_port=envoy.admin_port,
                        containers={"istio-proxy": Container("istio-proxy", log)}))
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", "admin-token", namespace=namespace)
        yield SidecarPod(api, envoy, kubeconfig, namespace, name)
    finally:
        envoy.stop()
        api.stop()
        upstream.stop()
