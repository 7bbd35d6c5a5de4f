"""`envoy-dissect fleet`: many captures as independent tasks on Dask; a hive-partitioned dataset + merged summary.

Examples:
  envoy-dissect fleet 'pods/*.log.gz' -o /data/dissected            # local cluster, one process per core
  envoy-dissect fleet 'pods/*.log.gz' -o /data/dissected --scheduler tcp://10.0.0.5:8786
"""
from __future__ import annotations

import argparse
import json
import sys

from envoy_dissector.cli.extras import require_extra
from envoy_dissector.parser.sources import expand


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fleet", help="many captures on Dask: one task per input, a parquet dataset, merged stats",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="files or globs (one task each)")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="dataset directory to create (must be new or empty)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler (default: a local cluster)")
    p.add_argument("--workers", type=int, metavar="N", help="local cluster worker processes (default: cores)")
    p.add_argument("--format", default="auto", help="log format of every input (default: detect per input)")
    p.add_argument("--log-format", help="an Envoy --log-format pattern the inputs were written with")
    p.add_argument("--no-redact", action="store_true", help="keep header values in the dataset")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-input progress lines")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    require_extra("fleet", "envoy-dissect fleet")
    from envoy_dissector.fleet.engine import TaskResult, run_fleet

    sources = [s.name for s in expand(args.captures)]
    done = 0

    def progress(result: TaskResult) -> None:
        nonlocal done
        done += 1
        if not args.quiet:
            state = f"{result.requests} requests" if result.ok else f"skipped: {result.error}"
            print(f"[{done}/{len(sources)}] {result.source}: {state}", file=sys.stderr)

    summary = run_fleet(sources, args.out, scheduler=args.scheduler, workers=args.workers,
                        options={"format": args.format, "log_format": args.log_format, "redact": not args.no_redact},
                        progress=progress)
    failed = [i for i in summary["inputs"] if not i["ok"]]
    print(json.dumps({k: summary[k] for k in ("inputs", "phases", "stitching") if k in summary}, indent=2))
    print(f"wrote {args.out}/requests, {args.out}/phases (hive partitions origin=...) and {args.out}/summary.json",
          file=sys.stderr)
    return 2 if failed and len(failed) == len(sources) else 0
