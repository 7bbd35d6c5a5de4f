"""``dashboard --follow FILE|pod/NAME``: the followed log's analysis feeds a live job every browser session sees
(``dashboard/live_job.py``); the log is read and analysed on threads of their own for as long as the server runs.

A pod (``pod/NAME``, where ``-n``/``-c``/``--kubeconfig``/``--context`` say) is followed as ``watch`` follows it
(``cli/pod_follow.py``): its log stream opened, its Envoy raised to trace, and when the server stops (or the
follow fails) the stream closed and the levels restored as ``capture`` restores them. docs/follow.md.
"""
from __future__ import annotations

import argparse
import math
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envoy_dissector.cli.follow import LiveAnalysis
from envoy_dissector.cli.tail import FileFollower, LivePipe, Pump, follow_file
from envoy_dissector.dashboard.datasets import Registry
from envoy_dissector.dashboard.live_job import LiveJob, start_live_job
from envoy_dissector.kube.client import DEFAULT_CONTAINER
from envoy_dissector.kube.errors import LevelRestoreError
from envoy_dissector.parser.errors import InputError, UsageError
from envoy_dissector.parser.sources import shown_name

#: How a pod is named to ``--follow`` (kubectl's spelling); anything else is a file.
POD_PREFIX = "pod/"
#: The level a followed pod's Envoy logs at while the server runs.
FOLLOW_LEVEL = "trace"
#: Longest wait, when the server stops, for a followed pod's stream to close and its levels to be restored (each
#: admin request has its own timeout within it: ``--request-timeout``).
STOP_WAIT_S = 300.0


@dataclass
class Following:
    """A follow the server runs: its live job and how to end it (``stop`` returns once a pod's levels are back)."""

    job: LiveJob
    stop: Callable[[], None]


def follow_into(registry: Registry, target: str, dissect_kw: dict[str, Any], args: argparse.Namespace) -> Following:
    """Start following ``target`` — a log file (rotation handled) or ``pod/NAME`` — into a shared live job."""
    if target.startswith(POD_PREFIX):
        return _follow_pod(registry, target[len(POD_PREFIX):], dissect_kw, args)
    given = [option for option, value in (("-n", args.namespace), ("--kubeconfig", args.kubeconfig),
                                          ("--context", args.context)) if value is not None]
    if args.container != DEFAULT_CONTAINER:
        given.append("-c")
    if given:
        raise UsageError(f"{', '.join(given)}: only with --follow pod/NAME (--follow {target} is a file)")
    path = Path(target)
    if path.is_dir():
        raise InputError("is a directory; follow one log file", path=shown_name(target))
    name = shown_name(target)
    job = start_live_job(registry, name, path)
    pipe = LivePipe(name)
    engine = _analysis(pipe, job, dissect_kw)
    pump = Pump("envoy-dissect-dashboard-tail", follow_file(FileFollower(path), pipe))

    def watch() -> None:  # an analysis that ends (a bad format, the log unreadable) is shown as the job's error
        engine.done.wait()
        failure = engine.error or pump.error
        job.error, job.state = (str(failure) if failure else "the follow ended"), "error"

    engine.start()
    pump.start()
    threading.Thread(target=watch, name="envoy-dissect-dashboard-follow", daemon=True).start()
    return Following(job, stop=lambda: None)


def _analysis(pipe: LivePipe, job: LiveJob, dissect_kw: dict[str, Any]) -> LiveAnalysis:
    engine = LiveAnalysis(pipe.source, format=dissect_kw.get("format", "auto"), log_format=dissect_kw.get("log_format"),
                          redact=dissect_kw.get("redact", True), on_finished=job.add_finished)
    job.count_lines = lambda: engine.lines_read
    return engine


class _Stopped(Exception):
    """The follow is over: the server stops, the stream failed or the analysis ended."""


def _follow_pod(registry: Registry, pod: str, dissect_kw: dict[str, Any], args: argparse.Namespace) -> Following:
    from envoy_dissector.cli.kube import connect
    from envoy_dissector.cli.pod_follow import PodStreams, follow_raised
    from envoy_dissector.kube.capture import check_running, preflight

    if not pod or "/" in pod:
        raise UsageError(f"--follow {POD_PREFIX}{pod}: name one pod, as {POD_PREFIX}NAME")
    kube, targets = connect(args, [pod], None, command=f"dashboard --follow {POD_PREFIX}NAME")
    try:
        check_running(targets)
        caps = preflight(kube, targets, "auto", note=_say)
    except BaseException:
        kube.close()
        raise
    target = targets[0]
    name = f"pod {target.namespace}/{target.origin}"
    job = start_live_job(registry, name)
    pipe = LivePipe(name)
    engine = _analysis(pipe, job, dissect_kw)
    streams = PodStreams(kube, targets, pipe, thread_prefix="envoy-dissect-dashboard-follow")
    stopping = threading.Event()

    def sleep(seconds: float) -> None:
        if stopping.wait(seconds) or streams.error is not None or engine.done.is_set():
            raise _Stopped

    def run() -> None:
        outcome: BaseException | None = None
        try:
            follow_raised(kube, caps, streams, level=FOLLOW_LEVEL, duration_s=math.inf, sleep=sleep,
                          on_raised=lambda: _say(f"following {name} at level {FOLLOW_LEVEL}; its levels are "
                                                 "restored when the server stops"))
        except _Stopped:
            pass
        except BaseException as exc:  # (a level that could not be raised or restored)
            outcome = exc
        finally:
            streams.close()
            kube.close()
        if stopping.is_set():
            if outcome is not None:
                _say(f"envoy-dissect: error: {outcome}")
            return
        failure = outcome or streams.error or engine.error or "the log stream closed"
        levels = "" if isinstance(outcome, LevelRestoreError) else "; Envoy's log levels are as they were"
        job.error, job.state = f"the follow ended: {failure}{levels}", "error"
        _say(f"envoy-dissect: warning: {name}: {job.error}")

    follower = threading.Thread(target=run, name="envoy-dissect-dashboard-follow", daemon=True)

    def stop() -> None:
        stopping.set()
        follower.join(STOP_WAIT_S)

    engine.start()
    streams.start()
    follower.start()
    return Following(job, stop=stop)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
