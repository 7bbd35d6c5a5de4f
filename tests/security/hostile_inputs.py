"""Hostile captures generated from real ones: the fuzz suite (tests/security/test_fuzz.py) and
bench/fuzz.py share this generator.

``hostile_capture(rng, lines)`` mutates a sample of a real capture's lines with what an attacker (or a
broken pipeline) produces: cut lines, lost envelopes, NUL and control bytes, ANSI/OSC escapes,
bidi overrides, ids with 30 digits or a minus sign, impossible dates, time going backwards, CR/LF
mixes, broken JSON, wrong JSON types, formula-looking values, long lines and random bytes.
``rng`` is a ``random.Random`` (hypothesis' ``st.randoms()`` in the tests, so failures shrink).
"""
from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

#: real captures the mutations start from (one per envelope format, plus wrapped ones)
BASES = ("istio-thread/keepalive/envoy.log.gz", "istio-thread/http2/envoy.log.gz", "envoy/keepalive/envoy.log.gz",
         "istio-json/keepalive/envoy.log.gz", "istio/keepalive/envoy.log.gz", "kubectl/timestamps/envoy.log.gz",
         "kubectl/prefix/envoy.log.gz", "old-format/seed000/envoy.log", "custom/keepalive/envoy.log.gz")
#: the --log-format of the bases that need one
LOG_FORMATS = {"custom/keepalive/envoy.log.gz": "%Y-%m-%d %T.%f|%t|%L|%n|%v"}

_GARBAGE = ("\x00", "\x1b[2J", "\x1b]0;owned\x07", "\x1b]8;;http://evil/\x1b\\link\x1b]8;;\x1b\\", "\u202e",
            "\r", "\t", "'", "\"", "\\", "{", "}", "[", "]", "\ufeff", "\x7f", "\x9b", "é", "𝄞", "=cmd|' /C calc'!A0",
            "@SUM(1)", "+1", "-1", "[C", "[S", "[Tags: ", "\"ConnectionId\":\"", "thread=", "\n", "':path', '",
            "completed header: key=", "0x", "9" * 30)


def load_lines(fixtures: Path, base: str, every: int = 1) -> list[str]:
    path = fixtures / base
    opener: Callable[..., object] = gzip.open if base.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:  # type: ignore[operator]
        lines = fh.read().splitlines()  # type: ignore[attr-defined]
    return lines[::every]


def _digits(rng: random.Random, line: str) -> str:
    choice = rng.randint(0, 3)
    value = ("9" * rng.randint(19, 40), "-" + str(rng.randint(0, 99)), "0", str(2**63))[choice]
    return re.sub(r"[0-9]+", lambda _: value if rng.random() < 0.3 else _.group(), line)


def _date(rng: random.Random, line: str) -> str:
    bad = rng.choice(("2026-02-30", "2026-13-01", "0000-00-00", "2026-11-31", "9999-12-31", "1970-01-01",
                      "2026-11-22T25:61:61"))
    return re.sub(r"\d{4}-\d\d-\d\d(T\d\d:\d\d:\d\d)?", bad, line, count=1)


def _backwards(rng: random.Random, line: str) -> str:
    return re.sub(r"(\d{4}-\d\d-\d\d[T ])(\d\d)", lambda m: m.group(1) + f"{rng.randint(0, 23):02d}", line, count=1)


def _json(rng: random.Random, line: str) -> str:
    try:
        record = json.loads(line)
    except ValueError:
        return line[: rng.randint(0, len(line))]
    if not isinstance(record, dict) or not record:
        return line
    key = rng.choice(sorted(record))
    record[key] = rng.choice((None, 5, -1, 1e400 if False else 1.5e300, [], {}, "", "x" * 50, True, "\x00\x1b[31m"))
    return json.dumps(record)


def _insert(rng: random.Random, line: str) -> str:
    at = rng.randint(0, len(line))
    return line[:at] + rng.choice(_GARBAGE) + line[at:]


def _random_bytes(rng: random.Random, _line: str) -> str:
    return bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 80))).decode("latin-1")


def _long(rng: random.Random, line: str) -> str:
    return line + rng.choice("ax9'") * rng.randint(1_000, 20_000)


