"""`envoy-dissect analyze`: parse + analyse captures; terminal report and exports.

Examples:
  envoy-dissect analyze proxy.log
  kubectl logs POD -c istio-proxy | envoy-dissect analyze -
  envoy-dissect analyze 'logs/*.log.gz' -o requests.parquet -o summary.json \\
      -o run.trace.json
  envoy-dissect analyze --follow /var/log/envoy.log -o live.jsonl

Outputs are named by their suffix: .parquet/.csv/.jsonl one row per request,
.json the summary (trace.json too), .trace.json a Chrome trace for Perfetto.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from envoy_dissector.analysis.capture import dissect
from envoy_dissector.analysis.outputs.export import COLUMN_CHOICES, kind_of, summary_json, write
from envoy_dissector.analysis.outputs.report import render
from envoy_dissector.analysis.outputs.terminal import report_width
from envoy_dissector.analysis.quality import require_request_lines
from envoy_dissector.analysis.select import checked_regex, read_until, select
from envoy_dissector.cli.argtypes import MAX_COUNT, count
from envoy_dissector.cli.follow import add_follow_arguments, run_follow
from envoy_dissector.cli.otel_output import add_otel_arguments, otel_outputs, refuse_with_follow
from envoy_dissector.cli.parse import add_input_arguments, redaction_of
from envoy_dissector.cli.progress import progress_for
from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.errors import UsageError
from envoy_dissector.parser.sources import Source, expand


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("analyze", aliases=["analyse"], help="where each request's time went (report + exports)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(run=run)


class _Parser(argparse.ArgumentParser):
    """An argument parser raising :class:`UsageError` instead of exiting (for callers inside a command)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def parse_options(argv: Sequence[str], *, prog: str) -> argparse.Namespace:
    """``analyze``'s options (no captures) from ``argv``, for commands that analyse the files they wrote
    (:func:`analyse`); a usage error is a :class:`UsageError` naming ``prog``."""
    p = _Parser(prog=prog, add_help=False)
    add_arguments(p, captures=False)
    return p.parse_args(list(argv))


def add_arguments(p: argparse.ArgumentParser, *, captures: bool = True) -> None:
    add_input_arguments(p, captures=captures)
    p.add_argument("-o", "--output", action="append", default=[], metavar="OUT",
                   help="write OUT; its suffix picks: .parquet/.csv/.jsonl (requests), .json (summary + diagnostics: "
                        "-o trace.json is a summary), .trace.json (a Chrome trace for Perfetto: -o run.trace.json), "
                        ".otlp.json (OpenTelemetry spans as OTLP/JSON, docs/otel.md); repeatable")
    add_otel_arguments(p)
    p.add_argument("--columns", choices=COLUMN_CHOICES, default="contract",
                   help="request columns of .parquet/.csv/.jsonl: the contract (with the stitched peer columns when "
                        "there is more than one origin) or all declared detail columns too (docs/output.md)")
    p.add_argument("--since", help="only requests starting at/after this time (ISO, epoch s, or +2s)")
    p.add_argument("--until", help="only requests starting at/before this time")
    p.add_argument("--authority", metavar="REGEX", help="only requests whose :authority matches")
    p.add_argument("--path", metavar="REGEX", help="only requests whose path matches")
    p.add_argument("--status", help="only requests with this status: 503, 5xx, >=400")
    p.add_argument("--top", type=count, default=5, metavar="N",
                   help=f"slowest requests to list (default 5, at most {MAX_COUNT:,})")
    p.add_argument("--json", action="store_true", help="print the summary JSON instead of the report")
    p.add_argument("--follow", action="store_true",
                   help="follow one growing FILE (rotation handled) or - (kubectl logs -f): a live view "
                        "refreshed every few seconds, .jsonl/.csv outputs appended as requests finish; "
                        "Ctrl-C prints the final report (docs/follow.md)")
    p.add_argument("--from-end", action="store_true",
                   help="with --follow FILE: start at the file's end (only lines written from now on)")
    add_follow_arguments(p)
    p.add_argument("--keep-events", "--whole", dest="keep_events", action="store_true",
                   help="keep the capture's events in memory as it is read (memory grows with the file) "
                        "instead of reading the input again where an output needs them (docs/scale.md)")


def describe_filters(args: argparse.Namespace) -> str:
    """The active filters as the user typed them (``--status 5xx --path ^/api``), or ``""``."""
    return " ".join(f"--{name} {value}" for name in ("since", "until", "authority", "path", "status")
                    if (value := getattr(args, name, None)))


def run(args: argparse.Namespace) -> int:
    if getattr(args, "follow", False):
        refuse_with_follow(args)
        return run_follow(args)
    if getattr(args, "from_end", False):
        raise UsageError("--from-end goes with --follow")
    return analyse(expand(args.captures), args)


def analyse(sources: list[Source], args: argparse.Namespace) -> int:
    """Analyse ``sources`` with ``analyze``'s options ``args``: the -o files, then the report (or the summary
    JSON) on stdout. ``fetch`` and ``capture`` call it on the files they wrote (:func:`parse_options`)."""
    otel = otel_outputs(args)
    for out in args.output:
        if not otel.claims(out):
            kind_of(out)  # fail fast on a bad suffix, before reading gigabytes
    for option, pattern in (("--authority", args.authority), ("--path", args.path)):
        if pattern:
            checked_regex(option, pattern)
    name = ", ".join(s.name for s in sources) if len(sources) <= 3 else f"{len(sources)} files"
    keep = getattr(args, "keep_events", False) or otel.needs_whole(sources)
    with progress_for(sources, quiet=args.quiet, desc="analysing") as advance:
        capture = dissect(sources, format=args.format, log_format=args.log_format, redact=redaction_of(args),
                          progress=advance, name=name, shapes=shape_cache, stop_reading=read_until(args.until),
                          keep_events=keep)
    require_request_lines(capture.quality(), name)
    capture = select(capture, since=args.since, until=args.until, authority=args.authority, path=args.path,
                     status=args.status)
    for out in (o for o in args.output if not otel.claims(o)):
        write(capture, out, columns=getattr(args, "columns", "contract"))
        if not args.quiet:
            print(f"wrote {out}", file=sys.stderr)
    otel.export(capture, sources, args)
    if args.json:
        json.dump(summary_json(capture), sys.stdout, indent=2, default=str)
        print()
    else:
        print(render(capture, top=args.top, filters=describe_filters(args), width=report_width(sys.stdout)))
    return 0
