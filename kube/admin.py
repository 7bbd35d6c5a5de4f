"""Envoy's admin ``/logging`` endpoint (port 15000 in Istio) reached through the API server.

Two transports, tried in this order by :func:`connect` (``--via auto``):

1. the pod **proxy subresource**: ``POST /api/v1/namespaces/NS/pods/NAME:15000/proxy/logging?...``
   (plain HTTP from the API server to the pod IP; RBAC ``create`` on ``pods/proxy``);
2. a **port-forward** to port 15000 over a websocket (``kubernetes.stream.portforward``; RBAC
   ``create`` on ``pods/portforward``), as ``istioctl proxy-config log`` does. Istio binds the
   admin to ``127.0.0.1:15000`` inside the pod, so there the proxy path gets "connection
   refused" (HTTP 502/503 from the API server) and the port-forward is what works.

Envoy 1.40 answers ``GET /logging`` with 405; ``POST /logging`` without parameters
lists the levels (``active loggers:`` then ``  name: level`` lines) and changes
nothing, so levels are read with POST (GET is tried if POST is refused with 405).
"""
from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, Final, Protocol
from urllib.parse import urlencode

from envoy_dissector.kube.client import Kube, PodTarget
from envoy_dissector.kube.deadline import ApiTooSlow, within
from envoy_dissector.kube.errors import (
    KubeError,
    KubeForbidden,
    KubeNotFound,
    LevelRestoreError,
    status_message,
    unreachable,
)

ADMIN_PORT: Final = 15000
LEVELS: Final = ("trace", "debug", "info", "warning", "error", "critical", "off")
_LEVEL_LINE = re.compile(
    r"^\s+(?P<name>[^\s:][^\s]*?):\s+(?P<level>trace|debug|info|warning|warn|error|critical|off)\s*$")
_WS_LOCK = threading.Lock()


class AdminUnavailable(KubeError):
    """This transport cannot reach the admin port (another transport may)."""

    def __init__(self, message: str, *, forbidden: KubeForbidden | None = None) -> None:
        super().__init__(message)
        self.forbidden = forbidden


class Transport(Protocol):
    name: str

    def request(self, method: str, path: str, query: list[tuple[str, str]]) -> tuple[int, str]:
        """One HTTP request to Envoy's admin; returns (status, body text)."""


def _api_status(body: bytes, content_type: str | None) -> dict[str, Any] | None:
    """The Kubernetes ``Status`` object if the API server (not Envoy) produced this response."""
    if not body.lstrip().startswith(b"{"):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, dict) and data.get("kind") == "Status":
        return data
    return None


class PodProxy:
    """``/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH?QUERY`` through the client's own ApiClient."""

    name = "pods/proxy"

    def __init__(self, kube: Kube, target: PodTarget, port: int = ADMIN_PORT) -> None:
        self.kube, self.target, self.port = kube, target, port

    def request(self, method: str, path: str, query: list[tuple[str, str]]) -> tuple[int, str]:
        ac = self.kube.api_client
        params = ac.param_serialize(
            method, "/api/v1/namespaces/{namespace}/pods/{name}/proxy/{path}",
            path_params={"namespace": self.target.namespace, "name": f"{self.target.name}:{self.port}",
                         "path": path},
            query_params=list(query), header_params={"Accept": "*/*"}, auth_settings=["BearerToken"])
        def send() -> Any:
            resp = ac.call_api(*params, _request_timeout=self.kube.timeout)
            return resp, resp.read() or b""

        try:
            resp, body = within(self.kube.connect_timeout_s + self.kube.read_timeout_s,
                                f"Envoy's admin of {self.target.origin}", send)
        except ApiTooSlow:
            raise
        except Exception as exc:
            raise unreachable(exc, self.kube.server) from None
        status = int(resp.status)
        if status >= 400:
            api = _api_status(body, resp.headers.get("content-type"))
            if api is not None or status in (401, 403):
                message = status_message(body)
                verb = "get" if method == "GET" else "create"
                if status == 401:
                    raise KubeForbidden("unauthorized: the API server rejected your credentials")
                if status == 403:
                    from envoy_dissector.kube.errors import forbidden

                    err = forbidden(verb, "pods/proxy", self.target.namespace,
                                    "to change Envoy's log level", message)
                    raise AdminUnavailable(str(err), forbidden=err)
                raise AdminUnavailable(f"pod proxy to {self.target.name}:{self.port} failed: HTTP {status} "
                                       f"{message or ''}".rstrip())
        return status, body.decode("utf-8", "replace")


