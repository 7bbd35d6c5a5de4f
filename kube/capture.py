"""``capture``: trace on, wait, restore (always), then fetch exactly that window.

Sequence per run::

    preflight  every pod: reach admin (proxy or port-forward), read its levels, check pods/log access
    raise      every pod: POST /logging?level=trace           (t_on recorded just before)
    wait       --duration                                     (Ctrl-C / SIGTERM end it)
    restore    every raised pod, whatever happened before     (t_off recorded after)
    fetch      every pod: sinceSeconds covering the window, lines outside [t_on, t_off] dropped

Restoring runs in a ``finally`` with SIGINT/SIGTERM deferred, so a second
Ctrl-C cannot cut it short; a pod is put on the "to restore" list *before* its
trace request is sent, so a request that timed out after Envoy applied it is
still undone.
"""
from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from envoy_dissector.kube.admin import (
    EnvoyAdmin,
    PodProxy,
    PortForward,
    Transport,
    connect,
    manual_restore_hint,
    summarize_levels,
)
from envoy_dissector.kube.client import Kube, PodTarget
from envoy_dissector.kube.deadline import ApiTooSlow
from envoy_dissector.kube.errors import KubeError, LevelRestoreError
from envoy_dissector.kube.logs import LogStats, fetch_many, format_ns, log_path, stream_log


@dataclass
class PodCapture:
    target: PodTarget
    admin: EnvoyAdmin
    levels_before: dict[str, str]
    t_on_ns: int | None = None
    t_off_ns: int | None = None
    restored: bool = False
    restore_error: str | None = None
    restored_via: str | None = None
    """Set when the restore had to go through the other transport."""
    warning: str | None = None
    stats: LogStats | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.target.name, "container": self.target.container,
            "transport": self.admin.transport.name,
            "levels_before": summarize_levels(self.levels_before),
            "restored": self.restored,
        }
        if self.restore_error:
            out["restore_error"] = self.restore_error
        if self.restored_via:
            out["restored_via"] = self.restored_via
        if self.warning:
            out["warning"] = self.warning
        if self.stats is not None:
            out.update(self.stats.as_dict())
        return out


