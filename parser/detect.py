"""Which wrappers and which envelope format a file has, decided together from its first lines.

Wrapper regexes are loose on their own (``grep -n``'s ``123-`` also matches the ``2021-`` of an Istio
timestamp; ``kubectl --timestamps`` matches Istio's own leading time when its tabs became spaces), so
every chain of wrappers the sample carries is tried, each followed by format detection: the chain with
the best match rate wins, and on equal rates the shorter one. When no chain reaches half of the lines,
the Envoy envelope is searched anywhere in the lines and what precedes it becomes a ``prefix`` wrapper.
When nothing works, the error quotes the first line that fails and says what it looks like.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from envoy_dissector.parser.envelope import CONTINUATION
from envoy_dissector.parser.errors import FormatError
from envoy_dissector.parser.foreign import ENVOY_MARK, count_kinds, kind_of
from envoy_dissector.parser.formats import KNOWN_FORMATS, Detection, LowMatchError
from envoy_dissector.parser.logformat import TextFormat, plain
from envoy_dissector.parser.wrappers import AnyWrapper, applicable, detect_wrappers, generic_prefix, strip_sample

Choose = Callable[[list[str]], Detection]
#: lines of the sample the wrapper search looks at (the chosen chain is then judged on the whole sample)
SEARCH_LINES = 400
MAX_DEPTH = 4
_CONTINUATION = re.compile(CONTINUATION)


@dataclass(frozen=True)
class Found:
    detection: Detection
    wrappers: tuple[AnyWrapper, ...]

    @property
    def wrapper_ids(self) -> list[str]:
        return [w.id for w in self.wrappers]


def detect(sample: list[str], choose: Choose, *, source: str = "input") -> Found:
    """Wrappers and format of a file whose first lines are ``sample`` (``choose`` detects a format).

    Raises:
        FormatError: no chain of wrappers lets a format match half of the record lines; the message
            quotes the first line that fails and hints at the likely cause.
    """
    head = _head(sample)
    if not head:
        raise FormatError("no log lines to detect a format from", path=source)
    direct = _judge(head, (), choose)
    if direct is not None and _explains(head, direct.detection):
        best: Found | None = direct  # a bare capture (the common case): no wrapper search
    else:
        best = _search(head, choose)
    if best is not None and best.detection.format_id == "custom":
        return _judge(sample, best.wrappers, choose) or best  # the user named the format: no threshold
    if best is None or best.detection.match_rate < 0.5:
        anywhere = _envelope_anywhere(head, best.wrappers if best is not None else ())
        if anywhere is not None:
            alt = _judge(head, (*anywhere[0], anywhere[1]), choose)
            if alt is not None and (best is None or alt.detection.match_rate > best.detection.match_rate):
                best = alt
    if best is None or best.detection.match_rate < 0.5:
        raise _failure(sample, choose, best, source)
    final = _judge(sample, best.wrappers, choose)  # the whole sample, not the search's head
    if final is None or final.detection.match_rate < 0.5:
        raise _failure(sample, choose, best, source)
    return final


def _head(sample: list[str]) -> list[str]:
    """The lines the wrapper search looks at: non-blank, foreign lines (pilot-agent's, access logs, a paste's
    prompt and elisions: ``foreign.py``) left out, from a little before the first line that holds an Envoy mark
    (a sidecar's log starts with hundreds of pilot-agent lines, wrapped or not)."""
    blank_free = [line for line in sample if line.strip()]
    lines = [line for line in blank_free if kind_of(line) is None] or blank_free  # (a --log-format may look foreign)
    first = next((i for i, line in enumerate(lines) if ENVOY_MARK.search(line)), 0)
    return lines[max(0, first - 20):][:SEARCH_LINES]


def _explains(lines: list[str], detection: Detection, share: float = 0.98) -> bool:
    """Whether the format alone reads (nearly) every line: record starts, dump lines, thread trailers."""
    compiled = detection.compiled
    if detection.match_rate < 0.99:
        return False
    if not isinstance(compiled, TextFormat):  # JSON: every line an object of the format (rate counts them)
        return all(line.startswith("{") for line in lines)
    start = re.compile(compiled.start)
    read = sum(1 for line in lines if start.match(line) or _CONTINUATION.match(line))
    return read >= share * len(lines)


def _judge(lines: list[str], wrappers: Sequence[AnyWrapper], choose: Choose) -> Found | None:
    try:
        return Found(choose(strip_sample(lines, wrappers)), tuple(wrappers))
    except FormatError:
        return None


def _search(head: list[str], choose: Choose) -> Found | None:
    best: Found | None = None

    def better(a: Found, b: Found | None) -> bool:
        if b is None:
            return True
        if abs(a.detection.match_rate - b.detection.match_rate) > 1e-9:
            return a.detection.match_rate > b.detection.match_rate
        # Equal rates: a wrapper that most lines carry and whose removal costs the format nothing is real
        # (its prefix sat on lines the format does not judge, e.g. dump lines after a stern prefix).
        return len(a.wrappers) > len(b.wrappers)

    def visit(lines: list[str], chain: tuple[AnyWrapper, ...]) -> None:
        nonlocal best
        found = _judge(lines, (), choose)
        if found is not None:
            found = Found(found.detection, chain)
            if better(found, best):
                best = found
        if len(chain) >= MAX_DEPTH:
            return
        for w in applicable(lines, (c.id for c in chain)):
            visit(w.strip_sample(lines), (*chain, w))

    visit(head, ())
    return best


def _envelope_anywhere(head: list[str],
                       chain: Sequence[AnyWrapper]) -> tuple[tuple[AnyWrapper, ...], AnyWrapper] | None:
    """A ``prefix`` wrapper when most lines hold a known envelope after text no known wrapper reads."""
    lines = strip_sample(head, chain)
    starts = [line for line in lines if not _CONTINUATION.match(line)] or lines
    for known in KNOWN_FORMATS:
        compiled = known.compiled
        if not isinstance(compiled, TextFormat):
            finder = re.compile(r'\{"level":')
        else:
            finder = re.compile(plain(compiled.start)[1:])
        prefixes = []
        for line in starts:
            m = finder.search(line)
            if m is not None and m.start() > 0:
                prefixes.append(line[: m.start()])
        if len(prefixes) >= 0.5 * len(starts):
            wrapper = generic_prefix(prefixes)
            if wrapper is not None:
                return tuple(chain), wrapper
    return None


# What a sample looks like when no format matches: (test over the sample, hint).
_TABS_AS_SPACES = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+Z {2,}")
_PIPE_PREFIX = re.compile(r"^[^\s|]+\s+\| ")
_ACCESS_LOG = re.compile(r'"(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH|CONNECT) [^"]* HTTP/[\d.]+" \d{3}|'
                         r'"(?:method|response_code|upstream_host|downstream_remote_address)"\s*:')
_ENVOY_MESSAGE = re.compile(r'\[C\d+\]|\[Tags: \\?"ConnectionId|\]\[(?:trace|debug|info|warning|error)\]\['
                            r'|\benvoy (?:http|router|connection|pool|client|upstream|main)\b')
_NO_TIMESTAMP = re.compile(r"^\[\d+\]\[(?:trace|debug|info|warning|error|critical)\]\[")
#: Istio's columns with the time (and the level) cut off, e.g. by `awk` or a viewer: `debug envoy http<tab>[C1] ...`
_ISTIO_WITHOUT_TIME = re.compile(r"^(?:(?:trace|debug|info|warning|warn|error|critical)[ \t]+)?envoy [a-z_0-9.]+\t")


def hints(lines: list[str]) -> list[str]:
    """What ``lines`` look like, for a message about lines no format reads."""
    sample = [line for line in lines if line.strip()]
    n = max(1, len(sample))

    def share(pattern: re.Pattern[str], search: bool = False) -> float:
        return sum(1 for line in sample if (pattern.search(line) if search else pattern.match(line))) / n

    found = []
    if share(_NO_TIMESTAMP) > 0.3:
        found.append("the lines carry no timestamp ([thread][level][logger] only): nothing can be timed; "
                     "capture with Envoy's default --log-format or Istio's")
    if share(_ISTIO_WITHOUT_TIME) > 0.3:
        found.append("the lines carry no timestamp (Istio's columns without the time): nothing can be timed; "
                     "capture whole lines (`kubectl logs POD -c istio-proxy`, no `cut`/`awk`)")
    if share(_TABS_AS_SPACES) > 0.3:
        found.append("tabs converted to spaces? (an Istio log pasted through a web page or chat)")
    if share(_PIPE_PREFIX) > 0.3:
        found.append("a `svc  | ` prefix on every line? (docker compose output)")
    if share(_ACCESS_LOG, search=True) > 0.3:
        found.append("this looks like an access log (one line per request), not Envoy's trace/debug log; raise "
                     "the level with `istioctl proxy-config log POD --level trace` and read the proxy's own log")
    if not found and share(_ENVOY_MESSAGE, search=True) > 0.3:
        found.append("the lines hold Envoy messages in an unknown layout: pass the --log-format Envoy was "
                     "started with (--log-format STRING)")
    if sum(line.count("\ufffd") for line in sample) > n:
        found.append("not text: binary, or compressed with something other than gzip?")
    return found


def malformed_hints(lines: list[str]) -> list[str]:
    """What the malformed lines of an accepted capture look like (``lines``: a sample of them)."""
    sample = [line for line in lines if line.strip()]
    if not sample:
        return []
    n = len(sample)
    found = []
    if sum(1 for line in sample if _ACCESS_LOG.search(line)) > 0.3 * n:
        found.append("access-log lines (Envoy writes them to the same stream); they carry no trace records")
    if sum(1 for line in sample if _TABS_AS_SPACES.match(line)) > 0.3 * n:
        found.append("tabs converted to spaces? (part of the file was pasted through a web page or chat)")
    if sum(1 for line in sample if _PIPE_PREFIX.match(line)) > 0.3 * n:
        found.append("a `svc  | ` prefix? (docker compose output of another service)")
    return found


def _failure(sample: list[str], choose: Choose, best: Found | None, source: str) -> FormatError:
    """The error for a file no format reads: the first line the likeliest format fails on, and hints."""
    stripped = strip_sample(sample, best.wrappers) if best is not None else sample
    fmt = best.detection.compiled if best is not None else None
    rates: list[str] = []
    try:
        choose(stripped)
    except LowMatchError as exc:
        rates = exc.rates
        if exc.best.match_rate > 0:
            fmt = exc.best.compiled  # the likeliest format: the first line it does not read is the culprit
    except FormatError:
        pass
    line_no, text = _first_failing(sample, stripped, fmt)
    found_hints = hints(sample)
    message = "not an Envoy / istio-proxy log" + (": " + "; ".join(found_hints) if found_hints else "")
    without_envoy = _no_envoy_line(stripped if best is not None else _unwrapped_for_kinds(sample))
    if without_envoy:  # what the file is says more than the formats it is not
        message = "not an Envoy / istio-proxy log: " + without_envoy
        return FormatError(message, path=source, line=line_no, expected="an Envoy log line", found=text[:200])
    if rates:
        message += " (tried " + ", ".join(rates) + ")"
    if best is not None and best.wrappers:
        message += " (after removing " + ", ".join(w.id for w in best.wrappers) + ")"
    if not any("--log-format" in h for h in found_hints):
        message += "; if Envoy ran with its own --log-format, pass it with --log-format"
    return FormatError(message, path=source, line=line_no, expected="an Envoy log line", found=text[:200])


def _unwrapped_for_kinds(sample: list[str]) -> list[str]:
    """``sample`` without the wrappers most lines carry, peeled as far as shows the most foreign lines (the greedy
    chain may peel one too many: ``grep``'s ``123-`` also reads the ``2021-`` of a time)."""
    chain = detect_wrappers(sample)
    tries = [strip_sample(sample, chain[:depth]) for depth in range(len(chain) + 1)]
    return max(tries, key=lambda lines: sum(count_kinds(lines).values()))


_KIND_HINTS = {
    "pilot-agent": "istio-proxy's pilot-agent output: Envoy logged nothing at its level; raise it with "
                   "`istioctl proxy-config log POD --level trace` and capture again",
    "access-log": "an access log (one line per request), not Envoy's trace/debug log; raise the level with "
                  "`istioctl proxy-config log POD --level trace` and read the proxy's own log",
}


def _no_envoy_line(lines: list[str]) -> str:
    """What the lines are when none is Envoy's and most are known foreign lines ("" otherwise)."""
    sample = [line for line in lines if line.strip()]
    if not sample or any(ENVOY_MARK.search(line) for line in sample):
        return ""
    kinds = count_kinds(sample)
    if sum(kinds.values()) < 0.5 * len(sample):
        return ""
    other = len(sample) - sum(kinds.values())
    parts = [f"{kind} {n}" for kind, n in kinds.most_common()] + ([f"other {other}"] if other else [])
    text = f"no Envoy line in its first {len(sample)} lines, which are " + ", ".join(parts)
    hint = _KIND_HINTS.get(kinds.most_common(1)[0][0])
    return text + (f" ({hint})" if hint else "")


def _first_failing(sample: list[str], stripped: list[str], fmt: object) -> tuple[int, str]:
    """(line number, raw text) of the first non-blank record-like line the format does not read."""
    start = re.compile(fmt.start) if isinstance(fmt, TextFormat) else None
    for i, (raw, line) in enumerate(zip(sample, stripped)):
        if not line.strip() or _CONTINUATION.match(line):
            continue
        if start is None or not start.match(line):
            return i + 1, raw
    first = next((i for i, line in enumerate(sample) if line.strip()), 0)
    return first + 1, sample[first] if sample else ""
