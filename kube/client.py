"""Connect to a cluster (kubeconfig, ``--context``, in-cluster) and resolve the pods to work on.

Configuration is looked up the way ``kubectl`` does: ``--kubeconfig``, else
``$KUBECONFIG`` (a ``:``-separated list), else ``~/.kube/config``, else the
in-cluster service account (``$KUBERNETES_SERVICE_HOST`` + the token mounted in
the pod). The namespace is ``-n``, else the context's, else the service
account's, else ``default``.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from envoy_dissector.kube.config_check import check_credential_file, checked_kubeconfig
from envoy_dissector.kube.deadline import ApiTooSlow, within
from envoy_dissector.kube.errors import (
    KubeConfigError,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    from_api_exception,
    scrub,
)
from envoy_dissector.parser.errors import UsageError

#: Where a pod's service-account credentials are mounted.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Default container: Istio's sidecar.
DEFAULT_CONTAINER = "istio-proxy"

T = TypeVar("T")


@dataclass(frozen=True)
class PodTarget:
    """One pod/container to read logs from or to capture on."""

    name: str
    namespace: str
    container: str
    phase: str | None = None
    restart_count: int | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        """``POD/CONTAINER``: what the parser reports as ``origin`` for this pod's lines."""
        return f"{self.name}/{self.container}"


@dataclass
class Kube:
    """An API client bound to one cluster and namespace, with bounded timeouts."""

    api_client: Any  # kubernetes.client.ApiClient
    namespace: str
    server: str
    source: str
    """Where the configuration came from (kubeconfig path(s) or ``in-cluster``)."""
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    @property
    def timeout(self) -> tuple[float, float]:
        """``_request_timeout`` for every call: (connect, read) seconds."""
        return (self.connect_timeout_s, self.read_timeout_s)

    def call(self, api_method: Callable[..., T], *args: Any, what: str, **kwargs: Any) -> T:
        """``api_method(*args, **kwargs)`` with this client's timeouts, given up after the connect and read
        timeouts together however slowly the server sends (:func:`~envoy_dissector.kube.deadline.within`)."""
        return within(self.connect_timeout_s + self.read_timeout_s, what,
                      lambda: api_method(*args, _request_timeout=self.timeout, **kwargs))

    def api_error(self, exc: Exception, *, verb: str, resource: str, purpose: str,
                  name: str | None = None) -> KubeError:
        return from_api_exception(exc, verb=verb, resource=resource, namespace=self.namespace,
                                  purpose=purpose, name=name, server=self.server)

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:
            pass


