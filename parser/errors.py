"""Errors raised by envoy-dissector, and every exit code of ``envoy-dissect`` (``ExitCode``: one meaning each,
listed in docs/output.md). One base class; each error carries its code and the CLI returns it."""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit codes of ``envoy-dissect``: the only place they are numbered (docs/output.md lists them)."""

    OK = 0
    INTERNAL = 1  # an error with no code of its own (a bug)
    INPUT = 2  # unreadable input, or nothing parseable in it
    FORMAT = 3  # not an Envoy log in any known format
    MISSING_EXTRA = 4  # an optional part of the install is missing
    KUBE = 5  # Kubernetes configuration or API failure
    KUBE_FORBIDDEN = 6  # the API server rejected the credentials or an RBAC permission is missing
    KUBE_NOT_FOUND = 7  # pod, container or previous container instance not found
    NO_REQUEST_LINES = 8  # `analyze`: no request line at all (the log is at info level)
    LEVEL_RESTORE = 9  # `capture`: Envoy's log levels could not be put back
    NO_TRACE_LINES = 10  # `fetch` / `capture`: the fetched logs hold no trace-level line
    LAB = 11  # `lab`: Envoy, the upstream or the load could not be run
    USAGE = 64  # sysexits EX_USAGE
    SCHEDULER_UNREACHABLE = 69  # `fleet`: the Dask scheduler cannot be reached (sysexits EX_UNAVAILABLE)
    OUTPUT = 73  # an output cannot be written (sysexits EX_CANTCREAT)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143  # `dashboard`: stopped by SIGTERM (128 + SIGTERM)


class DissectorError(Exception):
    """Base of every error envoy-dissector raises on purpose."""

    exit_code: ExitCode = ExitCode.INTERNAL


class InputError(DissectorError):
    """Input cannot be read or holds nothing we understand.

    Rendered as ``path:line: expected ..., found ...`` when a location is known.
    """

    exit_code = ExitCode.INPUT

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 expected: str | None = None, found: str | None = None) -> None:
        self.path, self.line, self.expected, self.found = path, line, expected, found
        self.message = message
        where = path or ""
        if path and line is not None:
            where = f"{path}:{line}"
        parts = [p for p in (where, message) if p]
        text = ": ".join(parts)
        if expected:
            text += f" (expected {expected}"
            text += f", found {_redacted(found)!r})" if found is not None else ")"
        super().__init__(text)


class FormatError(InputError):
    """No known envelope format matches the input; lists what was tried."""

    exit_code = ExitCode.FORMAT


class OutputError(DissectorError):
    """An output cannot be written (``-o FILE``: disk full, permission denied, a path under a file; a full
    or closed stdout): not the input's fault (exit 73, sysexits EX_CANTCREAT, next to 64 = EX_USAGE)."""

    exit_code = ExitCode.OUTPUT

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class UsageError(DissectorError):
    """Bad command-line usage or arguments."""

    exit_code = ExitCode.USAGE


def _redacted(text: str) -> str:
    """Input quoted in an error message goes through the same redaction as every output."""
    from envoy_dissector.parser.redact import redact_text  # polars is imported only when an error is shown

    return redact_text(text)
