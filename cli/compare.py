"""`envoy-dissect compare A B`: per-phase percentile differences of two captures.

Examples:
  envoy-dissect compare tracing-on.log tracing-off.log
  envoy-dissect compare before.log.gz after.log.gz -o diff.csv
"""
from __future__ import annotations

import argparse
import json
import sys

from envoy_dissector.analysis.capture import dissect
from envoy_dissector.analysis.outputs.comparison import compare, render_comparison
from envoy_dissector.analysis.outputs.terminal import report_width
from envoy_dissector.parser.errors import UsageError
from envoy_dissector.parser.sources import expand


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compare", help="per-phase percentile differences between two captures (B − A)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="the first capture (file, .gz or -)")
    p.add_argument("b", metavar="B", help="the second capture")
    p.add_argument("--format", default="auto", help="log format of both captures (default: detect)")
    p.add_argument("--log-format", help="an Envoy --log-format pattern both captures were written with")
    p.add_argument("--no-redact", action="store_true", help="keep header values (nothing here prints them)")
    p.add_argument("-o", "--output", metavar="OUT", help="write the table: .csv or .json")
    p.add_argument("--json", action="store_true", help="print the table as JSON instead of text")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.output and not args.output.endswith((".csv", ".json")):
        raise UsageError(f"compare -o {args.output}: the suffix must be .csv or .json")
    if args.a == "-" and args.b == "-":
        raise UsageError("compare: only one of A and B can be standard input")
    captures = [dissect(expand([path]), format=args.format, log_format=args.log_format, redact=not args.no_redact,
                        name=path) for path in (args.a, args.b)]
    table = compare(*captures)
    if args.output:
        if args.output.endswith(".csv"):
            table.write_csv(args.output)
        else:
            with open(args.output, "w", encoding="utf-8") as fh:
                json.dump(table.to_dicts(), fh, indent=2)
        print(f"wrote {args.output}", file=sys.stderr)
    if args.json:
        json.dump(table.to_dicts(), sys.stdout, indent=2)
        print()
    else:
        tick = max(c.quality().timestamp_tick_us for c in captures)
        print(render_comparison(table, args.a, args.b, width=report_width(sys.stdout), tick_us=tick))
    return 0
