"""Known envelope formats, by format id, and their detection from the first lines of a capture."""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

from envoy_dissector.parser.envelope import CONTINUATION
from envoy_dissector.parser.errors import FormatError
from envoy_dissector.parser.logformat import JsonFormat, TextFormat, compile_format

FormatId = Literal["envoy", "istio", "istio-thread", "istio-json", "custom"]
#: every format id, in FormatId's order (command-line choices are derived from it)
FORMAT_IDS: tuple[FormatId, ...] = get_args(FormatId)


@dataclass(frozen=True)
class KnownFormat:
    id: FormatId
    label: str
    pattern: str

    @property
    def compiled(self) -> TextFormat | JsonFormat:
        return _compiled(self.pattern)


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> TextFormat | JsonFormat:
    return compile_format(pattern)


#: Tried in this order; the first with the best match rate wins.
KNOWN_FORMATS: tuple[KnownFormat, ...] = (
    KnownFormat("istio-thread", "Istio 1.17+ text (caller and thread)",
                "%Y-%m-%dT%T.%fZ\t%l\tenvoy %n %g:%#\t%v\tthread=%t"),
    KnownFormat("istio", "Istio 1.6-1.16 text", "%Y-%m-%dT%T.%fZ\t%l\tenvoy %n\t%v"),
    KnownFormat("istio", "Istio text with a caller column before the scope",
                "%Y-%m-%dT%T.%fZ\t%l\t%g:%#\tenvoy %n\t%v"),
    KnownFormat("envoy", "Envoy default, microseconds", "[%Y-%m-%d %T.%f][%t][%l][%n] [%g:%#] %v"),
    KnownFormat("envoy", "Envoy default (milliseconds)", "[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] %v"),
    KnownFormat("envoy", "Envoy default without source location", "[%Y-%m-%d %T.%e][%t][%l][%n] %v"),
    KnownFormat("istio-json", "Istio JSON",
                '{"level":"%l","time":"%Y-%m-%dT%T.%fZ","scope":"envoy %n","caller":"%g:%#","msg":"%j","thread":%t}'),
    KnownFormat("istio-json", "Istio JSON without caller and thread (1.10-1.16)",
                '{"level":"%l","time":"%Y-%m-%dT%T.%fZ","scope":"envoy %n","msg":"%j"}'),
)

_CONTINUATION = re.compile(CONTINUATION)
_JSON_LIKE = re.compile(r'^\{.*"(?:msg|message)"\s*:')


@dataclass(frozen=True)
class Detection:
    format_id: FormatId
    label: str
    pattern: str
    match_rate: float

    @property
    def compiled(self) -> TextFormat | JsonFormat:
        return _compiled(self.pattern)


def _json_rate(lines: list[str], keys: Iterable[str]) -> float:
    """Share of lines that are JSON objects carrying every key of the format."""
    wanted = set(keys)
    ok = 0
    for line in lines:
        if not _JSON_LIKE.match(line):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        ok += isinstance(obj, dict) and wanted <= obj.keys()
    return ok / len(lines)


def _rate(compiled: TextFormat | JsonFormat, sample: list[str]) -> float:
    if isinstance(compiled, JsonFormat):
        return _json_rate(sample, compiled.keys)
    start = re.compile(compiled.start)
    return sum(1 for line in sample if start.match(line)) / len(sample)


def _record_heads(lines: list[str]) -> list[str]:
    """Non-blank sample lines, without those that continue a record (header dumps, `\tthread=` trailers)."""
    sample = [line for line in lines if line.strip()][:2000]
    heads = [line for line in sample if not _CONTINUATION.match(line)]
    return heads or sample


def detect_format(lines: list[str], *, source: str = "input", only: str | None = None) -> Detection:
    """Pick the envelope format that parses most of ``lines`` (wrappers already stripped).

    Raises:
        FormatError: nothing reaches half of the sample; the message lists what was tried.
    """
    # Header-dump lines and `\tthread=` trailers continue a record: judge record-start lines only
    # (a request with 30 headers has more dump lines than record lines).
    sample = _record_heads(lines)
    if not sample:
        raise FormatError("no log lines to detect a format from", path=source)
    best: Detection | None = None
    rates = []
    for known in KNOWN_FORMATS:
        if only is not None and known.id != only:
            continue
        rate = _rate(known.compiled, sample)
        rates.append(f"{known.label} {rate:.0%}")
        if best is None or rate > best.match_rate:
            best = Detection(known.id, known.label, known.pattern, rate)
    assert best is not None
    if best.match_rate < 0.5:
        raise FormatError(
            "not an Envoy / istio-proxy log in any known format; tried " + ", ".join(rates)
            + " — pass --format/--log-format if it uses a custom --log-format",
            path=source, line=1, expected="an Envoy log line", found=sample[0][:120],
        )
    return best


def custom_detection(pattern: str, lines: list[str] | None = None) -> Detection:
    """A user-given ``--log-format``; ``match_rate`` is measured on ``lines`` when given."""
    sample = _record_heads(lines) if lines is not None else []
    rate = _rate(_compiled(pattern), sample) if sample else 1.0
    return Detection("custom", f"custom --log-format {pattern!r}", pattern, rate)


def detection_by_id(format_id: str) -> Detection:
    for known in KNOWN_FORMATS:
        if known.id == format_id:
            return Detection(known.id, known.label, known.pattern, 1.0)
    raise FormatError(f"unknown format {format_id!r}; choose one of "
                      + ", ".join(sorted({k.id for k in KNOWN_FORMATS})) + ", or give a --log-format string")