class PortForward:
    """A websocket port-forward to the pod's admin port, one per request (like ``istioctl``)."""

    name = "pods/portforward"

    def __init__(self, kube: Kube, target: PodTarget, port: int = ADMIN_PORT) -> None:
        self.kube, self.target, self.port = kube, target, port

    def _open(self) -> Any:
        import websocket
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        # portforward() swaps api_client.call_api while it runs: use a private ApiClient.
        api = client.CoreV1Api(client.ApiClient(self.kube.api_client.configuration))
        with _WS_LOCK:  # websocket-client takes its connect timeout from a process-wide default
            old = websocket.getdefaulttimeout()
            websocket.setdefaulttimeout(self.kube.connect_timeout_s + self.kube.read_timeout_s)
            try:
                return portforward(api.connect_get_namespaced_pod_portforward, self.target.name,
                                   self.target.namespace, ports=str(self.port))
            except ApiException as exc:
                raise self._handshake_error(exc) from None
            except Exception as exc:
                raise AdminUnavailable(f"port-forward to {self.target.name}:{self.port} failed: {exc}") from None
            finally:
                websocket.setdefaulttimeout(old)

    def _handshake_error(self, exc: Any) -> KubeError:
        reason = str(getattr(exc, "reason", "") or exc)
        match = re.search(r"Handshake status (\d+)", reason)
        status = int(match.group(1)) if match else None
        body = reason.rsplit("-+-+-", 1)[-1].strip() if "-+-+-" in reason else ""
        if body.startswith(("b'", 'b"')):
            body = body[2:-1].encode().decode("unicode_escape", "replace")
        message = status_message(body) if body else None
        if status == 401:
            return KubeForbidden("unauthorized: the API server rejected your credentials")
        if status == 403:
            from envoy_dissector.kube.errors import forbidden

            err = forbidden("create", "pods/portforward", self.target.namespace,
                            "to port-forward to Envoy's admin port", message)
            return AdminUnavailable(str(err), forbidden=err)
        if status == 404:
            return KubeNotFound(message or f'pod "{self.target.name}" not found')
        if status is None:
            return AdminUnavailable(f"port-forward to {self.target.name}:{self.port} failed: {reason[:300]}")
        return AdminUnavailable(f"port-forward to {self.target.name}:{self.port} failed: HTTP {status} "
                                f"{message or ''}".rstrip())

    def request(self, method: str, path: str, query: list[tuple[str, str]]) -> tuple[int, str]:
        """One request through a new port-forward, the websocket handshake and the whole response within
        the request timeout (websocket-client's and the socket's timeouts bound each read only: a server
        sending a byte a second would stretch them without end)."""
        opened: list[Any] = []

        def exchange() -> tuple[int, str]:
            opened.append(self._open())
            return self._exchange(opened[0], method, path, query)

        try:
            return within(self.kube.connect_timeout_s + self.kube.read_timeout_s,
                          f"Envoy's admin of {self.target.origin} (port-forward)", exchange)
        except ApiTooSlow:
            for pf in opened:  # the library's proxy thread still reads the websocket: end it
                _shut_down(pf.websocket.sock)
                pf.close()
            raise

    def _exchange(self, pf: Any, method: str, path: str, query: list[tuple[str, str]]) -> tuple[int, str]:
        sock = pf.socket(self.port)
        try:
            sock.settimeout(self.kube.read_timeout_s)
            target = "/" + path + ("?" + urlencode(query) if query else "")
            sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
                         "Content-Length: 0\r\nConnection: close\r\n\r\n".encode("ascii"))
            resp = http.client.HTTPResponse(sock, method=method)
            try:
                resp.begin()
                body = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                error = pf.error(self.port)
                raise AdminUnavailable(f"port-forward to {self.target.name}:{self.port}: "
                                       f"{(error or str(exc) or exc.__class__.__name__).strip()}") from None
            return int(resp.status), body.decode("utf-8", "replace")
        finally:
            sock.close()


