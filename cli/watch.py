"""`envoy-dissect watch -n NS POD...`: a live view of pods' sidecars.

Each pod's istio-proxy log is followed through the Kubernetes API (its
follow stream, from now on) and analysed as it comes, with the view of
`analyze --follow`. Envoy's log level is raised to trace once every stream
is open and restored afterwards exactly as `capture` does (also on Ctrl-C or
an error), after the streams are closed: the watch's own admin requests that
restore it are not analysed. Ctrl-C: levels restored, then the final report.
See docs/follow.md.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from envoy_dissector.analysis.outputs.export import COLUMN_CHOICES
from envoy_dissector.cli.argtypes import MAX_COUNT, count
from envoy_dissector.cli.follow import add_follow_arguments, follow
from envoy_dissector.cli.kube import add_cluster_options, connect, parse_duration
from envoy_dissector.cli.parse import add_input_arguments
from envoy_dissector.cli.tail import LivePipe
from envoy_dissector.parser.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="live view of pods' sidecars: trace on while watching, restored after",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pods", nargs="+", metavar="POD", help="pod names")
    add_cluster_options(p, request_timeout_help="longest wait for each API response (default 60s); a followed "
                                                "log may stay quiet longer")
    p.add_argument("--via", choices=["auto", "proxy", "port-forward"], default="auto",
                   help="how to reach the admin port: auto = pod proxy, then port-forward (default)")
    p.add_argument("--level", choices=["trace", "debug"], default="trace",
                   help="the log level while watching (default trace: µs attribution needs it)")
    p.add_argument("--duration", metavar="DURATION", help="stop after this long (default: at Ctrl-C)")
    p.add_argument("-o", "--output", action="append", default=[], metavar="OUT",
                   help="write OUT as `analyze -o` does; .jsonl/.csv appended as requests finish (repeatable)")
    p.add_argument("--columns", choices=COLUMN_CHOICES, default="contract", help="request columns of the files")
    p.add_argument("--top", type=count, default=5, metavar="N",
                   help=f"slowest requests in the final report (default 5, at most {MAX_COUNT:,})")
    p.add_argument("--json", action="store_true", help="print the final summary JSON instead of the report")
    add_follow_arguments(p)
    _add_redaction(p)
    p.set_defaults(run=run, format="auto", log_format=None)


def _add_redaction(p: argparse.ArgumentParser) -> None:
    """The redaction and quiet options every command reading captures has (``parse.add_input_arguments``)."""
    donor = argparse.ArgumentParser(add_help=False)
    add_input_arguments(donor)
    for action in donor._actions:
        if action.dest in ("no_redact", "redact_header", "redact_query_param", "quiet"):
            p._add_action(action)


def run(args: argparse.Namespace) -> int:
    from envoy_dissector.cli.pod_follow import PodStreams, follow_raised
    from envoy_dissector.kube.capture import check_running, preflight

    duration = math.inf
    if args.duration is not None:
        duration = parse_duration(args.duration, option="--duration")
        if duration <= 0:
            raise UsageError("--duration must be positive")
    kube, targets = connect(args, list(args.pods), None, command="watch")
    try:
        check_running(targets)
        caps = preflight(kube, targets, args.via, note=lambda text: _say(args, text))
        names = ", ".join(t.origin for t in targets)
        pipe = LivePipe(f"watch {kube.namespace}: {names}")
        streams = PodStreams(kube, targets, pipe, thread_prefix="envoy-dissect-watch")

        def wait(tick: Callable[[float], None]) -> None:
            follow_raised(kube, caps, streams, level=args.level, duration_s=duration, sleep=tick,
                          on_raised=lambda: _say(args, f"following {names} at level {args.level} (Ctrl-C: levels "
                                                       "restored, then the final report)"))

        code = follow(pipe, streams.pumps, args, wait=wait)
        for cap in caps:
            if cap.restored_via:
                print(f"envoy-dissect: warning: {cap.target.origin}: levels restored through {cap.restored_via}",
                      file=sys.stderr)
        return code
    finally:
        kube.close()


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr, flush=True)
