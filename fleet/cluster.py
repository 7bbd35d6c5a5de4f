"""The fleet's Dask cluster: a local one locked to its owner, or a remote scheduler with the user's credentials.

A Dask scheduler or worker runs whatever a connected client submits, so whoever can connect can run code as
the fleet's user. The local cluster therefore speaks mutual TLS with throwaway credentials
(``Security.temporary()``: a self-signed CA, key and certificate made in memory for this run, never written
to disk) on 127.0.0.1: a process without the run's key cannot finish the handshake, let alone submit.

Dask's scheduler and workers also start an HTTP server (the diagnostics dashboard and its JSON, Prometheus
and call-stack pages) even when no dashboard is asked for: ``dashboard_address=None`` only chooses the
default port (8787 for the scheduler, a random one for a worker). The cluster here uses a scheduler and
worker that keep the HTTP routes in memory and listen on nothing, unless ``dashboard`` is given.
"""
from __future__ import annotations

import ipaddress
import logging
import sys
import weakref
from dataclasses import dataclass
from typing import Any

from dask.system import CPU_COUNT
from distributed import Nanny, Scheduler, SpecCluster, Worker
from distributed.core import Status
from distributed.http.routing import RoutingApplication
from distributed.security import Security
from distributed.worker_memory import parse_memory_limit

from envoy_dissector.parser.errors import UsageError

LOOPBACK = "127.0.0.1"
_LOG = logging.getLogger(__name__)


class _NoHttpMixin:
    """Keeps the node's HTTP routes in memory without a listening socket (see the module docstring)."""

    http_application: RoutingApplication

    def start_http_server(self, routes: Any, dashboard_address: Any, default_port: int = 0,
                          ssl_options: Any = None) -> None:
        self.http_application = RoutingApplication(routes)


class NoHttpScheduler(_NoHttpMixin, Scheduler):
    """A Dask scheduler with no HTTP endpoint."""


class NoHttpWorker(_NoHttpMixin, Worker):
    """A Dask worker with no HTTP endpoint (started inside each nanny's process).

    A heartbeat in flight when the cluster closes may find the scheduler's end of the stream already shut; Dask
    logs that with a traceback although nothing went wrong, so it is dropped once this worker is closing.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        logging.getLogger("distributed.worker").addFilter(ClosingHeartbeatFilter(self))


_CLOSING = frozenset({Status.closing, Status.closed, Status.closing_gracefully})


class ClosingHeartbeatFilter(logging.Filter):
    """Drops the heartbeat failures ``worker`` logs once it is closing; every other record passes."""

    def __init__(self, worker: Worker) -> None:
        super().__init__()
        self._worker = weakref.ref(worker)

    def filter(self, record: logging.LogRecord) -> bool:
        worker = self._worker()
        if worker is None or worker.status not in _CLOSING:
            return True
        return "heartbeat" not in record.getMessage().lower()


def local_cluster(workers: int | None = None, *, dashboard_port: int | None = None) -> SpecCluster:
    """A cluster of ``workers`` processes (one thread each; default: the machine's cores) on 127.0.0.1.

    Mutual TLS with credentials made for this cluster only. ``dashboard_port``: serve Dask's diagnostics
    dashboard on 127.0.0.1 at that port; by default no node has an HTTP endpoint at all.
    """
    try:
        security = Security.temporary()
    except ImportError:
        raise UsageError('fleet: the local cluster\'s TLS needs cryptography: pip install "envoy-dissector[fleet]"'
                         ) from None
    count = workers or CPU_COUNT
    common = {"host": LOOPBACK, "protocol": "tls://", "security": security, "dashboard": False,
              "dashboard_address": None}
    scheduler: dict[str, Any] = {"cls": NoHttpScheduler, "options": {**common, "port": 0}}
    if dashboard_port is not None:
        scheduler = {"cls": Scheduler, "options": {**common, "port": 0, "dashboard": True,
                                                   "dashboard_address": f"{LOOPBACK}:{dashboard_port}"}}
    worker = {"cls": Nanny, "options": {**common, "nthreads": 1, "worker_class": NoHttpWorker,
                                        "memory_limit": parse_memory_limit("auto", 1, count, logger=_LOG)}}
    return SpecCluster(scheduler=scheduler, workers=dict.fromkeys(range(count), worker), worker=worker,
                       security=security)


@dataclass(frozen=True)
class SchedulerCredentials:
    """TLS files for a remote scheduler (as ``dask scheduler --tls-ca-file ... --tls-cert ... --tls-key``)."""

    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None


def remote_security(address: str, credentials: SchedulerCredentials, *,
                    allow_unauthenticated: bool = False) -> Security:
    """The :class:`Security` to reach the scheduler at ``address`` with.

    TLS files given on the command line win; otherwise Dask's own configuration (``distributed.comm.tls``
    in ``~/.config/dask/*.yaml`` or ``DASK_DISTRIBUTED__COMM__TLS__*``) is used as Dask would.

    Raises:
        UsageError: a ``tls://`` address without a CA, client certificate and key; or a plain ``tcp://``
            scheduler off the loopback without ``allow_unauthenticated`` (whoever reaches an
            unauthenticated scheduler runs code in its workers and, through the results, in this process).
    """
    given = (credentials.ca_file, credentials.cert, credentials.key)
    if any(given):
        if not all(given):
            raise UsageError("fleet: --tls-ca-file, --tls-cert and --tls-key go together")
        for option, path in zip(("--tls-ca-file", "--tls-cert", "--tls-key"), given, strict=True):
            try:
                with open(str(path), "rb"):
                    pass
            except OSError as exc:
                raise UsageError(f"fleet: {option} {path}: {exc.strerror or exc}") from None
        security = Security(tls_ca_file=credentials.ca_file, tls_client_cert=credentials.cert,
                            tls_client_key=credentials.key, require_encryption=True)
    else:
        security = Security()
    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme == "tls":
        # Security sets its fields from the configuration at run time (no declared attributes)
        if not (getattr(security, "tls_ca_file", None) and getattr(security, "tls_client_cert", None)):
            raise UsageError(f"fleet: {address} needs --tls-ca-file, --tls-cert and --tls-key "
                             "(or distributed.comm.tls in the Dask configuration)")
        return security
    if security.require_encryption:
        raise UsageError(f"fleet: {address} is not a tls:// address but TLS credentials are configured")
    if not allow_unauthenticated:
        raise UsageError(f"fleet: {address} has no authentication: whoever can reach it can run code as you "
                         "(and in this process); use a tls:// scheduler with --tls-ca-file/--tls-cert/--tls-key,"
                         " or pass --allow-unauthenticated-scheduler on a network you trust")
    where = "this machine" if _is_loopback(address) else "the network"
    print(f"warning: fleet: {address} has no authentication: anyone on {where} who can reach it can run code "
          "in its workers and in this process", file=sys.stderr)
    return security


def _is_loopback(address: str) -> bool:
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
