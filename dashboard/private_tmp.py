"""One private directory for every temporary file of a dashboard server, gone when the server is.

Uploads in progress and kept for their datasets, a gzip upload's decompressed copy (read again for a
request's log lines), spilled frames and waitress's request-body buffers all go through :mod:`tempfile`;
the server points ``tempfile.tempdir`` at a directory of its own, ``envoy-dissector-dashboard-<pid>-*``
(0700, files in it 0600 under the server's umask). The CLI removes it at exit, on SIGTERM and on SIGINT;
a server killed outright (SIGKILL, a power cut) leaves it, and the next server to start removes every
such directory of this user whose process is gone.

>>> owner_pid(Path("/tmp/envoy-dissector-dashboard-4242-abc")), owner_pid(Path("/tmp/other"))
(4242, None)
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PREFIX = "envoy-dissector-dashboard-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-")


def owner_pid(path: Path) -> int | None:
    """The process id a server directory's name carries (None: not one of ours)."""
    m = _NAME.match(path.name)
    return int(m.group(1)) if m else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_stale(parent: Path) -> list[Path]:
    """Remove the directories left in ``parent`` by servers of this user that are no longer running;
    returns them. A directory of a running process (or of another user, or a symlink) is left alone."""
    removed = []
    for path in parent.glob(PREFIX + "*"):
        pid = owner_pid(path)
        try:
            info = path.lstat()
        except OSError:
            continue
        if pid is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or _running(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


@contextmanager
def private_tempdir() -> Iterator[Path]:
    """A private directory in the system's temporary directory (made after sweeping stale ones) that every
    temporary file of this process goes to meanwhile, with new files private (umask 077); removed after,
    and ``tempfile`` and the umask as they were."""
    parent = Path(tempfile.gettempdir())
    sweep_stale(parent)
    umask, tempdir = os.umask(0o077), tempfile.tempdir
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
    tempfile.tempdir = str(root)
    try:
        yield root
    finally:
        tempfile.tempdir = tempdir
        os.umask(umask)
        remove(root)


def remove(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)


__all__ = ["PREFIX", "owner_pid", "private_tempdir", "remove", "sweep_stale"]
