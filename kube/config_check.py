"""A kubeconfig is checked with bounded reads before the Kubernetes client library reads it.

The library loads YAML with ``yaml.safe_load`` and reads credential files whole. A 1 KB file of nested
anchors ("billion laughs") then expands past gigabytes, a deeply nested one ends in a RecursionError, and
``tokenFile: /dev/zero`` is read forever. Here each kubeconfig is read up to :data:`MAX_CONFIG_BYTES`,
composed by a loader that stops past :data:`MAX_DEPTH` levels, and its node graph is sized with aliases
expanded (at most :data:`MAX_NODES`); the files it names (``tokenFile``, ``client-certificate``,
``client-key``, ``certificate-authority``) must be regular files of at most :data:`MAX_CREDENTIAL_BYTES`.
Any breach is a one-line :class:`KubeConfigError`.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from envoy_dissector.kube.errors import KubeConfigError

MAX_CONFIG_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 1_000_000
MAX_CREDENTIAL_BYTES = 1024 * 1024
#: kubeconfig keys that name a file the library reads whole (under ``users[].user`` / ``clusters[].cluster``)
FILE_KEYS = ("tokenFile", "client-certificate", "client-key", "certificate-authority")


def checked_kubeconfig(path: Path) -> Any:
    """The YAML document of ``path``, read within the bounds above (see the module docstring).

    Raises:
        KubeConfigError: not a regular file, too large, too deep, aliases expanding too far, or naming a
            credential file that is not a regular file or is too large.
    """
    import yaml

    text = _bounded_read(path, MAX_CONFIG_BYTES, f"kubeconfig {path}")
    loader = _bounded_loader()(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            try:
                _expanded_size(node, f"kubeconfig {path}")
            except RecursionError:  # aliases chained into a path deeper than the stack
                raise KubeConfigError(f"kubeconfig {path}: not a valid kubeconfig (aliases nested too deep)"
                                      ) from None
        document = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"kubeconfig {path}: not a valid kubeconfig ({' '.join(str(exc).split())[:200]})"
                              ) from None
    finally:
        loader.dispose()
    check_credential_files(document, path.parent)
    return document


def check_credential_files(document: Any, base: Path) -> None:
    """Every file a user or cluster entry names is a regular file of at most MAX_CREDENTIAL_BYTES (a missing
    one is left to the library, which names it if the entry is used)."""
    if not isinstance(document, dict):
        return
    for section, key in (("users", "user"), ("clusters", "cluster")):
        for entry in document.get(section) or []:
            body = entry.get(key) if isinstance(entry, dict) else None
            if not isinstance(body, dict):
                continue
            for name in FILE_KEYS:
                value = body.get(name)
                if isinstance(value, str) and value:
                    check_credential_file(base / os.path.expanduser(value), f"kubeconfig {name}")


def check_credential_file(path: Path, what: str) -> None:
    try:
        info = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise KubeConfigError(f"{what} {path}: not a regular file")
    if info.st_size > MAX_CREDENTIAL_BYTES:
        raise KubeConfigError(f"{what} {path}: {info.st_size} bytes, more than a credential file holds "
                              f"({MAX_CREDENTIAL_BYTES})")


def _bounded_read(path: Path, limit: int, what: str) -> str:
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise KubeConfigError(f"{what}: not a regular file")
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise KubeConfigError(f"{what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise KubeConfigError(f"{what}: larger than {limit // (1024 * 1024)} MiB; not a kubeconfig")
    return data.decode("utf-8", errors="replace")


def _bounded_loader() -> type:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader whose composer refuses nesting deeper than MAX_DEPTH (before Python's stack runs out)."""

        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep (line {mark.line + 1})")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedLoader


def _expanded_size(root: Any, what: str) -> int:
    """Nodes of the document with every alias expanded; past MAX_NODES (or a cycle) is refused."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise KubeConfigError(f"{what}: not a valid kubeconfig (an alias refers to itself)")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_NODES:
            raise KubeConfigError(f"{what}: not a valid kubeconfig (its aliases expand past {MAX_NODES:,} "
                                  "values: a 'billion laughs' file?)")
        sizes[key] = total
        return total

    return size(root)
