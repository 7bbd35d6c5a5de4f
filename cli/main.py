"""`envoy-dissect` command line: thin front end over the parser and analysis stages.

Each subcommand lives in its own module of this package and registers itself through a
``register(subparsers)`` function; ``SUBCOMMANDS`` lists them, imported explicitly.
Exit codes (docs/output.md): 0 ok, 1 internal error, 2 unreadable input or nothing parseable,
3 not an Envoy log in any known format, 4 an optional extra is not installed, 5-9 Kubernetes
failures (fetch/capture; 8 also when `analyze` finds no request line: info level), 64 usage error,
130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from envoy_dissector.cli import analyze, compare, dashboard, fleet, kube, lab, parse
from envoy_dissector.parser.errors import DissectorError

SUBCOMMANDS = (parse, analyze, compare, fleet, lab, kube, dashboard)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="envoy-dissect",
        description="Where did the time go inside an Envoy / istio-proxy sidecar? Reads trace logs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except DissectorError as exc:
        print(f"envoy-dissect: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("envoy-dissect: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