def _shut_down(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def parse_levels(text: str) -> dict[str, str]:
    """``{logger: level}`` from the admin's ``active loggers:`` listing."""
    levels: dict[str, str] = {}
    listing = text.split("active loggers:", 1)[1] if "active loggers:" in text else text
    for line in listing.splitlines():
        match = _LEVEL_LINE.match(line)
        if match:
            levels[match["name"]] = "warning" if match["level"] == "warn" else match["level"]
    return levels


class EnvoyAdmin:
    """Read, raise and restore one Envoy's log levels over a :class:`Transport`."""

    def __init__(self, target: PodTarget, transport: Transport) -> None:
        self.target, self.transport = target, transport

    def _post(self, query: list[tuple[str, str]]) -> tuple[int, str]:
        return self.transport.request("POST", "logging", query)

    def levels(self) -> dict[str, str]:
        status, text = self._post([])
        if status == 405:
            status, text = self.transport.request("GET", "logging", [])
        levels = parse_levels(text)
        if status >= 400 or not levels:
            raise KubeError(f"{self.target.origin}: port {ADMIN_PORT} did not answer like Envoy's admin "
                            f"/logging (HTTP {status}: {text.strip()[:120]!r})")
        return levels

    def set_all(self, level: str) -> None:
        status, text = self._post([("level", level)])
        if status >= 400:
            raise KubeError(f"{self.target.origin}: Envoy refused level={level} (HTTP {status}: "
                            f"{text.strip().splitlines()[0] if text.strip() else ''})")

    def restore(self, before: dict[str, str]) -> dict[str, str]:
        """Put every logger back to its level in ``before``; returns the levels read afterwards.

        One ``level=`` for the most common level, then ``paths=a:l,b:l`` for the
        others (Envoy >= 1.25 accepts it for named loggers), else one ``?name=level``
        per logger. Verified by reading the levels again.

        Raises:
            LevelRestoreError: some logger is not back at its level.
        """
        if not before:
            return {}
        base = Counter(before.values()).most_common(1)[0][0]
        self.set_all(base)
        others = {name: lvl for name, lvl in before.items() if lvl != base}
        if others:
            status, _ = self._post([("paths", ",".join(f"{n}:{lvl}" for n, lvl in others.items()))])
            if status >= 400:
                for name, lvl in others.items():
                    self._post([(name, lvl)])
        after = self.levels()
        wrong = {n: (lvl, after.get(n)) for n, lvl in before.items() if after.get(n) != lvl}
        if wrong:
            shown = ", ".join(f"{n} is {now} (was {was})" for n, (was, now) in list(wrong.items())[:5])
            raise LevelRestoreError(f"{self.target.origin}: log levels not restored: {shown}; " + manual_restore_hint(
                self.target, before))
        return after


def manual_restore_hint(target: PodTarget, before: dict[str, str]) -> str:
    """The command that puts the levels back by hand."""
    if not before:
        return f"run: istioctl proxy-config log {target.name} -n {target.namespace} --level info"
    base = Counter(before.values()).most_common(1)[0][0]
    others = ",".join(f"{n}:{lvl}" for n, lvl in before.items() if lvl != base)
    level_arg = base + ("," + others if others else "")
    return f"run: istioctl proxy-config log {target.name} -n {target.namespace} --level {level_arg}"


def summarize_levels(levels: dict[str, str]) -> dict[str, int]:
    return dict(Counter(levels.values()).most_common())


def connect(kube: Kube, target: PodTarget, via: str = "auto",
            note: Callable[[str], None] | None = None) -> tuple[EnvoyAdmin, dict[str, str]]:
    """Reach ``target``'s admin and read its levels: the working transport and the levels.

    ``via``: ``proxy``, ``port-forward`` or ``auto`` (proxy, then port-forward if the
    proxy is forbidden or cannot reach the port).

    Raises:
        KubeForbidden: every transport tried was forbidden (names each missing permission).
        KubeError: no transport reached the admin port.
    """
    order: list[Transport]
    if via == "proxy":
        order = [PodProxy(kube, target)]
    elif via == "port-forward":
        order = [PortForward(kube, target)]
    else:
        order = [PodProxy(kube, target), PortForward(kube, target)]
    failures: list[AdminUnavailable] = []
    for transport in order:
        admin = EnvoyAdmin(target, transport)
        try:
            levels = admin.levels()
        except AdminUnavailable as exc:
            failures.append(exc)
            if note and transport is not order[-1]:
                note(f"{target.origin}: {transport.name} did not work ({exc}); trying a port-forward")
            continue
        return admin, levels
    forbids = [f.forbidden for f in failures if f.forbidden is not None]
    if forbids and len(forbids) == len(failures):
        if len(forbids) == 1:
            raise forbids[0]
        lacks = " and ".join(re.search(r"lacks ('[^']+' on '[^']+')", str(f)).group(1)  # type: ignore[union-attr]
                             for f in forbids)
        raise KubeForbidden(f"forbidden: your account lacks {lacks} in namespace {target.namespace} "
                            "(one of them is needed to change Envoy's log level); see docs/kubernetes.md")
    raise KubeError(f"{target.origin}: cannot reach Envoy's admin port {ADMIN_PORT}: "
                    + "; ".join(str(f) for f in failures))
