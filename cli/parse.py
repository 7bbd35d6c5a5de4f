"""`envoy-dissect parse`: run only the parser stage; print how every line was accounted for.

Useful to check a capture (or a custom --log-format) before analysing it, and
to export the ``records``/``events`` frames.
"""
from __future__ import annotations

import argparse
import json
import sys

import polars as pl

from envoy_dissector.cli.progress import progress_for
from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.errors import InputError, UsageError
from envoy_dissector.parser.formats import FORMAT_IDS
from envoy_dissector.parser.pipeline import Diagnostics, iter_parse
from envoy_dissector.parser.sources import expand

EVENT_SUFFIXES = (".parquet", ".csv", ".jsonl")


def add_input_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments every command reading captures shares."""
    p.add_argument("captures", nargs="+", metavar="CAPTURE",
                   help="log files, globs, .gz files, or - for stdin")
    p.add_argument("--format", default="auto",
                   choices=["auto", *FORMAT_IDS],
                   help="envelope format (default: detected from the first lines)")
    p.add_argument("--log-format", metavar="STRING",
                   help="the Envoy --log-format the capture was written with (implies --format custom)")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secret header values (authorization, cookie, ...) instead of [redacted]")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


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
    chunks = []
    with progress_for(sources, quiet=args.quiet) as advance:
        run = iter_parse(sources, format=args.format, log_format=args.log_format, redact=not args.no_redact,
                         shapes=shape_cache, progress=advance)
        for chunk in run:
            chunks.append(chunk.events)
    diag = run.diagnostics
    if diag.records == 0:
        raise InputError("nothing parseable: no log record found", path=", ".join(s.name for s in sources))
    if args.output:
        events = pl.concat(chunks)
        write_frame(events, args.output)
    if args.json:
        json.dump(diag.as_dict(), sys.stdout, indent=2)
        print()
    else:
        print_diagnostics(diag)
    return 0


def write_frame(frame: pl.DataFrame, path: str) -> None:
    if path.endswith(".parquet"):
        frame.write_parquet(path)
    elif path.endswith(".csv"):
        flat = frame.with_columns(pl.col(c).cast(pl.String) for c, t in frame.schema.items()
                                  if isinstance(t, (pl.Enum, pl.Categorical)))
        flat.write_csv(path)
    else:
        frame.write_ndjson(path)


def print_diagnostics(diag: Diagnostics) -> None:
    print(f"format: {diag.format} ({diag.format_label})" + (f", wrappers: {', '.join(diag.wrappers)}"
                                                             if diag.wrappers else ""))
    print(f"lines read {diag.lines_read}: in records {diag.lines_in_records}, malformed {diag.lines_malformed}")
    unknown_pct = 100 * diag.records_unknown / max(1, diag.records)
    print(f"records {diag.records}: unknown {diag.records_unknown} ({unknown_pct:.2f}%), "
          f"{len(diag.events_by_kind)} kinds, {diag.shapes} distinct message shapes")
    for example in diag.malformed_examples:
        print(f"  malformed: {example}")
    for warning in diag.warnings:
        print(f"warning: {warning}")
