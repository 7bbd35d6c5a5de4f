"""Compile an Envoy ``--log-format`` (spdlog pattern + Envoy flags) into a record parser.

A text format becomes two regular expressions: ``start`` recognises the first
physical line of a record (everything up to ``%v``), ``record`` splits a whole
folded record (``(?s)``, so multi-line header dumps stay in the message and a
suffix such as Istio's ``\\tthread=%t`` is found after the dump). A JSON format
(pattern starting with ``{``) becomes a key -> sub-pattern table read with
JSON path lookups.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from envoy_dissector.parser.errors import UsageError

# Envelope field names produced by the flags (regex group names).
_LEVELS = r"trace|debug|info|warning|warn|error|critical|off"
FLAG_PATTERNS: dict[str, str] = {
    "Y": r"(?P<Y>[0-9]{4})",
    "m": r"(?P<mo>[0-9]{2})",
    "d": r"(?P<d>[0-9]{2})",
    "H": r"(?P<H>[0-9]{2})",
    "M": r"(?P<Mi>[0-9]{2})",
    "S": r"(?P<S>[0-9]{2})",
    "T": r"(?P<H>[0-9]{2}):(?P<Mi>[0-9]{2}):(?P<S>[0-9]{2})",
    "e": r"(?P<frac_ms>[0-9]{3})",
    "f": r"(?P<frac_us>[0-9]{6})",
    "F": r"(?P<frac_ns>[0-9]{9})",
    "z": r"(?P<tz>[+-][0-9]{2}:?[0-9]{2}|Z)",
    "t": r"(?P<thread>[0-9]+)",
    "P": r"[0-9]+",
    "l": rf"(?P<level>{_LEVELS})",
    "L": r"(?P<level_short>[TDIWECO])",
    "n": r"(?P<logger>[^\s\[\]]+?)",
    "g": r"(?P<source_file>[^\s:\[\]]+)",
    "s": r"(?P<source_file>[^\s:\[\]]+)",
    "#": r"(?P<source_line>[0-9]+)",
    "@": r"(?P<source_file>[^\s:\[\]]+):(?P<source_line>[0-9]+)",
    "!": r"[^\s]*",
    "v": r"(?P<message>.*)",
    "_": r"(?P<message>.*)",
    "j": r"(?P<message>.*)",
    "^": "",
    "$": "",
}
MESSAGE_FLAGS = frozenset("v_j")
_FLAG = re.compile(r"%(-?\d*)(.)")
_RUST_META = set("\\.+*?()|[]{}^$#&-~")


#: Flags of constant width, with the groups they produce as (group, offset, width).
FIXED_FLAGS: dict[str, tuple[int, tuple[tuple[str, int, int], ...]]] = {
    "Y": (4, (("Y", 0, 4),)), "m": (2, (("mo", 0, 2),)), "d": (2, (("d", 0, 2),)), "H": (2, (("H", 0, 2),)),
    "M": (2, (("Mi", 0, 2),)), "S": (2, (("S", 0, 2),)), "T": (8, (("H", 0, 2), ("Mi", 3, 2), ("S", 6, 2))),
    "e": (3, (("frac_ms", 0, 3),)), "f": (6, (("frac_us", 0, 6),)), "F": (9, (("frac_ns", 0, 9),)),
    "^": (0, ()), "$": (0, ()),
}


def group_names(regex: str) -> list[str]:
    """The named groups of a regex, in order."""
    return re.findall(r"\(\?P<(\w+)>", regex)


def plain(regex: str) -> str:
    """The same regex with its named groups made non-capturing."""
    return re.sub(r"\(\?P<\w+>", "(?:", regex)


class Head(NamedTuple):
    width: int  # characters
    nbytes: int  # UTF-8 bytes (flags are ASCII digits; literals may not be ASCII)
    fields: tuple[tuple[str, int, int], ...]  # (group, offset in characters, width)


def fixed_head(pattern: str) -> Head:
    """Width and fields of the pattern's leading run of literals and constant-width flags.

    >>> fixed_head("[%Y-%m-%d %T.%e][%t] %v")
    Head(width=26, nbytes=26, fields=(('Y', 1, 4), ('mo', 6, 2), ('d', 9, 2), ('H', 12, 2), ('Mi', 15, 2), \
('S', 18, 2), ('frac_ms', 21, 3)))
    """
    width = nbytes = 0
    fields: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    pos = 0
    for m in _FLAG.finditer(pattern):
        literal = pattern[pos : m.start()]
        width += len(literal)
        nbytes += len(literal.encode())
        pos = m.end()
        flag = m.group(2)
        if flag == "%":
            width += 1
            nbytes += 1
            continue
        if flag not in FIXED_FLAGS or m.group(1):
            return Head(width, nbytes, tuple(fields))
        size, groups = FIXED_FLAGS[flag]
        for name, offset, w in groups:
            if name not in seen:
                fields.append((name, width + offset, w))
                seen.add(name)
        width += size
        nbytes += size
    return Head(width, nbytes, tuple(fields))


def rust_escape(text: str) -> str:
    """Escape for Rust's ``regex`` crate (and Python's ``re``): only metacharacters."""
    return "".join("\\" + c if c in _RUST_META else c for c in text)


@dataclass(frozen=True)
class TextFormat:
    """A compiled text log format."""

    pattern: str
    start: str  # regex for a record's first physical line (prefix up to the message)
    record: str  # regex for a folded record, (?s); the reference the fast split agrees with
    prefix: str  # `start` with the whole prefix also captured as `prefix__`
    suffix: str | None  # regex for what follows the message at the end of a record (e.g. `\tthread=%t`)
    fields: frozenset[str]  # envelope fields it can produce
    message_escaping: str  # "none" | "newlines" (%_) | "json" (%j)
    #: the fixed-width start of every record (e.g. ``%Y-%m-%dT%T.%fZ``): its width in characters and the
    #: fields in it as (group, offset, width); the envelope slices those instead of running the regex
    head_width: int = 0
    head: tuple[tuple[str, int, int], ...] = ()
    head_bytes: int = 0  # the head's width in UTF-8 bytes (its fields are ASCII digits)

    # Derived once per format (formats are cached per pattern), read for every chunk.
    @cached_property
    def start_plain(self) -> str:
        """``start`` without capture groups: finding where the message begins needs no captures."""
        return plain(self.start)

    @cached_property
    def suffix_plain(self) -> str | None:
        return plain(self.suffix) if self.suffix is not None else None

    @cached_property
    def prefix_can_be_empty(self) -> bool:
        return re.match(self.start, "") is not None


@dataclass(frozen=True)
class JsonFormat:
    """A compiled JSON log format: JSON key -> regex applied to that key's value."""

    pattern: str
    keys: dict[str, str] = field(default_factory=dict)
    fields: frozenset[str] = frozenset()
    #: keys whose whole value is fixed-width (e.g. ``%Y-%m-%dT%T.%fZ``): its width and fields, sliced
    #: instead of matched by the key's regex when a value has exactly that width
    fixed: dict[str, Head] = field(default_factory=dict)

    @cached_property
    def as_text(self) -> TextFormat | None:
        """The pattern read as text, for lines that are not valid JSON because the message was not
        JSON-escaped (``%v``/``%_`` inside quotes: a quote in the message ends the string early).
        None when the message is ``%j`` (then an invalid line is a broken line)."""
        if '"%j"' in self.pattern:
            return None
        return compile_text_format(self.pattern)


