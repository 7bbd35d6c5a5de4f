"""``envoy-dissect fetch`` and ``envoy-dissect capture``: istio-proxy logs through the Kubernetes API.

    envoy-dissect fetch   -n NS (POD... | -l SELECTOR) [-c istio-proxy] [--since 5m] [--previous] -o DIR
    envoy-dissect capture -n NS (POD... | -l SELECTOR) [-c istio-proxy] --duration 30s [-o DIR]

Files: ``DIR/POD/CONTAINER.log`` (``CONTAINER.previous.log`` with ``--previous``),
every line as ``kubectl logs --prefix --timestamps`` prints it, plus
``DIR/fetch.json`` / ``DIR/capture.json`` describing what was fetched. Then the
files are analysed together (origin = POD/CONTAINER) unless ``--no-analyze``.
See docs/kubernetes.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from envoy_dissector.cli import analyze
from envoy_dissector.cli.extras import require_extra
from envoy_dissector.kube.client import DEFAULT_CONTAINER, Kube, PodTarget, load, resolve_pods
from envoy_dissector.kube.errors import NoTraceLines
from envoy_dissector.kube.logs import LogStats, fetch_many, format_ns, log_path, stream_log
from envoy_dissector.parser.errors import UsageError
from envoy_dissector.parser.sources import Source, shown_name

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str, *, option: str) -> float:
    """Seconds in a Go/kubectl-style duration: ``30s``, ``5m``, ``1h30m``, ``500ms``, or bare seconds."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _DURATION_RE.finditer(value):
            if match.start() != pos:
                break
            number, unit = float(match.group(1)), match.group(2)
            seconds += number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
            pos = match.end()
        if pos != len(value) or not value:
            raise UsageError(f"{option} {text!r}: use a duration like 30s, 5m, 1h30m or 500ms") from None
    if not math.isfinite(seconds):
        raise UsageError(f"{option} {text!r}: out of range")
    if seconds < 0:
        raise UsageError(f"{option} {text!r}: must not be negative")
    return seconds


def add_cluster_options(p: argparse.ArgumentParser | argparse._ArgumentGroup, *,
                        request_timeout_help: str = "longest wait for each API response, or each chunk of a log "
                                                    "stream, however slowly the server sends (default 60s; "
                                                    "plus --connect-timeout)") -> None:
    """Where the pods are and how to reach the API server: -n, -c, --kubeconfig, --context and the timeouts
    (``fetch``, ``capture``, ``watch``, ``dashboard --follow pod/NAME``; read by :func:`connect`)."""
    p.add_argument("-n", "--namespace", metavar="NS", help="namespace (default: the context's, else default)")
    p.add_argument("-c", "--container", default=DEFAULT_CONTAINER, metavar="NAME",
                   help=f"container (default {DEFAULT_CONTAINER})")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default $KUBECONFIG, ~/.kube/config, "
                                                        "then the in-cluster service account)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    p.add_argument("--request-timeout", default="60s", metavar="DURATION", help=request_timeout_help)
    p.add_argument("--connect-timeout", default="10s", metavar="DURATION",
                   help="longest wait to connect to the API server; a response's deadline is this plus "
                        "--request-timeout (default 10s)")
    p.add_argument("--exec-timeout", default="60s", metavar="DURATION",
                   help="longest run of a kubeconfig exec credential plugin before it is stopped (default 60s)")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("pods", nargs="*", metavar="POD", help="pod names (or use -l)")
    p.add_argument("-l", "--selector", metavar="SELECTOR", help="label selector, e.g. app=reviews")
    add_cluster_options(p)
    p.add_argument("--max-log-requests", type=int, default=5, metavar="N",
                   help="log streams fetched at once (default 5, like kubectl)")
    p.add_argument("--allow-no-trace", action="store_true",
                   help="do not fail when no fetched log holds a trace-level line")
    p.add_argument("--no-analyze", action="store_true", help="only write the log files")
    p.add_argument("--report", action="append", default=[], metavar="OUT",
                   help="analysis output file, passed to `analyze -o` (suffix picks the format; repeatable)")
    p.add_argument("--analyze-args", default="", metavar="ARGS",
                   help="more arguments for the analysis run, shell-quoted; write it with '=' when it starts "
                        "with a dash: --analyze-args='--top 5 --status 5xx'")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors and the analysis")