MUTATIONS: tuple[Callable[[random.Random, str], str], ...] = (
    lambda rng, line: line[: rng.randint(0, len(line))],  # cut anywhere
    lambda rng, line: line.split("\t", 4)[-1] if "\t" in line else line[line.find("] ") + 2:],  # envelope lost
    _digits, _date, _backwards, _json, _insert, _insert, _random_bytes, _long,
    lambda rng, line: line + "\r", lambda rng, line: line.replace(" ", "\t"), lambda rng, line: line.upper(),
)


def hostile_capture(rng: random.Random, lines: list[str], *, max_lines: int = 60, mutation_rate: float = 0.4) -> str:
    """A few dozen lines: a run of real lines (so requests form) with some mutated, dropped, repeated or
    shuffled. May be empty."""
    if not lines:
        return ""
    start = rng.randint(0, max(0, len(lines) - max_lines))
    picked = lines[start : start + rng.randint(0, max_lines)]
    out: list[str] = []
    for line in picked:
        roll = rng.random()
        if roll < mutation_rate:
            out.append(rng.choice(MUTATIONS)(rng, line))
        elif roll < mutation_rate + 0.03:
            continue  # dropped
        elif roll < mutation_rate + 0.06:
            out.extend([line, line])  # repeated
        else:
            out.append(line)
    if out and rng.random() < 0.1:
        rng.shuffle(out)
    ending = rng.choice(("\n", "\n", "\r\n", ""))
    return ending.join(out) + (ending if out and rng.random() < 0.8 else "")


def physical_lines(text: str) -> int:
    """Lines as the reader counts them: a final newline ends the last line, ``\\r\\n`` is one break."""
    if not text:
        return 0
    body = text[:-1] if text.endswith("\n") else text
    return body.count("\n") + 1


def check_capture(text: str, out_dir: Path, log_format: str | None = None, outputs: bool = True) -> str:
    """Every stage and every output on ``text``; returns ``ok`` or ``refused`` (a one-line DissectorError).

    Raises AssertionError when a line is not accounted for, and lets any other exception through: the
    caller counts those as tracebacks.
    """
    import polars as pl

    from envoy_dissector.analysis.capture import dissect
    from envoy_dissector.analysis.outputs.export import write
    from envoy_dissector.analysis.outputs.report import render
    from envoy_dissector.analysis.outputs.trace_export import trace_events
    from envoy_dissector.analysis.select import select
    from envoy_dissector.cli.parse import EventSink
    from envoy_dissector.parser.errors import DissectorError
    from envoy_dissector.parser.pipeline import parse_text

    try:
        parsed = parse_text(text, log_format=log_format)
    except DissectorError as exc:
        assert "\n" not in str(exc), "errors are one line"
        return "refused"
    d = parsed.diagnostics
    assert d.lines_read == physical_lines(text), (d.lines_read, physical_lines(text))
    assert d.lines_read == d.lines_in_records + d.lines_malformed
    assert d.records == parsed.events.height == sum(d.events_by_kind.values())
    assert int(parsed.events["n_lines"].sum() or 0) == d.lines_in_records
    try:
        capture = dissect(text if "\n" in text else text + "\n", log_format=log_format)
    except DissectorError:
        return "refused"
    assert capture.diagnostics_info.lines_read >= d.lines_read
    render(capture)
    json.dumps(capture.summary(), default=str)
    json.dumps(trace_events(capture), default=str)
    select(capture, since="+0s", until="+1s", path=".", authority=".", status="2xx")
    if outputs:
        for suffix in (".parquet", ".csv", ".jsonl", ".json", ".trace.json"):
            write(capture, str(out_dir / f"requests{suffix}"))
        for suffix in (".parquet", ".csv", ".jsonl"):
            with EventSink(str(out_dir / f"events{suffix}")) as sink:  # what `parse -o` writes with
                sink.add(parsed.events)
        csv = pl.read_csv(out_dir / "requests.csv", infer_schema=False)
        for column in (c for c, t in capture.contract_requests.schema.items() if t == pl.String):
            assert not csv[column].str.contains(r"^[=+\-@\t\r]").any(), f"formula cell in {column}"
    return "ok"