def _compile_parts(pattern: str) -> tuple[list[str], set[str], str, bool]:
    """Returns regex pieces, fields, message flag, and whether the message was seen."""
    pieces: list[str] = []
    fields: set[str] = set()
    seen_groups: set[str] = set()
    message_flag = ""
    pos = 0
    for m in _FLAG.finditer(pattern):
        pieces.append(rust_escape(pattern[pos : m.start()]))
        pos = m.end()
        flag = m.group(2)
        if flag == "%":
            pieces.append("%")
            continue
        if flag not in FLAG_PATTERNS:
            raise UsageError(f"log format {pattern!r}: unsupported flag %{flag}")
        piece = FLAG_PATTERNS[flag]
        # A group name may appear once per regex: later repeats become back-references-free copies.
        for name in group_names(piece):
            if name in seen_groups:
                piece = piece.replace(f"(?P<{name}>", "(?:")
            seen_groups.add(name)
            fields.add(name)
        if flag in MESSAGE_FLAGS:
            message_flag = flag
        pieces.append(piece)
    pieces.append(rust_escape(pattern[pos:]))
    return pieces, fields, message_flag, bool(message_flag)


def compile_text_format(pattern: str) -> TextFormat:
    """Compile a spdlog/Envoy text pattern.

    >>> f = compile_text_format("[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] %v")
    >>> sorted(f.fields)[:4]
    ['H', 'Mi', 'S', 'Y']
    """
    pieces, fields, message_flag, has_message = _compile_parts(pattern)
    if not has_message:
        raise UsageError(f"log format {pattern!r} has no message flag (%v, %_ or %j)")
    idx = next(i for i, p in enumerate(pieces) if "(?P<message>" in p)
    prefix = "".join(pieces[:idx])
    suffix = "".join(pieces[idx + 1 :])
    start = "^" + prefix
    if suffix:
        record = "(?s)^" + prefix + r"(?P<message>.*?)(?:" + suffix + r")?\n?$"
    else:
        record = "(?s)^" + prefix + r"(?P<message>.*?)\n?$"
    escaping = {"v": "none", "_": "newlines", "j": "json"}[message_flag]
    prefix_re = "^(?P<prefix__>" + prefix + ")"
    head = fixed_head(pattern)
    return TextFormat(pattern, start, record, prefix_re, ("(?:" + suffix + r")\n?$") if suffix else None,
                      frozenset(fields), escaping, head.width, head.fields, head.nbytes)


