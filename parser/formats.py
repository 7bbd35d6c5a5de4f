"""Known envelope formats, by format id, and their detection from the first lines of a capture."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, get_args

from envoy_dissector.parser.envelope import CONTINUATION
from envoy_dissector.parser.errors import FormatError
from envoy_dissector.parser.foreign import kind_of
from envoy_dissector.parser.logformat import JsonFormat, TextFormat, compile_format

FormatId = Literal["envoy", "istio", "istio-thread", "istio-json", "consul", "custom"]
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
    KnownFormat("istio-json", "Istio JSON with the bare logger as scope (1.9 and older)",
                '{"level":"%l","time":"%Y-%m-%dT%T.%fZ","scope":"%n","msg":"%_"}'),
    # consul-dataplane starts Envoy with its own --log-format (logFormatPlain / logFormatJSON of its proxy manager)
    KnownFormat("consul", "consul-dataplane text", "%Y-%m-%dT%T.%eZ%z [%l] envoy.%n(%t) %v"),
    KnownFormat("consul", "consul-dataplane JSON",
                '{"@timestamp":"%Y-%m-%dT%T.%fZ%z","@module":"envoy.%n","@level":"%l","@message":"%j","thread":%t}'),
)

_CONTINUATION = re.compile(CONTINUATION)


class LowMatchError(FormatError):
    """No known format reads half of the record lines; ``best`` is the one that reads most."""

    def __init__(self, best: Detection, rates: list[str], message: str, **where: object) -> None:
        super().__init__(message, **where)  # type: ignore[arg-type]
        self.best, self.rates = best, rates


@dataclass(frozen=True)
class Detection:
    format_id: FormatId
    label: str
    pattern: str
    match_rate: float

    @property
    def compiled(self) -> TextFormat | JsonFormat:
        return _compiled(self.pattern)


def _json_rate(lines: list[str], keys: dict[str, str], as_text: TextFormat | None = None) -> float:
    """Share of lines that are JSON objects carrying every key of the format, each value of its shape.

    A line that is not valid JSON but matches the pattern read as text (a message with unescaped
    quotes, as Istio 1.9 and older wrote them) counts too: the envelope recovers it.
    """
    wanted = {key: re.compile(pattern) for key, pattern in keys.items()}
    recover = re.compile(as_text.record) if as_text is not None else None
    ok = 0
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: JSON nested past the stack
            obj = None
        if isinstance(obj, dict):
            ok += all(key in obj and _value_matches(pattern, obj[key]) for key, pattern in wanted.items())
        elif obj is None and recover is not None:
            ok += recover.match(line) is not None
    return ok / len(lines)


def _value_matches(pattern: re.Pattern[str], value: object) -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        return False
    return pattern.match(value if isinstance(value, str) else str(value)) is not None


def _rate(compiled: TextFormat | JsonFormat, sample: list[str]) -> float:
    if isinstance(compiled, JsonFormat):
        return _json_rate(sample, compiled.keys, compiled.as_text)
    start = re.compile(compiled.start)
    return sum(1 for line in sample if start.match(line)) / len(sample)


#: A record's first line starts like a log line: a bracket, a digit (a date) or a JSON object. Other lines
#: (indented text, `}`, `policy {`, header-dump lines) continue the record above them.
_MAY_START_RECORD = re.compile(r"^[\[{0-9]")


def _record_heads(lines: list[str]) -> list[str]:
    """Non-blank sample lines that may start a record (not header dumps, `\tthread=` trailers, config dumps,
    nor other programs' lines: pilot-agent's, access logs, kuma-dp's... see ``foreign.py``)."""
    sample = [line for line in lines if line.strip()][:2000]
    heads = [line for line in sample if _MAY_START_RECORD.match(line) and not _CONTINUATION.match(line)
             and kind_of(line) is None]
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
        raise LowMatchError(
            best, rates, "not an Envoy / istio-proxy log in any known format (tried " + ", ".join(rates)
            + "); if Envoy ran with its own --log-format, pass it with --log-format",
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
