"""`envoy-dissect watch -n NS POD...`: a live view of pods' sidecars.

Each pod's istio-proxy log is followed through the Kubernetes API (its
follow stream, from now on) and analysed as it comes, with the view of
`analyze --follow`. Envoy's log level is raised to trace while watching and
restored afterwards exactly as `capture` does (also on Ctrl-C or an error).
Ctrl-C: levels restored, then the final report. See docs/follow.md.
"""
from __future__ import annotations

import argparse
import math
import sys
import threading
from collections.abc import Callable
from typing import Any

from envoy_dissector.analysis.outputs.export import COLUMN_CHOICES
from envoy_dissector.cli.argtypes import MAX_COUNT, count
from envoy_dissector.cli.follow import add_follow_arguments, follow
from envoy_dissector.cli.kube import _connect, parse_duration
from envoy_dissector.cli.parse import add_input_arguments
from envoy_dissector.cli.tail import LineCarry, LivePipe, Pump
from envoy_dissector.kube.client import DEFAULT_CONTAINER, Kube, PodTarget
from envoy_dissector.kube.errors import KubeError
from envoy_dissector.parser.errors import UsageError

#: Bytes asked of a log stream at a time.
CHUNK_BYTES = 64 * 1024
#: A followed log silent this long ends the watch with an error (a quiet pod for minutes is fine).
QUIET_S = 3600.0
#: After the watch ends, lines still on their way are read this long before the streams are closed.
DRAIN_S = 1.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="live view of pods' sidecars: trace on while watching, restored after",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pods", nargs="+", metavar="POD", help="pod names")
    p.add_argument("-n", "--namespace", metavar="NS", help="namespace (default: the context's, else default)")
    p.add_argument("-c", "--container", default=DEFAULT_CONTAINER, metavar="NAME",
                   help=f"container (default {DEFAULT_CONTAINER})")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, "
                                                        "then the in-cluster service account)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    p.add_argument("--request-timeout", default="60s", metavar="DURATION",
                   help="longest wait for each API response (default 60s); a followed log may stay quiet longer")
    p.add_argument("--exec-timeout", default="60s", metavar="DURATION",
                   help="longest run of a kubeconfig exec credential plugin (default 60s)")
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
    p.set_defaults(run=run, format="auto", log_format=None, selector=None, max_log_requests=1)


def _add_redaction(p: argparse.ArgumentParser) -> None:
    """The redaction and quiet options every command reading captures has (``parse.add_input_arguments``)."""
    donor = argparse.ArgumentParser(add_help=False)
    add_input_arguments(donor)
    for action in donor._actions:
        if action.dest in ("no_redact", "redact_header", "redact_query_param", "quiet"):
            p._add_action(action)


def follow_pod(kube: Kube, target: PodTarget, pipe: LivePipe) -> tuple[Callable[[threading.Event], None],
                                                                       Callable[[], None]]:
    """A pump's work — the pod's log from now on into ``pipe``, each line as ``kubectl logs --prefix
    --timestamps`` prints it (the parser makes ``POD/CONTAINER`` its origin) — and how to interrupt it."""
    from envoy_dissector.kube.deadline import within

    response: list[Any] = []

    def open_stream() -> Any:
        return kube.core.read_namespaced_pod_log(
            target.name, target.namespace, container=target.container, follow=True, timestamps=True, tail_lines=0,
            _preload_content=False, _request_timeout=(kube.connect_timeout_s, QUIET_S))

    def feed(stop: threading.Event) -> None:
        prefix = f"[pod/{target.name}/{target.container}] ".encode()
        try:
            resp = within(kube.connect_timeout_s + kube.read_timeout_s, f"the log of {target.origin}", open_stream)
        except KubeError:
            raise
        except Exception as exc:
            raise kube.api_error(exc, verb="get", resource="pods/log", purpose="to follow the sidecar's log",
                                 name=target.name) from None
        response.append(resp)
        carry = LineCarry()
        try:
            for chunk in resp.stream(CHUNK_BYTES, decode_content=True):
                lines = carry.lines(chunk)
                if lines:
                    pipe.write(prefix + lines[:-1].replace(b"\n", b"\n" + prefix) + b"\n")
        except Exception as exc:
            if not stop.is_set():  # (closed by ``interrupt`` at the end: not an error)
                raise KubeError(f"following the log of {target.origin} failed: {exc}") from None
        finally:
            rest = carry.rest()
            if rest:
                pipe.write(prefix + rest)

    def interrupt() -> None:
        for resp in response:  # (shutdown wakes a read blocked on the socket; close alone does not)
            for end in ("shutdown", "close"):
                try:
                    getattr(resp, end, lambda: None)()
                except Exception:
                    pass

    return feed, interrupt


def run(args: argparse.Namespace) -> int:
    from envoy_dissector.kube.capture import check_running, preflight, run_capture

    duration = math.inf
    if args.duration is not None:
        duration = parse_duration(args.duration, option="--duration")
        if duration <= 0:
            raise UsageError("--duration must be positive")
    args.command = "watch"
    kube, targets = _connect(args)
    try:
        check_running(targets)
        caps = preflight(kube, targets, args.via, note=lambda text: _say(args, text))
        names = ", ".join(t.origin for t in targets)
        pipe = LivePipe(f"watch {kube.namespace}: {names}")
        pumps = []
        for target in targets:
            feed, interrupt = follow_pod(kube, target, pipe)
            pumps.append(Pump(f"envoy-dissect-watch-{target.name}", feed, interrupt=interrupt, drain_s=DRAIN_S))

        def wait(tick: Callable[[float], None]) -> None:
            run_capture(kube, caps, duration, level=args.level, sleep=tick)

        code = follow(pipe, pumps, args, wait=wait)
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