_JSON_PAIR = re.compile(r'"(?P<key>[^"]+)"\s*:\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>%\w))')


def compile_json_format(pattern: str) -> JsonFormat:
    """Compile a JSON pattern such as Istio's ``{"level":"%l","time":"%Y-%m-%dT%T.%fZ",...}``."""
    keys: dict[str, str] = {}
    fields: set[str] = set()
    fixed: dict[str, Head] = {}
    for m in _JSON_PAIR.finditer(pattern):
        value = m.group("quoted") if m.group("quoted") is not None else m.group("bare")
        if "%" not in value:
            continue
        pieces, sub_fields, _, _ = _compile_parts(value)
        keys[m.group("key")] = "(?s)^" + "".join(pieces) + "$"
        fields |= sub_fields
        whole = whole_width(value)
        if whole is not None:
            fixed[m.group("key")] = whole
    if "message" not in fields:
        raise UsageError(f"JSON log format {pattern!r} has no message flag (%v, %_ or %j)")
    return JsonFormat(pattern, keys, frozenset(fields), fixed)


def whole_width(pattern: str) -> Head | None:
    """The head of a pattern made only of literals and constant-width flags (its width covers it all).

    >>> whole_width("%Y-%m-%dT%T.%fZ").width, whole_width("envoy %n")
    (27, None)
    """
    flags = list(_FLAG.finditer(pattern))
    if not flags or any(m.group(1) or m.group(2) not in FIXED_FLAGS for m in flags):
        return None
    head = fixed_head(pattern)
    tail = pattern[flags[-1].end():]
    return Head(head.width + len(tail), head.nbytes + len(tail.encode()), head.fields)


def compile_format(pattern: str) -> TextFormat | JsonFormat:
    if pattern.lstrip().startswith("{"):
        return compile_json_format(pattern)
    return compile_text_format(pattern)
