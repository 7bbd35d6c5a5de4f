"""``envoy-dissect lab``: run a lab scenario against a real Envoy and write a capture directory.

    envoy-dissect lab --list
    envoy-dissect lab keepalive -o /tmp/cap [--log-format istio-thread] [--requests 20]
    envoy-dissect lab mesh-mtls -o /tmp/mesh     # two Envoys, mutual TLS between them: /tmp/mesh/a, /tmp/mesh/b
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from envoy_dissector.cli.extras import require_extra
from envoy_dissector.lab.bench import BENCH_SCENARIOS
from envoy_dissector.lab.formats import DEFAULT_LOG_FORMAT, LOG_FORMATS
from envoy_dissector.lab.load import MAX_TOTAL_REQUESTS
from envoy_dissector.lab.scenarios import SCENARIOS, get_scenario
from envoy_dissector.parser.errors import UsageError

LOG_LEVELS = ("trace", "debug", "info")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``lab`` subcommand to an ``argparse`` subparsers object."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lab",
        help="run a real Envoy on 127.0.0.1 with a scenario and capture its trace log + timing truth",
        description="Start Envoy (from PATH or $ENVOY_BIN) at trace level on 127.0.0.1 behind a small "
                    "upstream, drive bounded load, and write envoy.log, access.jsonl (Envoy's own timing), "
                    "client.jsonl, upstream.jsonl and meta.json into DIR.",
    )
    parser.add_argument("scenario", nargs="?", metavar="SCENARIO", help="scenario name (see --list)")
    parser.add_argument("-o", "--out", metavar="DIR", help="capture directory to write")
    parser.add_argument("--log-format", default=DEFAULT_LOG_FORMAT, metavar="NAME_OR_STRING",
                        help=f"format name ({', '.join(LOG_FORMATS)}) or an Envoy --log-format pattern "
                             f"(\\t becomes TAB); default {DEFAULT_LOG_FORMAT}")
    parser.add_argument("--requests", type=int, metavar="N",
                        help=f"total requests (default: the scenario's; max {MAX_TOTAL_REQUESTS})")
    parser.add_argument("--concurrency", type=int, metavar="N", help="override Envoy's --concurrency")
    parser.add_argument("--log-level", choices=LOG_LEVELS, metavar="LEVEL",
                        help=f"Envoy's -l level ({', '.join(LOG_LEVELS)}; default trace): debug makes the "
                             "captures users often have (no socket lines)")
    parser.add_argument("--trace-headers", choices=("w3c", "b3", "mixed"), metavar="KIND",
                        help="mesh-mtls: the client sends a trace context, as an instrumented app does: w3c "
                             "(traceparent), b3, or mixed (w3c, b3, none in turn); recorded in client.jsonl")
    parser.add_argument("--list", action="store_true", help="list scenarios and log formats, then exit")
    parser.set_defaults(run=run)
    return parser


MESH = "mesh-mtls"


def _run_mesh(args: argparse.Namespace) -> int:
    from envoy_dissector.lab.mesh import run_mesh

    out = run_mesh(args.out, log_format=args.log_format, requests=args.requests,
                   trace_headers=getattr(args, "trace_headers", None) or "")
    meta = json.loads((out / "meta.json").read_text())
    print(f"mesh-mtls: {meta['requests']} requests through two Envoys, TLS handshakes {meta['ssl_handshakes']} "
          f"-> {out}/a (client sidecar), {out}/b (server sidecar)")
    for side in ("a", "b"):
        for warning in json.loads((out / side / "meta.json").read_text())["warnings"]:
            print(f"envoy-dissect lab: warning: {side}: {warning}", file=sys.stderr)
    return 0


def _list() -> int:
    print("scenarios:")
    width = max(len(n) for n in SCENARIOS)
    for name, scenario in SCENARIOS.items():
        print(f"  {name:<{width}}  {scenario.description}")
    print(f"  {MESH:<{width}}  Two Envoys like Istio sidecars, mutual TLS between them (client sidecar → server "
          "sidecar → app); writes DIR/a and DIR/b, each with its own truth.")
    for name, description in BENCH_SCENARIOS.items():
        print(f"  {name:<{width}}  {description}")
    print("log formats:")
    width = max(len(n) for n in LOG_FORMATS)
    for name, pattern in LOG_FORMATS.items():
        print(f"  {name:<{width}}  {pattern.encode('unicode_escape').decode('ascii')}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of ``envoy-dissect lab``; returns the exit code."""
    if args.list:
        return _list()
    if not args.scenario:
        raise UsageError("lab: give a SCENARIO (see `envoy-dissect lab --list`)")
    if args.scenario != MESH and args.scenario not in BENCH_SCENARIOS:
        get_scenario(args.scenario)  # validate before anything starts
    require_extra("lab", "envoy-dissect lab")
    if not args.out:
        raise UsageError("lab: -o/--out DIR is required")
    if args.requests is not None and not 1 <= args.requests <= MAX_TOTAL_REQUESTS:
        raise UsageError(f"lab: --requests must be within 1..{MAX_TOTAL_REQUESTS}")
    if args.concurrency is not None and not 1 <= args.concurrency <= 64:
        raise UsageError("lab: --concurrency must be within 1..64")
    if args.scenario == MESH:
        return _run_mesh(args)
    if getattr(args, "trace_headers", None):
        raise UsageError("lab: --trace-headers goes with mesh-mtls")
    if args.scenario in BENCH_SCENARIOS:
        from envoy_dissector.lab.bench import run_bench

        print(f"{args.scenario} -> {run_bench(args.scenario, args.out, log_format=args.log_format)}")
        return 0
    from envoy_dissector.lab.run import run_scenario

    out = run_scenario(args.scenario, args.out, log_format=args.log_format, requests=args.requests,
                       concurrency=args.concurrency, log_level=args.log_level)
    meta = json.loads((out / "meta.json").read_text())
    counts = meta["counts"]
    print(f"{meta['scenario']}: {counts['client_requests']} requests, status {counts['status']}, "
          f"{counts['envoy_log_bytes']} log bytes ({counts['envoy_log_bytes_per_request']}/request), "
          f"Envoy {meta['envoy']['version']} exit {meta['envoy']['exit_code']} -> {out}")
    for warning in meta["warnings"]:
        print(f"envoy-dissect lab: warning: {warning}", file=sys.stderr)
    return 0
