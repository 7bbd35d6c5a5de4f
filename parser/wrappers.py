"""What tools put around each physical log line, found per file and removed before the envelope is read.

A wrapper is text before the Envoy envelope that some tool added (``kubectl logs --prefix``, docker
compose's ``svc-1  | ``, stern's ``POD CONTAINER ``, journald's ``Dec 16 23:11:22 host unit[pid]: ``,
``grep -n``'s ``123:``...), a JSON object holding the line (docker's json-file driver, log shippers),
or a rewrite of the line itself (ANSI colours, Istio's tabs turned into runs of spaces by a paste).
Wrappers that name a pod/container (or service, or grepped file) become the record's ``origin``; a
wrapper timestamp becomes ``wrapper_ts_us`` (used when the format itself has none).

Each wrapper has two implementations that agree: ``strip_sample`` (Python, on the detection sample)
and ``apply`` (polars, on every line). Which wrappers a file has is decided together with its format
(``parser/detect.py``): a wrapper is kept only when the format then matches more lines.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import polars as pl

from envoy_dissector.parser.logformat import rust_escape

KUBECTL_PREFIX = r"\[pod/(?P<pod>[^/\]\s]+)/(?P<container>[^\]\s]+)\] "
KUBECTL_TIMESTAMP = r"(?P<kts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)) "
_K8S_NAME = r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?"
_TIME = r"[0-9]{2}:[0-9]{2}:[0-9]{2}"


@dataclass(frozen=True)
class Wrapper:
    """A wrapper read with one anchored regex: the match is removed from the start of the line.

    ``origin``: the groups naming where the line came from, joined with ``/`` (pod/container...).
    ``timestamp``: a group holding an RFC 3339 timestamp.
    """

    id: str
    regex: str
    origin: tuple[str, ...] = ()
    timestamp: str | None = None
    #: share of sample lines the regex must match for the wrapper to be tried
    min_share: float = 0.5

    @property
    def anchored(self) -> str:
        return "^(?:" + self.regex + ")"

    def matches(self, line: str) -> bool:
        return _re(self.anchored).match(line) is not None

    def strip_sample(self, lines: Sequence[str]) -> list[str]:
        pattern = _re(self.anchored)
        return [pattern.sub("", line, count=1) for line in lines]

    def apply(self, lines: pl.DataFrame) -> pl.DataFrame:
        raw = pl.col("raw")
        if self.origin or self.timestamp:
            parts = raw.str.extract_groups(self.anchored)
            groups = (*self.origin, *([self.timestamp] if self.timestamp else []))
            cols = {f"_w_{g}": parts.struct.field(g) for g in groups}
            lines = lines.with_columns_seq(**cols)
            if self.origin:
                lines = _set_origin(lines, pl.concat_str([pl.col(f"_w_{g}") for g in self.origin], separator="/"))
            if self.timestamp:
                ts = pl.col(f"_w_{self.timestamp}").str.to_datetime(time_unit="ns", time_zone="UTC", strict=False)
                lines = lines.with_columns_seq(wrapper_ts_us=pl.coalesce(ts.dt.epoch("us"), pl.col("wrapper_ts_us")))
            lines = lines.drop(cols.keys())
        return lines.with_columns_seq(raw=raw.str.replace(self.anchored, ""))


@dataclass(frozen=True)
class Rewrite:
    """A wrapper that rewrites parts of the line (``regex`` -> ``replacement``, applied in order)."""

    id: str
    rules: tuple[tuple[str, str], ...]  # (regex, replacement with $1-style groups)
    #: the sample must hold this share of lines the rules change
    min_share: float = 0.3
    origin: tuple[str, ...] = field(default=())

    def matches(self, line: str) -> bool:
        return any(_re(regex).search(line) for regex, _ in self.rules)

    def strip_sample(self, lines: Sequence[str]) -> list[str]:
        out = list(lines)
        for regex, replacement in self.rules:
            pattern, py = _re(regex), _python_replacement(replacement)
            out = [pattern.sub(py, line) for line in out]
        return out

    def apply(self, lines: pl.DataFrame) -> pl.DataFrame:
        raw = pl.col("raw")
        for regex, replacement in self.rules:
            raw = raw.str.replace_all(regex, replacement) if not regex.startswith("^") else raw.str.replace(
                regex, replacement)
        return lines.with_columns_seq(raw=raw)


@dataclass(frozen=True)
class JsonWrapper:
    """One JSON object per line holding the Envoy line under ``key`` (docker json-file, log shippers).

    ``origin``: JSON paths (dotted) naming the pod and container; ``timestamp``: the path of an
    RFC 3339 time. Lines that are not such an object are left as they are.
    """

    id: str
    key: str
    origin: tuple[str, ...] = ()
    timestamp: str | None = None
    #: a key the object must also have (docker's json-file always writes ``stream``)
    requires: str | None = None
    min_share: float = 0.5

    def matches(self, line: str) -> bool:
        obj = _json_object(line)
        return (obj is not None and isinstance(obj.get(self.key), str)
                and (self.requires is None or self.requires in obj))

    def strip_sample(self, lines: Sequence[str]) -> list[str]:
        out = []
        for line in lines:
            obj = _json_object(line)
            value = obj.get(self.key) if obj is not None else None
            out.append(_chomp(value) if isinstance(value, str) else line)
        return out

    def apply(self, lines: pl.DataFrame) -> pl.DataFrame:
        raw = pl.col("raw")
        is_obj = raw.str.starts_with("{")
        value = raw.str.json_path_match(_path(self.key))
        lines = lines.with_columns_seq(_w_value=pl.when(is_obj).then(value))
        if self.origin:
            parts = [raw.str.json_path_match(_path(p)) for p in self.origin]
            lines = _set_origin(lines, pl.when(is_obj & pl.col("_w_value").is_not_null()).then(
                pl.concat_str(parts, separator="/")))
        if self.timestamp:
            ts = raw.str.json_path_match(_path(self.timestamp)).str.to_datetime(
                time_unit="ns", time_zone="UTC", strict=False).dt.epoch("us")
            lines = lines.with_columns_seq(wrapper_ts_us=pl.coalesce(pl.when(is_obj).then(ts), pl.col("wrapper_ts_us")))
        chomped = pl.col("_w_value").str.strip_suffix("\n").str.strip_suffix("\r")
        return lines.with_columns_seq(raw=pl.coalesce(chomped, raw)).drop("_w_value")


AnyWrapper = Wrapper | Rewrite | JsonWrapper


def _set_origin(lines: pl.DataFrame, here: pl.Expr) -> pl.DataFrame:
    """``origin`` from the wrapper where it names one. A line without the wrapper (a tool that prefixes
    only some lines, a paste that cut the first prefix) belongs to the origin of the line above it."""
    if lines.select_seq(here.is_null().all()).item():
        return lines
    named = here.forward_fill().backward_fill()
    return lines.with_columns_seq(origin=pl.coalesce(named, pl.col("origin")))


def _path(dotted: str) -> str:
    return "$" + "".join(f"['{part}']" for part in dotted.split("."))


def _chomp(value: str) -> str:
    return value.removesuffix("\n")


def _json_object(line: str) -> dict | None:  # type: ignore[type-arg]
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: JSON nested past the stack
        return None
    return obj if isinstance(obj, dict) else None


_COMPILED: dict[str, re.Pattern[str]] = {}


def _re(regex: str) -> re.Pattern[str]:
    pattern = _COMPILED.get(regex)
    if pattern is None:
        pattern = _COMPILED[regex] = re.compile(regex)
    return pattern


def _python_replacement(replacement: str) -> str:
    return re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", replacement)


# Istio text (``TS\tlevel\tenvoy logger[ caller]\tmessage[\tthread=N]``) whose tabs became spaces.
_ISO = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T" + _TIME + r"\.[0-9]+Z"
_LEVEL = r"trace|debug|info|warning|warn|error|critical|off"
TABS_AS_SPACES = Rewrite("tabs-as-spaces", (
    (rf"^({_ISO}) +({_LEVEL}) +(envoy [^\s]+ [^\s]+:[0-9]+) +", "${1}\t${2}\t${3}\t"),  # Istio 1.17+
    (rf"^({_ISO}) +({_LEVEL}) +([^\s]+:[0-9]+) +(envoy [^\s]+) +", "${1}\t${2}\t${3}\t${4}\t"),  # caller column
    (rf"^({_ISO}) +({_LEVEL}) +(envoy [^\s]+) +", "${1}\t${2}\t${3}\t"),  # Istio 1.6-1.16
    (r"(^|[^\s]) +thread=([0-9]+)$", "${1}\tthread=${2}"),
    (r"^ +thread=([0-9]+)$", "\tthread=${1}"),
), min_share=0.1)

ANSI_COLOURS = Rewrite("ansi-colours", ((r"\x1b\[[0-9;]*[A-Za-z]", ""),), min_share=0.05)

#: Every wrapper the detector tries, outermost kinds first (order only breaks ties).
WRAPPERS: tuple[AnyWrapper, ...] = (
    ANSI_COLOURS,
    Wrapper("markdown-quote", r">(?: |$)"),  # a paste quoted in markdown (`> ` on every line)
    JsonWrapper("docker-json", "log", timestamp="time", requires="stream"),
    JsonWrapper("json-log", "log", origin=("kubernetes.pod_name", "kubernetes.container_name"), timestamp="time"),
    JsonWrapper("json-message", "message", origin=("kubernetes.pod_name", "kubernetes.container_name"),
                timestamp="timestamp"),
    JsonWrapper("json-msg", "msg", origin=("kubernetes.pod_name", "kubernetes.container_name")),
    JsonWrapper("json-textPayload", "textPayload",
                origin=("resource.labels.pod_name", "resource.labels.container_name"), timestamp="timestamp"),
    JsonWrapper("json-line", "line", origin=("labels.pod", "labels.container"), timestamp="timestamp"),
    JsonWrapper("json-MESSAGE", "MESSAGE"),  # journalctl -o json
    Wrapper("kubectl-prefix", KUBECTL_PREFIX, origin=("pod", "container")),
    # Grafana's log export: epoch milliseconds, the entry's RFC 3339 time, the line (tab-separated)
    Wrapper("grafana-export", r"[0-9]{10,19}\t(?P<gts>[0-9]{4}-[0-9]{2}-[0-9]{2}T" + _TIME
            + r"(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2}))\t", timestamp="gts"),
    Wrapper("kubectl-timestamps", KUBECTL_TIMESTAMP, timestamp="kts"),
    # (a Docker Swarm / Docker Desktop service log names the task and node: `core_envoy.1.x4k...@docker-desktop`)
    Wrapper("docker-compose", r"(?P<service>[A-Za-z0-9][A-Za-z0-9_.@-]*) *\|(?: |$)", origin=("service",)),
    # a log viewer's own time column (Docker Desktop's local time, Lens, k9s, Kibana's `Jan 5, 2024 @ 10:00:00.123`)
    # (local time, no zone: an RFC 3339 time with its zone is kubectl's or docker's --timestamps)
    Wrapper("viewer-time", r"(?:[0-9]{4}-[0-9]{2}-[0-9]{2}[ T])?" + _TIME + r"(?:[.,][0-9]{1,9})?[ \t]+(?:\|[ \t]*)?"
            r"|[A-Z][a-z]{2} [0-9]{1,2}, [0-9]{4} @ " + _TIME + r"(?:\.[0-9]{1,9})?[ \t]+"),
    Wrapper("kail", rf"(?:{_K8S_NAME})/(?P<pod>{_K8S_NAME})\[(?P<container>{_K8S_NAME})\]: ",
            origin=("pod", "container")),
    Wrapper("stern", rf"(?P<pod>{_K8S_NAME}) (?P<container>{_K8S_NAME}) ", origin=("pod", "container")),
    # skaffold dev / tilt: `[CONTAINER] ` before each line of a pod's containers
    Wrapper("skaffold", rf"\[(?P<container>{_K8S_NAME})\] ", origin=("container",)),
    Wrapper("syslog", r"(?:[A-Z][a-z]{2} [ 0-9][0-9] " + _TIME + r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T" + _TIME
            + r"(?:\.[0-9]+)?(?:Z|[+-][0-9]{2}:?[0-9]{2})) [^\s]* [^\s\[\]:]+(?:\[[0-9]+\])?: "),
    Wrapper("logcat", r"(?:[0-9]{2}-[0-9]{2} " + _TIME + r"\.[0-9]{3} +[0-9]+ +[0-9]+ [VDIWEF] [^:]*: "
            r"|(?:[0-9]{2}-[0-9]{2} " + _TIME + r"\.[0-9]{3} )?[VDIWEF]/[^(:]*\( *[0-9]+\): )"),
    Wrapper("grep", r"--$|(?:(?P<file>[^\s:]+\.(?:log|txt|gz|json)):)?[0-9]+[:-]", origin=("file",)),
    Wrapper("line-numbers", r" *[0-9]+(?:\t| *\| ?| +)"),
    TABS_AS_SPACES,
)

_BY_ID = {w.id: w for w in WRAPPERS}


def by_id(wrapper_id: str) -> AnyWrapper:
    return _BY_ID[wrapper_id]


def applicable(lines: Sequence[str], tried: Iterable[str] = ()) -> list[AnyWrapper]:
    """Wrappers that enough of ``lines`` carry (blank lines aside), except those already ``tried``."""
    sample = [line for line in lines if line.strip()]
    if not sample:
        return []
    done = set(tried)
    found: list[AnyWrapper] = []
    json_keys: set[str] = set()
    for w in WRAPPERS:
        if w.id in done or (isinstance(w, JsonWrapper) and w.key in json_keys):
            continue
        if sum(1 for line in sample if w.matches(line)) >= w.min_share * len(sample):
            found.append(w)
            if isinstance(w, JsonWrapper):
                json_keys.add(w.key)  # docker-json before json-log: the same key read twice is one candidate
    return found


def generic_prefix(prefixes: Sequence[str]) -> Wrapper | None:
    """A wrapper for prefixes no known wrapper reads: one regex per distinct prefix *shape*.

    Runs of letters/digits become ``[A-Za-z0-9_]+``, runs of blanks ``[ \\t]+``; punctuation stays.
    """
    shapes: list[str] = []
    for prefix in prefixes:
        if not prefix:
            continue
        shape = _shape(prefix)
        if shape not in shapes:
            shapes.append(shape)
        if len(shapes) > 20:
            return None
    if not shapes:
        return None
    return Wrapper("prefix", "|".join(f"(?:{s})" for s in sorted(shapes, key=len, reverse=True)))


def _shape(prefix: str) -> str:
    out = []
    for m in re.finditer(r"[A-Za-z0-9_]+|[ \t]+|.", prefix):
        token = m.group(0)
        if token[0].isalnum() or token[0] == "_":
            out.append("[A-Za-z0-9_]+")
        elif token[0] in " \t":
            out.append(r"[ \t]+")
        else:
            out.append(rust_escape(token))
    return "".join(out)


def strip_sample(lines: Sequence[str], wrappers: Sequence[AnyWrapper | str]) -> list[str]:
    out = list(lines)
    for w in wrappers:
        out = (by_id(w) if isinstance(w, str) else w).strip_sample(out)
    return out


def detect_wrappers(lines: Sequence[str]) -> list[str]:
    """Wrappers most sample lines carry, outermost first, peeled greedily (no format check).

    ``parser/detect.py`` decides with the format; this is the format-blind view used for hints.
    """
    chain: list[str] = []
    current = list(lines)
    while True:
        found = [w for w in applicable(current, chain) if w.min_share >= 0.5]
        found = [w for w in found if sum(1 for line in current if line and w.matches(line))
                 > 0.8 * max(1, sum(1 for line in current if line))]
        if not found:
            return chain
        chain.append(found[0].id)
        current = found[0].strip_sample(current)


def unwrap(lines: pl.DataFrame, wrappers: Sequence[AnyWrapper | str], default_origin: str) -> pl.DataFrame:
    """Strip wrappers from ``raw``; adds ``origin`` (pod/container or the file) and ``wrapper_ts_us``."""
    lines = lines.with_columns_seq(origin=pl.lit(default_origin), wrapper_ts_us=pl.lit(None, dtype=pl.Int64))
    for w in wrappers:
        lines = (by_id(w) if isinstance(w, str) else w).apply(lines)
    return lines
