"""`envoy-dissect` command line: thin front end over the parser and analysis stages.

Each subcommand lives in its own module of this package and registers itself through a
``register(subparsers)`` function; ``SUBCOMMANDS`` lists them. They are imported inside ``main()``
(they import polars): Ctrl-C during those imports is an interruption like any other, not a traceback.
Exit codes: ``ExitCode`` in parser/errors.py, one meaning each, listed in docs/output.md.
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn, TextIO

from envoy_dissector.analysis.outputs.terminal import SafeStdout, StdoutError, terminal_safe
from envoy_dissector.parser.errors import DissectorError, ExitCode, OutputError, UsageError

SUBCOMMANDS = ("parse", "analyze", "compare", "fleet", "lab", "kube", "watch", "dashboard")


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


class _Version(argparse.Action):
    """``--version``: two lines (argparse's own version action would fold them into one)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> NoReturn:
        print(version_text())
        parser.exit(0)


def version_text() -> str:
    """``envoy-dissect X.Y.Z`` and whether the compiled parser is on (``compiled parser: off (why)`` if not)."""
    from envoy_dissector.parser.extension import status

    return f"envoy-dissect {package_version()}\ncompiled parser: {status()}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="envoy-dissect",
        description="Where did the time go inside an Envoy / istio-proxy sidecar? Reads trace logs.",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and whether the compiled "
                        "parser is on, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"envoy_dissector.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure is one line on stderr and an exit code (docs/output.md).

    Everything printed on stdout goes through ``terminal_safe`` (log content may hold escape sequences).
    """
    stdout = sys.stdout
    sys.stdout = SafeStdout(stdout)  # type: ignore[assignment]
    try:
        code = _run(argv)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        print("envoy-dissect: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): not an error
        _silence(stdout)
        return 0
    except DissectorError as exc:
        print(f"envoy-dissect: error: {terminal_safe(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except StdoutError as exc:
        _silence(stdout)  # /dev/full, a closed stdout: print raised
        print(f"envoy-dissect: error: cannot write to standard output: {exc.strerror or exc}", file=sys.stderr)
        return OutputError.exit_code
    finally:
        sys.stdout = stdout


def _run(argv: Sequence[str] | None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:  # without the subcommands' imports (0.3 s)
        print(version_text())
        return 0
    with _sigint_held():  # imports the subcommands: Ctrl-C here is an interruption too, once they are in
        parser = build_parser()
    # The modules' objects live as long as the process: kept out of the cyclic collector, whose full passes over
    # them were 0.1 CPU-s of a 243 MB capture's analysis (bench/README.md, 2026-11-29).
    gc.freeze()
    args = parser.parse_args(argv)
    return int(args.run(args) or 0)


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT blocked on this thread) until the block ends; one that came meanwhile is then delivered
    and raises ``KeyboardInterrupt`` as usual.

    Importing polars installs its own SIGINT handler in front of the interpreter's (signal-hook, chaining to it);
    a SIGINT that lands while that handler is being installed sometimes ended the process by the signal after the
    interrupted message (2 of 40 in a loop). The threads polars starts meanwhile inherit the blocked mask, so a
    later Ctrl-C goes to this thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _silence(stream: TextIO | None) -> None:
    """Point the stream's descriptor at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError):
        pass


def entry() -> NoReturn:
    """The ``envoy-dissect`` console script: :func:`main`, then :func:`leave`."""
    leave(main())


def leave(code: int) -> NoReturn:
    """Exit with ``code`` without the interpreter's teardown of every module, once the command is done.

    The teardown frees the grammar's, polars' and the analysis' objects one by one: 0.13 s of wall at the end of
    every run (bench/README.md, 2026-11-29). The exit handlers still run (the spill directories' removal, logging's
    flush) and the standard streams are flushed; a thread that is not a daemon (one a command left running) gets
    the ordinary exit, which waits for it.
    """
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.current_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