def register(sub: argparse._SubParsersAction) -> None:
    fetch = sub.add_parser(
        "fetch", help="fetch istio-proxy logs of pods through the Kubernetes API, then analyse them",
        description="Stream each pod's sidecar log (with the runtime's timestamps) to DIR/POD/CONTAINER.log, "
                    "then analyse the files together (origin = POD/CONTAINER).")
    _add_common(fetch)
    fetch.add_argument("--since", metavar="DURATION", help="only lines newer than this (e.g. 5m)")
    fetch.add_argument("--previous", action="store_true",
                       help="the previous (terminated) instance of the container")
    fetch.add_argument("-o", "--out", required=True, metavar="DIR", help="directory to write the logs into")
    fetch.set_defaults(run=run_fetch)

    capture = sub.add_parser(
        "capture", help="turn on trace logging on pods for a while, restore it, fetch that window, analyse",
        description="Raise Envoy's log level to trace on each pod through the API server (pod proxy to the "
                    "admin port 15000, else a port-forward), wait --duration, restore the previous levels "
                    "(also on Ctrl-C or error), fetch exactly that window, then analyse it.")
    _add_common(capture)
    capture.add_argument("--duration", default="30s", metavar="DURATION",
                         help="how long trace stays on (default 30s)")
    capture.add_argument("--via", choices=["auto", "proxy", "port-forward"], default="auto",
                         help="how to reach the admin port: auto = pod proxy, then port-forward (default)")
    capture.add_argument("--window-slack", default="1s", metavar="DURATION",
                         help="keep lines stamped this long before/after the window, for the gap between "
                              "this machine's clock and the node's (default 1s)")
    capture.add_argument("-o", "--out", metavar="DIR",
                         help="directory to write the logs into (default ./envoy-capture-UTCSTAMP)")
    capture.set_defaults(run=run_capture)


# -- shared ---------------------------------------------------------------------------------------------
def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, flush=True)


def _warn(text: str) -> None:
    print(f"envoy-dissect: warning: {text}", file=sys.stderr, flush=True)


def _connect(args: argparse.Namespace) -> tuple[Kube, list[PodTarget]]:
    if args.max_log_requests < 1:
        raise UsageError("--max-log-requests must be at least 1")
    return connect(args, list(args.pods), args.selector, command=args.command)


def connect(args: argparse.Namespace, pods: list[str], selector: str | None, *,
            command: str) -> tuple[Kube, list[PodTarget]]:
    """The cluster :func:`add_cluster_options` names, and ``pods`` (or the ``selector``'s) in it."""
    require_extra("kube", f"envoy-dissect {command}")
    read_timeout = parse_duration(args.request_timeout, option="--request-timeout")
    if read_timeout <= 0:
        raise UsageError("--request-timeout must be positive")
    connect_timeout = parse_duration(args.connect_timeout, option="--connect-timeout")
    if connect_timeout <= 0:
        raise UsageError("--connect-timeout must be positive")
    exec_timeout = parse_duration(args.exec_timeout, option="--exec-timeout")
    if exec_timeout <= 0:
        raise UsageError("--exec-timeout must be positive")
    kube = load(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace,
                connect_timeout_s=connect_timeout, read_timeout_s=read_timeout, exec_timeout_s=exec_timeout)
    try:
        targets = resolve_pods(kube, pods, selector, args.container, warn=_warn)
    except BaseException:
        kube.close()
        raise
    return kube, targets


def _check_trace(stats: list[LogStats], allow: bool, what: str) -> None:
    empty = [s for s in stats if s.trace_lines == 0]
    for s in empty:
        if len(empty) < len(stats) or allow:
            _warn(f"{s.target.origin}: {s.lines} lines but none at trace level ({s.path})")
    if empty and len(empty) == len(stats) and not allow:
        detail = ", ".join(f"{s.target.origin} ({s.lines} lines)" for s in stats)
        raise NoTraceLines(f"no trace-level line in {what}: {detail}; is this Envoy's container, and is trace "
                           "logging on? Use `envoy-dissect capture` or see docs/kubernetes.md "
                           "(files kept; --allow-no-trace to accept)")


