"""`envoy-dissect parse`: run only the parser stage; print how every line was accounted for.

Useful to check a capture (or a custom --log-format) before analysing it, and
to export the ``records``/``events`` frames.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import ExitStack
from typing import Any

import polars as pl

from envoy_dissector.analysis.outputs.csv_safe import neutralise_formulas
from envoy_dissector.analysis.outputs.output_file import output_path
from envoy_dissector.cli.progress import progress_for
from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.errors import InputError, OutputError, UsageError
from envoy_dissector.parser.formats import FORMAT_IDS
from envoy_dissector.parser.pipeline import Diagnostics, iter_parse
from envoy_dissector.parser.redact import Redaction, RedactOption
from envoy_dissector.parser.sources import expand

EVENT_SUFFIXES = (".parquet", ".csv", ".jsonl")


def add_input_arguments(p: argparse.ArgumentParser, *, captures: bool = True) -> None:
    """Arguments every command reading captures shares (``captures=False``: the options only, for a command
    that names the files itself)."""
    if captures:
        p.add_argument("captures", nargs="+", metavar="CAPTURE",
                       help="log files, globs, .gz files, or - for stdin")
    p.add_argument("--format", default="auto", choices=["auto", *FORMAT_IDS], metavar="FORMAT",
                   help=f"envelope format: {', '.join(['auto', *FORMAT_IDS])} (default: auto, detected from the "
                        "first lines)")
    p.add_argument("--log-format", metavar="STRING",
                   help="the Envoy --log-format the capture was written with (implies --format custom)")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secret header values (authorization, cookie, ...) instead of [redacted]")
    p.add_argument("--redact-header", action="append", default=[], metavar="NAME",
                   help="also redact this header's values (a name or a * glob; repeatable; docs/security.md)")
    p.add_argument("--redact-query-param", action="append", default=[], metavar="NAME",
                   help="also redact this URL query parameter's values (a name or a * glob; repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def redaction_of(args: argparse.Namespace) -> RedactOption:
    """``redact=`` for the parser: off with --no-redact, else the built-in rules plus the names given."""
    if args.no_redact:
        return False
    return Redaction(headers=tuple(args.redact_header), params=tuple(args.redact_query_param))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("parse", help="parse captures into records/events; print line accounting",
                       description=__doc__)
    add_input_arguments(p)
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write the events frame (.parquet, .csv or .jsonl by suffix)")
    p.add_argument("--json", action="store_true", help="print diagnostics as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.output and not args.output.endswith(EVENT_SUFFIXES):
        raise UsageError(f"-o {args.output}: use one of {', '.join(EVENT_SUFFIXES)}")
    sources = expand(args.captures)
    with progress_for(sources, quiet=args.quiet) as advance, ExitStack() as stack:
        sink = stack.enter_context(EventSink(args.output)) if args.output else None
        parsing = iter_parse(sources, format=args.format, log_format=args.log_format, redact=redaction_of(args),
                             shapes=shape_cache, progress=advance)
        for chunk in parsing:
            if sink is not None:  # without -o nothing is kept: memory stays bounded
                sink.add(chunk.events)
        diag = parsing.diagnostics
        if diag.records == 0:
            raise InputError("nothing parseable: no log record found", path=", ".join(s.name for s in sources))
    if args.json:
        json.dump(diag.as_dict(), sys.stdout, indent=2)
        print()
    else:
        print_diagnostics(diag)
    return 0


class EventSink:
    """Writes the events frame chunk by chunk: CSV/JSON lines appended, parquet as parts streamed into one
    file at the end (memory holds one chunk). All or nothing, like every output (output_file.py)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stack = ExitStack()
        self._parts: list[str] = []
        self._fh: Any = None

    def __enter__(self) -> EventSink:
        self._out = self._stack.enter_context(output_path(self.path))
        return self

    def add(self, frame: pl.DataFrame) -> None:
        try:
            self._add(frame)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise OutputError(f"{self.path}: cannot write: {exc}") from exc

    def _add(self, frame: pl.DataFrame) -> None:
        if self.path.endswith(".parquet"):
            part = f"{self._out}.{len(self._parts)}"
            self._parts.append(part)
            frame.write_parquet(part)
            return
        if self._fh is None:
            self._fh = open(self._out, "wb")  # noqa: SIM115 (closed in __exit__)
        if self.path.endswith(".csv"):
            neutralise_formulas(frame).write_csv(self._fh, include_header=self._fh.tell() == 0)
        else:
            frame.write_ndjson(self._fh)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            if self._fh is not None:
                self._fh.close()
            if kind is None and self._parts:
                pl.scan_parquet(self._parts).sink_parquet(self._out)
        except (OSError, pl.exceptions.PolarsError) as error:
            self._stack.__exit__(type(error), error, error.__traceback__)
            raise OutputError(f"{self.path}: cannot write: {error}") from error
        finally:
            for part in self._parts:
                try:
                    os.unlink(part)
                except OSError:
                    pass
        self._stack.__exit__(kind, exc, tb)


def print_diagnostics(diag: Diagnostics) -> None:
    print(f"format: {diag.format} ({diag.format_label})" + (f", wrappers: {', '.join(diag.wrappers)}"
                                                             if diag.wrappers else ""))
    print(f"lines read {diag.lines_read}: in records {diag.lines_in_records}, malformed {diag.lines_malformed}")
    if diag.lines_aside_by_kind:
        print("lines set aside by kind: " + ", ".join(f"{kind} {n}" for kind, n in sorted(
            diag.lines_aside_by_kind.items())))
    unknown_pct = 100 * diag.records_unknown / max(1, diag.records)
    print(f"records {diag.records}: unknown {diag.records_unknown} ({unknown_pct:.2f}%), "
          f"{len(diag.events_by_kind)} kinds, {diag.shapes} distinct message shapes")
    for example in diag.malformed_examples:
        print(f"  malformed: {example}")
    for warning in diag.warnings:
        print(f"warning: {warning}")