def _kubeconfig_paths(explicit: str | None) -> tuple[str | None, list[Path]]:
    """(the string to hand the client, the paths that exist)."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise KubeConfigError(f"--kubeconfig {explicit}: no such file")
        return str(path), [path]
    env = os.environ.get("KUBECONFIG", "")
    candidates = [Path(p).expanduser() for p in env.split(os.pathsep) if p] if env else []
    if not candidates:
        candidates = [Path("~/.kube/config").expanduser()]
    existing = [p for p in candidates if p.is_file()]
    if not existing:
        return None, []
    return os.pathsep.join(str(p) for p in existing), existing


def load(*, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None,
         connect_timeout_s: float = 10.0, read_timeout_s: float = 60.0,
         service_account_dir: Path | None = None, exec_timeout_s: float = 60.0) -> Kube:
    """Build a :class:`Kube` from kubeconfig / context / in-cluster configuration.

    Each kubeconfig is checked with bounded reads first (:mod:`~envoy_dissector.kube.config_check`), and exec
    credential plugins run with ``exec_timeout_s`` and errors free of their output
    (:mod:`~envoy_dissector.kube.exec_plugin`).

    Raises:
        KubeConfigError: nothing usable found, or the kubeconfig/context is invalid.
    """
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    from envoy_dissector.kube.exec_plugin import failure as exec_plugin_failure
    from envoy_dissector.kube.exec_plugin import install as install_exec_plugin_bounds

    service_account_dir = service_account_dir or SERVICE_ACCOUNT_DIR
    install_exec_plugin_bounds(exec_timeout_s)
    configuration = client.Configuration()
    config_file, existing = _kubeconfig_paths(kubeconfig)
    for path in existing:
        checked_kubeconfig(path)
    ns_from_config: str | None = None
    if config_file is not None:
        try:
            config.load_kube_config(config_file=config_file, context=context,
                                    client_configuration=configuration, persist_config=False)
            contexts, current = config.list_kube_config_contexts(config_file=config_file)
        except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as exc:
            where = ", ".join(str(p) for p in existing)
            text = " ".join(str(exc).split()) if str(exc).strip() else exc.__class__.__name__
            text = f"not a valid kubeconfig ({text[:200]})" if isinstance(exc, yaml.YAMLError) else text
            raise KubeConfigError(f"kubeconfig {where}: {text}") from exc
        if (failed := exec_plugin_failure()) is not None:  # the library went on without credentials
            raise KubeForbidden(f"no credentials: {failed}")
        chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else current
        if chosen:
            ns_from_config = (chosen.get("context") or {}).get("namespace")
        source = ", ".join(str(p) for p in existing)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context:
            raise KubeConfigError(f"--context {context}: no kubeconfig found, and the in-cluster "
                                  "configuration has no contexts")
        check_credential_file(service_account_dir / "token", "service account token")
        try:
            loader = config.incluster_config.InClusterConfigLoader(
                token_filename=str(service_account_dir / "token"),
                cert_filename=str(service_account_dir / "ca.crt"))
            loader.load_and_set(configuration)
        except ConfigException as exc:
            raise KubeConfigError(f"in-cluster configuration: {exc}") from exc
        ns_file = service_account_dir / "namespace"
        if ns_file.is_file():
            ns_from_config = ns_file.read_text().strip() or None
        source = "in-cluster"
    else:
        raise KubeConfigError(
            "no Kubernetes configuration: no --kubeconfig given, $KUBECONFIG is unset or names no file, "
            "~/.kube/config does not exist, and this is not a pod ($KUBERNETES_SERVICE_HOST unset)")
    api_client = client.ApiClient(configuration)
    return Kube(api_client=api_client, namespace=namespace or ns_from_config or "default",
                server=scrub(configuration.host), source=source, connect_timeout_s=connect_timeout_s,
                read_timeout_s=read_timeout_s)


def _container_names(pod: Any) -> tuple[list[str], list[str]]:
    spec = pod.spec
    containers = [c.name for c in (spec.containers or [])] if spec else []
    init = [c.name for c in (spec.init_containers or [])] if spec else []
    return containers, init


def _restart_count(pod: Any, container: str) -> int | None:
    status = pod.status
    for statuses in (getattr(status, "container_statuses", None), getattr(status, "init_container_statuses", None)):
        for cs in statuses or []:
            if cs.name == container:
                return int(cs.restart_count)
    return None


def _describe_containers(containers: list[str], init: list[str]) -> str:
    text = "containers: " + (", ".join(containers) or "none")
    if init:
        text += "; init containers: " + ", ".join(init)
    return text


def resolve_pods(kube: Kube, names: list[str], selector: str | None, container: str,
                 warn: Any = None) -> list[PodTarget]:
    """The pods named, or matching ``selector``, that have ``container``.

    A named pod without the container is an error; with a selector such pods are
    skipped (``warn`` is told) and it is an error only if none is left. Native
    sidecars (Istio's ``istio-proxy`` as an init container with
    ``restartPolicy: Always``) count as containers.

    Raises:
        UsageError: both or neither of names and selector.
        KubeNotFound: pod missing, no match, or container missing.
        KubeForbidden / KubeError: the API refused or failed.
    """
    if names and selector:
        raise UsageError("give pod names or -l SELECTOR, not both")
    if not names and not selector:
        raise UsageError("give one or more pod names or -l SELECTOR")
    core = kube.core
    pods: list[Any] = []
    if selector:
        try:
            listed = kube.call(core.list_namespaced_pod, kube.namespace, label_selector=selector,
                               what="listing pods")
        except ApiTooSlow:
            raise
        except Exception as exc:
            raise kube.api_error(exc, verb="list", resource="pods", purpose="to find the pods matching -l") from None
        pods = sorted(listed.items or [], key=lambda p: p.metadata.name)
        if not pods:
            raise KubeNotFound(f"no pod in namespace {kube.namespace} matches -l {selector}")
    else:
        seen: set[str] = set()
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            try:
                pods.append(kube.call(core.read_namespaced_pod, name, kube.namespace, what=f"reading pod {name}"))
            except ApiTooSlow:
                raise
            except Exception as exc:
                from kubernetes.client.exceptions import ApiException

                if isinstance(exc, ApiException) and exc.status == 404:
                    raise KubeNotFound(f'pod "{name}" not found in namespace {kube.namespace}') from None
                raise kube.api_error(exc, verb="get", resource="pods", purpose="to look the pod up",
                                     name=name) from None
    targets: list[PodTarget] = []
    skipped: list[str] = []
    for pod in pods:
        name = pod.metadata.name
        containers, init = _container_names(pod)
        if container not in containers and container not in init:
            message = (f'pod "{name}" in namespace {kube.namespace} has no container "{container}" '
                       f"({_describe_containers(containers, init)})")
            if not selector:
                raise KubeNotFound(message)
            skipped.append(name)
            if warn:
                warn(message + "; skipped")
            continue
        targets.append(PodTarget(name=name, namespace=kube.namespace, container=container,
                                 phase=getattr(pod.status, "phase", None),
                                 restart_count=_restart_count(pod, container),
                                 labels=dict(pod.metadata.labels or {})))
    if not targets:
        raise KubeNotFound(f'none of the {len(skipped)} pod(s) matching -l {selector} in namespace '
                           f'{kube.namespace} has a container "{container}" ({", ".join(skipped)})')
    return targets
