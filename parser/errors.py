"""Errors raised by envoy-dissector. One base class; the CLI maps each to an exit code."""
from __future__ import annotations


class DissectorError(Exception):
    """Base of every error envoy-dissector raises on purpose."""

    exit_code = 1


class InputError(DissectorError):
    """Input cannot be read or holds nothing we understand.

    Rendered as ``path:line: expected ..., found ...`` when a location is known.
    """

    exit_code = 2

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
            text += f", found {found!r})" if found is not None else ")"
        super().__init__(text)


class FormatError(InputError):
    """No known envelope format matches the input; lists what was tried."""

    exit_code = 3


class OutputError(DissectorError):
    """An output (``-o FILE``) cannot be written: not the input's fault (exit 73, sysexits EX_CANTCREAT)."""

    exit_code = 73

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class UsageError(DissectorError):
    """Bad command-line usage or arguments."""

    exit_code = 64
