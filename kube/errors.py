"""Errors of the Kubernetes commands, and the mapping of API failures onto them.

Every failure becomes one line naming what was attempted; a 403 names the RBAC
verb and resource that is missing (taken from the API server's message, or
from the call we made when the message cannot be read).
"""
from __future__ import annotations

import json
import re
from typing import Any

from envoy_dissector.parser.errors import DissectorError, ExitCode


class KubeError(DissectorError):
    """The cluster could not be used: no configuration, unreachable API server, unexpected API answer.

    The message never carries credentials: user:password in a URL and token-like query values are
    replaced by ``[redacted]`` (``scrub``).
    """

    exit_code = ExitCode.KUBE

    def __init__(self, message: str = "") -> None:
        super().__init__(scrub(message))


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@'\"]*@")
_SECRET_WORDS = re.compile(r"(?i)\b((?:token|password|passwd|secret|bearer|authorization|api[-_]?key)"
                           r"[\"']?\s*[:=]\s*[\"']?(?:bearer\s+|basic\s+)?|bearer\s+|basic\s+)[^\s,;&'\")]+")


def scrub(text: str) -> str:
    """``text`` without credentials: URL user info, ``token=...``/``password: ...``/``Bearer ...`` values."""
    text = _URL_USERINFO.sub(r"\1[redacted]@", text)
    return _SECRET_WORDS.sub(r"\1[redacted]", text)


class KubeConfigError(KubeError):
    """No usable kubeconfig / context / in-cluster configuration."""

    exit_code = ExitCode.KUBE


class KubeForbidden(KubeError):
    """401/403 from the API server (credentials rejected, or an RBAC permission missing)."""

    exit_code = ExitCode.KUBE_FORBIDDEN


class KubeNotFound(KubeError):
    """Pod, container, previous container instance, or label-selector match not found."""

    exit_code = ExitCode.KUBE_NOT_FOUND


class NoTraceLines(KubeError):
    """The fetched container logs hold no trace-level lines (not Envoy, or trace not on)."""

    exit_code = ExitCode.NO_TRACE_LINES


class LevelRestoreError(KubeError):
    """Envoy's log levels could not be put back as they were; the message says how to do it by hand."""

    exit_code = ExitCode.LEVEL_RESTORE


_FORBIDDEN_RE = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<ns>[^"]*)")?')


def status_message(body: Any) -> str | None:
    """The ``message`` of a Kubernetes ``Status`` body (JSON text or bytes), else the text itself."""
    if body is None:
        return None
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = str(body).strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300] or None
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return text[:300] or None


def forbidden(verb: str, resource: str, namespace: str, purpose: str, message: str | None) -> KubeForbidden:
    """A :class:`KubeForbidden` naming the missing RBAC ``verb`` on ``resource``.

    The verb/resource/user come from the API server's message when it has the
    usual form (``User "u" cannot get resource "pods/log" ... in the namespace "ns"``).
    """
    user = None
    if message:
        match = _FORBIDDEN_RE.search(message)
        if match:
            verb, resource = match["verb"], match["resource"]
            namespace = match["ns"] or namespace
            user = match["user"]
    who = f'your account ({user})' if user else "your account"
    return KubeForbidden(f"forbidden: {who} lacks '{verb}' on '{resource}' in namespace {namespace} "
                         f"(needed {purpose}); see docs/kubernetes.md for a Role that grants it")


def from_api_exception(exc: Exception, *, verb: str, resource: str, namespace: str, purpose: str,
                       name: str | None = None, server: str | None = None) -> KubeError:
    """Map a ``kubernetes.client.ApiException`` (or a transport error) to a one-line :class:`KubeError`.

    ``verb``/``resource``/``purpose`` describe the call that failed, e.g.
    ``("get", "pods/log", "to read the sidecar's log")``.
    """
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        status = exc.status
        message = status_message(exc.body)
        if status == 401:
            from envoy_dissector.kube.exec_plugin import failure as exec_plugin_failure

            why = exec_plugin_failure() or "expired token or wrong context?"  # a refresh's plugin failed
            return KubeForbidden(f"unauthorized: the API server rejected your credentials ({why})")
        if status == 403:
            return forbidden(verb, resource, namespace, purpose, message)
        what = f"{resource} {name}" if name else resource
        if status == 404:
            return KubeNotFound(message or f"{what} not found in namespace {namespace}")
        if status == 400 and message and ("not found" in message or "not valid" in message):
            # e.g. 'previous terminated container "istio-proxy" in pod "web-1" not found'
            return KubeNotFound(message)
        return KubeError(f"{verb} {what} in namespace {namespace} failed: HTTP {status} "
                         f"{message or exc.reason or ''}".rstrip())
    return unreachable(exc, server)


def unreachable(exc: BaseException, server: str | None) -> KubeError:
    """The API server did not answer (connection refused, timeout, TLS...)."""
    reason = exc.__class__.__name__
    inner = getattr(exc, "reason", None)
    if inner is not None:
        reason = f"{reason}: {inner}"
    else:
        reason = f"{reason}: {exc}"
    return KubeError(f"cannot reach the API server{f' at {server}' if server else ''} ({reason[:300]})")
