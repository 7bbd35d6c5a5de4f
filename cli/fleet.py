"""`envoy-dissect fleet`: many captures as independent tasks on Dask; a
hive-partitioned dataset + merged summary.

The default local cluster listens on 127.0.0.1 only, with mutual TLS under
credentials made for the run (another user of the machine cannot connect) and
no HTTP endpoint. A remote scheduler is reached over tls:// with your CA,
certificate and key (or Dask's own TLS configuration): whoever can talk to a
Dask scheduler runs code in its workers, so a plain tcp:// one is refused
unless --allow-unauthenticated-scheduler.

Examples:
  # a local cluster, one process per core
  envoy-dissect fleet 'pods/*.log.gz' -o /data/dissected
  envoy-dissect fleet 'pods/*.log.gz' -o /data/dissected \\
      --scheduler tls://10.0.0.5:8786 --tls-ca-file ca.pem \\
      --tls-cert client.pem --tls-key client-key.pem
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from envoy_dissector.cli.argtypes import port
from envoy_dissector.cli.extras import require_extra
from envoy_dissector.parser.errors import UsageError
from envoy_dissector.parser.sources import expand


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("fleet", help="many captures on Dask: one task per input, a parquet dataset, merged stats",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="files or globs (one task each)")
    p.add_argument("-o", "--out", required=True, metavar="DIR",
                   help="dataset directory to create (must be new or empty)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="a running Dask scheduler, tls://HOST:PORT (default: a local cluster)")
    p.add_argument("--tls-ca-file", metavar="PEM", help="CA the scheduler's certificate is checked against")
    p.add_argument("--tls-cert", metavar="PEM", help="this client's certificate for the scheduler")
    p.add_argument("--tls-key", metavar="PEM", help="this client's private key")
    p.add_argument("--allow-unauthenticated-scheduler", action="store_true",
                   help="accept a plain tcp:// scheduler (anyone who reaches it can run code as its workers' "
                        "user and, through results, in this process)")
    p.add_argument("--workers", type=int, metavar="N", help="local cluster worker processes (default: cores)")
    p.add_argument("--dashboard-port", type=port, metavar="PORT",
                   help="serve Dask's diagnostics dashboard on 127.0.0.1:PORT (local cluster; default: none)")
    p.add_argument("--format", default="auto", help="log format of every input (default: detect per input)")
    p.add_argument("--log-format", help="an Envoy --log-format pattern the inputs were written with")
    p.add_argument("--no-redact", action="store_true", help="keep header values in the dataset")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-input progress lines")
    p.add_argument("--dask-log-level", default="warning", choices=DASK_LOG_LEVELS, metavar="LEVEL",
                   help=f"what Dask's scheduler and workers log to stderr: {', '.join(DASK_LOG_LEVELS)} (default: "
                        "warning; info shows every node starting and stopping)")
    p.set_defaults(run=run)


DASK_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def run(args: argparse.Namespace) -> int:
    # Dask reads its log levels when it is first imported, here and in each worker process (which inherits the
    # environment); a level the user set in the environment wins
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", args.dask_log_level)
    require_extra("fleet", "envoy-dissect fleet")
    from envoy_dissector.fleet.cluster import SchedulerCredentials, remote_security
    from envoy_dissector.fleet.engine import TaskResult, run_fleet

    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be 1 or more")
    security = None
    if args.scheduler is not None:
        if args.dashboard_port is not None or args.workers is not None:
            raise UsageError("--dashboard-port and --workers are for the local cluster, not --scheduler")
        security = remote_security(args.scheduler, SchedulerCredentials(args.tls_ca_file, args.tls_cert,
                                                                        args.tls_key),
                                   allow_unauthenticated=args.allow_unauthenticated_scheduler)
    elif args.tls_ca_file or args.tls_cert or args.tls_key or args.allow_unauthenticated_scheduler:
        raise UsageError("--tls-* and --allow-unauthenticated-scheduler go with --scheduler (the local cluster "
                         "makes its own credentials)")
    sources = [s.argument for s in expand(args.captures)]  # each worker expands its own again
    done = 0

    def progress(result: TaskResult) -> None:
        nonlocal done
        done += 1
        if not args.quiet:
            state = f"{result.requests} requests" if result.ok else f"skipped: {result.error}"
            print(f"[{done}/{len(sources)}] {result.source}: {state}", file=sys.stderr)

    summary = run_fleet(sources, args.out, scheduler=args.scheduler, security=security, workers=args.workers,
                        dashboard_port=args.dashboard_port,
                        options={"format": args.format, "log_format": args.log_format, "redact": not args.no_redact},
                        progress=progress)
    failed = [i for i in summary["inputs"] if not i["ok"]]
    print(json.dumps({k: summary[k] for k in ("inputs", "phases", "stitching") if k in summary}, indent=2))
    print(f"wrote {args.out}/requests, {args.out}/phases (hive partitions origin=...) and {args.out}/summary.json",
          file=sys.stderr)
    return 2 if failed and len(failed) == len(sources) else 0