def _write_manifest(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def analysis_command(files: Sequence[Path], reports: Sequence[str], analyze_args: str) -> str:
    """The ``envoy-dissect analyze`` command line that repeats the analysis (printed for the user)."""
    outputs = [a for out in reports for a in ("-o", out)]
    return shlex.join(["envoy-dissect", "analyze", *(os.fspath(f) for f in files), *outputs,
                       *shlex.split(analyze_args)])


def run_analysis(args: argparse.Namespace, files: Sequence[Path]) -> int:
    """Analyse the fetched files together (the one place coupling fetch/capture to the analysis): the files
    as they are (no glob, no ``-``), ``--report`` outputs and ``analyze``'s options from ``--analyze-args``."""
    if args.no_analyze or not files:
        return 0
    options = analyze.parse_options(shlex.split(args.analyze_args), prog="--analyze-args")
    options.output = [*getattr(args, "report", []), *options.output]
    _say(args, "$ " + analysis_command(files, getattr(args, "report", []), args.analyze_args))
    return analyze.analyse([Source(shown_name(os.fspath(f)), path=Path(f)) for f in files], options)


def _report(args: argparse.Namespace, stats: list[LogStats]) -> None:
    for s in stats:
        extra = ""
        if s.window is not None:
            extra = f", {s.dropped_before + s.dropped_after} outside the window dropped"
        _say(args, f"{s.target.origin}: {s.lines} lines ({s.trace_lines} trace), {s.bytes} bytes{extra} -> {s.path}")


# -- fetch ----------------------------------------------------------------------------------------------
def fetch_all(kube: Kube, targets: list[PodTarget], out_dir: Path, *, since_seconds: int | None,
              previous: bool, parallel: int) -> list[LogStats]:
    """Stream every target's log to ``out_dir`` (``parallel`` at once); the first failure cancels the rest."""
    return fetch_many([partial(_fetch_one, kube, t, log_path(out_dir, t, previous), since_seconds, previous)
                       for t in targets], parallel)


def _fetch_one(kube: Kube, target: PodTarget, path: Path, since_seconds: int | None, previous: bool,
               cancel: threading.Event) -> LogStats:
    return stream_log(kube, target, path, since_seconds=since_seconds, previous=previous, cancel=cancel)


def run_fetch(args: argparse.Namespace) -> int:
    since = None
    if args.since:
        seconds = parse_duration(args.since, option="--since")
        if seconds <= 0:
            raise UsageError("--since must be positive")
        since = max(1, int(seconds + 0.999))
    kube, targets = _connect(args)
    out_dir = Path(args.out)
    try:
        started = time.time_ns()
        stats = fetch_all(kube, targets, out_dir, since_seconds=since, previous=args.previous,
                          parallel=args.max_log_requests)
    finally:
        kube.close()
    _report(args, stats)
    _write_manifest(out_dir / "fetch.json", {
        "command": "fetch", "namespace": kube.namespace, "server": kube.server, "config": kube.source,
        "selector": args.selector, "since_seconds": since, "previous": args.previous,
        "fetched_at": format_ns(started), "logs": [s.as_dict() for s in stats]})
    _check_trace(stats, args.allow_no_trace, "the fetched logs")
    return run_analysis(args, [s.path for s in stats])


# -- capture --------------------------------------------------------------------------------------------
def run_capture(args: argparse.Namespace) -> int:
    from envoy_dissector.kube.capture import check_running, fetch_windows, preflight
    from envoy_dissector.kube.capture import run_capture as capture_window

    duration = parse_duration(args.duration, option="--duration")
    if not 0 < duration <= 3600:
        raise UsageError("--duration must be within 0..1h")
    slack = parse_duration(args.window_slack, option="--window-slack")
    out_dir = Path(args.out or datetime.now(UTC).strftime("envoy-capture-%Y%m%dT%H%M%SZ"))
    kube, targets = _connect(args)
    try:
        check_running(targets)
        caps = preflight(kube, targets, args.via, note=lambda t: _say(args, t))
        for cap in caps:
            _say(args, f"{cap.target.origin}: admin via {cap.admin.transport.name}, levels "
                       + ", ".join(f"{lvl} x{n}" for lvl, n in _level_counts(cap.levels_before)))
        _say(args, f"trace on {len(caps)} pod(s) for {duration:g} s ...")
        capture_window(kube, caps, duration)
        for cap in caps:
            if cap.restore_error is None and cap.restored_via:
                _warn(f"{cap.target.origin}: restored through {cap.restored_via} ({cap.extra['restore_fallback']})")
        _say(args, "levels restored; fetching the window")
        stats = fetch_windows(kube, caps, out_dir, slack_s=slack, parallel=args.max_log_requests)
    finally:
        kube.close()
    _report(args, stats)
    for cap in caps:
        if cap.warning:
            _warn(cap.warning)
    _write_manifest(out_dir / "capture.json", {
        "command": "capture", "namespace": kube.namespace, "server": kube.server, "config": kube.source,
        "selector": args.selector, "duration_s": duration, "window_slack_s": slack,
        "pods": [c.as_dict() | {"trace_on": format_ns(c.t_on_ns), "trace_off": format_ns(c.t_off_ns)}
                 for c in caps]})
    _check_trace(stats, args.allow_no_trace, "the capture window (was there traffic?)")
    return run_analysis(args, [s.path for s in stats])


def _level_counts(levels: dict[str, str]) -> list[tuple[str, int]]:
    from collections import Counter

    return Counter(levels.values()).most_common()
