"""`envoy-dissect` command line: thin front end over the parser and analysis stages.

Each subcommand lives in its own module of this package and registers itself through a
``register(subparsers)`` function; ``SUBCOMMANDS`` lists them, imported explicitly.
Exit codes (docs/output.md): 0 ok, 1 internal error, 2 unreadable input or nothing parseable,
3 not an Envoy log in any known format, 4 an optional extra is not installed, 5-9 Kubernetes
failures (fetch/capture; 8 also when `analyze` finds no request line: info level), 64 usage error
(argparse's own errors too), 73 an output file cannot be written, 130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from envoy_dissector.cli import analyze, compare, dashboard, fleet, kube, lab, parse
from envoy_dissector.parser.errors import DissectorError, UsageError

SUBCOMMANDS = (parse, analyze, compare, fleet, lab, kube, dashboard)


class _Parser(argparse.ArgumentParser):
    """argparse with the documented usage exit code (64, sysexits EX_USAGE) instead of its own 2; subcommand
    parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(UsageError.exit_code, f"{self.prog}: error: {message}\n")


def package_version() -> str:
    try:
        return version("envoy-dissector")
    except PackageNotFoundError:  # running from a checkout without an install
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="envoy-dissect",
        description="Where did the time go inside an Envoy / istio-proxy sidecar? Reads trace logs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
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
