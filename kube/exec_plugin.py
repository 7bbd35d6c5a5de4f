"""Exec credential plugins with a time limit, bounded output and errors that never carry credentials.

The Kubernetes client library runs a kubeconfig's ``users[].user.exec`` command without a time limit,
keeps all of its output, and on failure logs the plugin's stderr (often ``password: ...``, a token, a
login URL) through the root logger, where it printed raw. :class:`BoundedExecProvider` takes the
library's place (:func:`install`): the plugin gets :data:`EXEC_TIMEOUT_S` seconds (then it is killed),
at most :data:`MAX_OUTPUT_BYTES` of stdout, and its stderr is never shown — a failure says the command
and its exit status only. The library catches a plugin's failure, logs it and goes on without credentials;
here its ``exec:`` record is kept (:func:`failure`) instead of printed, and the command stops with it as
its one error line (``kube.client.load``; a failed refresh names it in the 401's error). :func:`install`
also puts a filter on the root logger that scrubs every other record the library logs
(``kube.errors.scrub``) and says where it comes from.
"""
from __future__ import annotations

import json
import logging
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from envoy_dissector.kube.errors import scrub

EXEC_TIMEOUT_S = 60.0
MAX_OUTPUT_BYTES = 1024 * 1024
_LIBRARY = str(Path(str(__import__("kubernetes").__file__)).parent)


def install(timeout_s: float = EXEC_TIMEOUT_S) -> None:
    """Use :class:`BoundedExecProvider` for every exec plugin and scrub the library's log records."""
    from kubernetes.config import kube_config

    BoundedExecProvider.timeout_s = timeout_s
    _failures.clear()
    setattr(kube_config, "ExecProvider", BoundedExecProvider)  # noqa: B010 (looked up at each use: no stub)
    root = logging.getLogger()
    if not any(isinstance(f, _ScrubLibraryRecords) for f in root.filters):
        root.addFilter(_ScrubLibraryRecords())
    if not root.handlers:  # what the library's logging.error() would set up (basicConfig), our lines bare
        handler = logging.StreamHandler()
        handler.setFormatter(_LibraryLinesBare(logging.BASIC_FORMAT))
        root.addHandler(handler)


#: the last exec plugin failure the library logged (scrubbed), until the next :func:`install`
_failures: list[str] = []


def failure() -> str | None:
    """The last exec credential plugin failure since :func:`install` (one line, free of credentials)."""
    return _failures[-1] if _failures else None


def _from_library(record: logging.LogRecord) -> bool:
    return record.pathname.startswith(_LIBRARY) or record.name.startswith("kubernetes")


class _ScrubLibraryRecords(logging.Filter):
    """A record logged by the Kubernetes client loses credentials before any handler sees it; an exec plugin's
    failure is kept for the command's error instead of printed."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _from_library(record) and record.getMessage().startswith("exec:"):
            _failures[:] = [scrub(" ".join(record.getMessage().split()))]
            return False
        if _from_library(record) and not getattr(record, "scrubbed", False):
            record.msg = "envoy-dissect: warning: kubernetes client: " + scrub(record.getMessage())
            record.args = None
            record.scrubbed = True
        return True


class _LibraryLinesBare(logging.Formatter):
    """The client library's (scrubbed) lines as they are; any other record in logging's basic format."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage() if getattr(record, "scrubbed", False) else super().format(record)


def _provider_base() -> type:
    from kubernetes.config.exec_provider import ExecProvider

    return ExecProvider  # type: ignore[no-any-return]


class BoundedExecProvider(_provider_base()):  # type: ignore[misc]
    """The library's ExecProvider with :meth:`run` bounded in time and output (see the module docstring)."""

    timeout_s: float = EXEC_TIMEOUT_S

    def run(self, previous_response: Any = None) -> Any:
        from kubernetes.config.config_exception import ConfigException

        interactive = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
        info: dict[str, Any] = {"apiVersion": self.api_version, "kind": "ExecCredential",
                                "spec": {"interactive": interactive}}
        if previous_response:
            info["spec"]["response"] = previous_response
        if self.cluster:
            info["spec"]["cluster"] = self.cluster.value
        self.env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        command = os.path.basename(str(self.args[0]))
        try:
            process = subprocess.Popen(self.args, stdout=subprocess.PIPE,
                                       stderr=None if interactive else subprocess.DEVNULL,
                                       stdin=None if interactive else subprocess.DEVNULL,
                                       cwd=self.cwd, env=self.env, shell=self.shell)
        except OSError as exc:
            raise ConfigException(f"exec: credential plugin {command} could not start: {exc.strerror}") from None
        stdout = _read_bounded(process, self.timeout_s)
        if stdout is None:
            raise ConfigException(f"exec: credential plugin {command} did not answer within {self.timeout_s:g} s "
                                  f"or wrote more than {MAX_OUTPUT_BYTES} bytes; stopped")
        if process.returncode != 0:
            raise ConfigException(f"exec: credential plugin {command} exited with status {process.returncode} "
                                  "(its error output is not shown: it may hold credentials; run it by hand)")
        try:
            data = json.loads(stdout)
        except ValueError:
            raise ConfigException(f"exec: credential plugin {command} did not print JSON") from None
        if not isinstance(data, dict) or any(key not in data for key in ("apiVersion", "kind", "status")):
            raise ConfigException(f"exec: credential plugin {command}: not an ExecCredential")
        if data["apiVersion"] != self.api_version:
            raise ConfigException(f"exec: credential plugin {command}: apiVersion {data['apiVersion']!r} is not "
                                  f"{self.api_version!r}")
        return data["status"]


def _read_bounded(process: subprocess.Popen[bytes], timeout_s: float) -> bytes | None:
    """The process's stdout once it exits, or None (the process killed) past the time or size limit."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    out = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or len(out) > MAX_OUTPUT_BYTES:
                process.kill()
                process.wait()
                process.stdout.close()
                return None
            if selector.select(left):
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                out += chunk
    process.stdout.close()
    try:
        process.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None
    return bytes(out)
