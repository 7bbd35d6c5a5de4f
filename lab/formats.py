"""Envoy ``--log-format`` strings used by the lab, by name.

The strings are passed to Envoy verbatim as one argv element, so the Istio
formats carry real TAB characters (not backslash-t). Envoy renders ``%Y ... %f``
in the process' local time; the lab therefore runs Envoy with ``TZ=UTC`` so the
trailing ``Z`` of the Istio formats is true.

>>> resolve_log_format("istio-thread")[1].split("\\t")[-1]
'thread=%t'
>>> resolve_log_format("%v")
('user', '%v')
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Final

from envoy_dissector.parser.errors import UsageError
from envoy_dissector.parser.formats import KNOWN_FORMATS


def _known(label: str) -> str:
    """The pattern of the parser's known format with this label (the parser's catalogue is the one owner)."""
    for known in KNOWN_FORMATS:
        if known.label == label:
            return known.pattern
    raise LookupError(f"parser/formats.py has no known format labelled {label!r}")


#: Named ``--log-format`` strings (name -> Envoy/spdlog pattern): the parser's known formats by a short name,
#: plus a user-defined example the detector must not know.
LOG_FORMATS: Final = MappingProxyType({
    "envoy": _known("Envoy default (milliseconds)"),
    "envoy-us": _known("Envoy default, microseconds"),
    "istio": _known("Istio 1.6-1.16 text"),
    "istio-thread": _known("Istio 1.17+ text (caller and thread)"),
    "istio-json": _known("Istio JSON"),  # Istio 1.17+ --log_as_json
    "istio-json-old": _known("Istio JSON without caller and thread (1.10-1.16)"),
    # A user-defined example: pipe-separated, short level.
    "custom": "%Y-%m-%d %T.%f|%t|%L|%n|%v",
})

#: Format name the lab uses when none is given.
DEFAULT_LOG_FORMAT: Final = "istio-thread"


def resolve_log_format(name_or_string: str) -> tuple[str, str]:
    """Turn a format name or a raw ``--log-format`` string into ``(name, string)``.

    A known name maps to its string. Anything containing ``%`` is taken as a
    raw Envoy pattern; its name is the matching known name if the string is one
    of ours, else ``"user"``. The two characters backslash-t in a raw string
    are turned into a TAB (convenient on a shell command line).

    Args:
        name_or_string: a key of :data:`LOG_FORMATS` or an Envoy log pattern.

    Returns:
        ``(name, pattern)``.

    Raises:
        UsageError: neither a known name nor a pattern.
    """
    if name_or_string in LOG_FORMATS:
        return name_or_string, LOG_FORMATS[name_or_string]
    if "%" in name_or_string:
        pattern = name_or_string.replace("\\t", "\t")
        for name, known in LOG_FORMATS.items():
            if known == pattern:
                return name, known
        return "user", pattern
    known_names = ", ".join(LOG_FORMATS)
    raise UsageError(f"unknown log format {name_or_string!r}; use one of {known_names} "
                     "or an Envoy --log-format pattern containing '%'")
