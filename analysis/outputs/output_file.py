"""Writing an output file: all or nothing, and every failure an ``OutputError`` (exit 73), never a traceback.

The data goes to a temporary file beside the target, renamed over it when complete: a full disk or
an interrupted run leaves no half-written file, and an existing output stays intact until the new
one is whole. Special files (``/dev/null``, a FIFO) are written in place.
"""
from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from envoy_dissector.parser.errors import OutputError


def _reason(exc: BaseException, directory: Path) -> str:
    text = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)).splitlines()[0:1]
    reason = text[0] if text else type(exc).__name__
    if "No space left" in reason:
        return "No space left on device"
    if isinstance(exc, OSError):
        return reason
    try:
        if shutil.disk_usage(directory).free < 1 << 20:  # parquet's writer says "thrift transport error"
            return f"No space left on device ({reason})"
    except OSError:
        pass
    return reason


@contextmanager
def output_path(path: str | Path) -> Iterator[str]:
    """Yields the path to write to; on success it becomes ``path``. Raises OutputError on any failure."""
    target = Path(path)
    parent = target.parent
    if target.exists() and not target.is_file():
        if target.is_dir():
            raise OutputError(f"{path}: cannot write: is a directory")
        try:
            yield str(target)  # a device or FIFO: write in place
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise OutputError(f"{path}: cannot write: {_reason(exc, parent)}") from exc
        return
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"{path}: cannot write: {parent} is not a directory") from None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {_reason(exc, parent)}") from exc
    temporary = parent / f".{target.name}.{secrets.token_hex(4)}.part"
    try:
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies
        yield str(temporary)
        os.replace(temporary, target)
    except (OSError, pl.exceptions.PolarsError) as exc:
        _remove(temporary)
        raise OutputError(f"{path}: cannot write: {_reason(exc, parent)}") from exc
    except BaseException:
        _remove(temporary)
        raise


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