@contextmanager
def signals_handled(handler: Callable[[int, Any], None],
                    signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """``handler`` for ``signums`` inside the block, the previous handlers put back after it (``capture``,
    ``watch`` and ``analyze --follow``). Python lets only the main thread set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, previous in old.items():
            signal.signal(s, previous)


@contextmanager
def signals_raise() -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C (KeyboardInterrupt) inside the block (main thread only)."""

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    with signals_handled(on_term, (signal.SIGTERM,)):
        yield


@contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """SIGINT/SIGTERM are recorded (in the yielded list), not acted on, inside the block (main thread only)."""
    received: list[int] = []
    with signals_handled(lambda signum, frame: received.append(signum)):
        yield received


def preflight(kube: Kube, targets: list[PodTarget], via: str,
              note: Callable[[str], None]) -> list[PodCapture]:
    """Reach every pod's admin and read its levels; check that its log can be read. Changes nothing."""
    caps = []
    for target in targets:
        admin, levels = connect(kube, target, via=via, note=note)
        if set(levels.values()) == {"trace"}:
            note(f"{target.origin}: already at trace level (it will be left there)")
        try:
            kube.call(kube.core.read_namespaced_pod_log, target.name, target.namespace, container=target.container,
                      tail_lines=1, limit_bytes=1024, what=f"the log of {target.origin}")
        except ApiTooSlow:
            raise
        except Exception as exc:
            raise kube.api_error(exc, verb="get", resource="pods/log", purpose="to read the sidecar's log",
                                 name=target.name) from None
        caps.append(PodCapture(target=target, admin=admin, levels_before=levels))
    return caps


def _restore_one(kube: Kube, cap: PodCapture) -> None:
    """Restore through the transport that worked; if it fails to carry the requests, through the other one."""
    try:
        cap.admin.restore(cap.levels_before)
    except LevelRestoreError:
        raise
    except KubeError as first:
        other: Transport = (PortForward(kube, cap.target) if isinstance(cap.admin.transport, PodProxy)
                            else PodProxy(kube, cap.target))
        try:
            EnvoyAdmin(cap.target, other).restore(cap.levels_before)
        except LevelRestoreError:
            raise
        except KubeError as second:
            raise KubeError(f"{first}; then through {other.name}: {second}") from None
        cap.restored_via = other.name
        cap.extra["restore_fallback"] = f"{cap.admin.transport.name} failed: {first}"
    cap.restored = True


def _restore_all(kube: Kube, raised: list[PodCapture]) -> list[str]:
    errors = []
    for cap in raised:
        try:
            _restore_one(kube, cap)
        except Exception as exc:
            text = str(exc)
            if not isinstance(exc, LevelRestoreError):
                text = f"{cap.target.origin}: restoring log levels failed: {text}; " + manual_restore_hint(
                    cap.target, cap.levels_before)
            cap.restore_error = text
            errors.append(text)
        finally:
            cap.t_off_ns = time.time_ns()
    return errors


def run_capture(kube: Kube, caps: list[PodCapture], duration_s: float, *, level: str = "trace",
                sleep: Callable[[float], None] = time.sleep,
                before_restore: Callable[[], None] | None = None) -> None:
    """Raise every pod to ``level``, wait ``duration_s``, restore every raised pod (always).

    ``before_restore`` runs first when the wait ends, however it ends (``watch`` closes its log streams there,
    so the admin requests that restore the levels are not read); the levels are restored even if it fails.

    Raises:
        LevelRestoreError: some pod could not be restored (after trying all of them); chained to
            the error that ended the capture, if any.
        KeyboardInterrupt: Ctrl-C or SIGTERM (levels restored first).
    """
    raised: list[PodCapture] = []
    failure: BaseException | None = None
    try:
        # A signal during a level request is acted on once the requests are done: a KeyboardInterrupt inside the
        # client library's request (mid-read, or holding its connection pool's lock) could leave the pool in a
        # state where the restore that follows hangs. The requests are bounded by the request timeout.
        with signals_deferred() as during_raise:
            for cap in caps:
                raised.append(cap)  # before the request: a timed-out request may still have applied
                cap.t_on_ns = time.time_ns()
                cap.admin.set_all(level)
        if during_raise:
            raise KeyboardInterrupt
        with signals_raise():
            deadline = time.monotonic() + duration_s
            while (left := deadline - time.monotonic()) > 0:
                sleep(min(left, 0.25))
    except BaseException as exc:
        failure = exc
        raise
    finally:
        with signals_deferred() as received:
            try:
                if before_restore is not None:
                    before_restore()
            except Exception as exc:
                failure = failure or exc
            errors = _restore_all(kube, raised)
        if errors:
            message = "; ".join(errors)
            if failure is not None:
                message += f" (the capture had already failed: {failure or failure.__class__.__name__})"
            raise LevelRestoreError(message) from failure
        if received and failure is None:
            raise KeyboardInterrupt
        if failure is not None:
            raise failure


#: A window whose first line comes this much after trace went on has lost its beginning.
LATE_START_S = 1.0


def fetch_windows(kube: Kube, caps: list[PodCapture], out_dir: Path, *, slack_s: float,
                  parallel: int = 5) -> list[LogStats]:
    """Fetch each pod's log lines stamped within [t_on - slack, t_off + slack]."""
    slack_ns = int(slack_s * 1e9)
    latest = max(c.t_off_ns or 0 for c in caps)
    wait = (latest + slack_ns - time.time_ns()) / 1e9
    if wait > 0:  # let the container runtime stamp the last lines of the window
        time.sleep(wait)
    jobs = []
    for cap in caps:
        assert cap.t_on_ns is not None and cap.t_off_ns is not None
        window = (cap.t_on_ns - slack_ns, cap.t_off_ns + slack_ns)
        since = max(1, math.ceil((time.time_ns() - window[0]) / 1e9) + 1)
        jobs.append(partial(_fetch_window, kube, cap, log_path(out_dir, cap.target), since, window))
    return fetch_many(jobs, parallel)


def _fetch_window(kube: Kube, cap: PodCapture, path: Path, since: int, window: tuple[int, int],
                  cancel: threading.Event) -> LogStats:
    stats = stream_log(kube, cap.target, path, since_seconds=since, window=window, cancel=cancel)
    stats.extra["since_seconds"] = since
    cap.stats = stats
    assert cap.t_on_ns is not None
    if stats.first_ts_ns is None or stats.first_ts_ns - cap.t_on_ns > LATE_START_S * 1e9:
        first = format_ns(stats.first_ts_ns) or "never"
        cap.warning = (f"{cap.target.origin}: trace went on at {format_ns(cap.t_on_ns)} but the log returned "
                       f"starts at {first}: the beginning of the window is missing (the kubelet returns only the "
                       "current log file; it rotates at containerLogMaxSize, 10 MiB by default). Use a shorter "
                       "--duration or less traffic")
    return stats


def check_running(targets: list[PodTarget]) -> None:
    bad = [f"{t.name} ({t.phase})" for t in targets if t.phase and t.phase != "Running"]
    if bad:
        raise KubeError(f"cannot capture on pods that are not Running: {', '.join(bad)}")
