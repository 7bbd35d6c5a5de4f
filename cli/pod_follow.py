"""Pods' sidecar logs followed through the Kubernetes API while their Envoys log at a raised level (``watch`` and
``dashboard --follow pod/NAME``).

The order keeps the tool's own admin requests out of the analysis and no raised line out of it:

    open     every pod's log stream, from now on (``follow=true``, ``tailLines=0``), and wait until each is open
    raise    every pod to the level (``kube/capture.py``'s ``run_capture``, as ``capture`` raises it)
    follow   until Ctrl-C, the end of the wait, or a stream's failure or end
    close    the streams (lines on their way read for ``DRAIN_S`` first), so nothing after this reaches the pipe
    restore  every raised pod (always, as ``capture`` restores it): its admin requests are logged after the close

Each line goes into the pipe as ``kubectl logs --prefix --timestamps`` prints it (the parser makes
``POD/CONTAINER`` its origin).
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from envoy_dissector.cli.tail import LineCarry, LivePipe, Pump
from envoy_dissector.kube.capture import PodCapture, run_capture
from envoy_dissector.kube.client import Kube, PodTarget
from envoy_dissector.kube.errors import KubeError

#: Bytes asked of a log stream at a time.
CHUNK_BYTES = 64 * 1024
#: A followed log silent this long ends the follow with an error (a quiet pod for minutes is fine).
QUIET_S = 3600.0
#: When the follow ends, lines still on their way are read this long before the streams are closed.
DRAIN_S = 1.0


class PodStream:
    """One pod's log from now on into a pipe: ``feed`` is a pump's work, ``opened`` is set once the API server
    answered (the stream's "now" is fixed), ``interrupt`` closes it."""

    def __init__(self, kube: Kube, target: PodTarget, pipe: LivePipe) -> None:
        self.kube, self.target, self.pipe = kube, target, pipe
        self.opened = threading.Event()
        self._response: list[Any] = []

    def _open(self) -> Any:
        kube, target = self.kube, self.target
        return kube.core.read_namespaced_pod_log(
            target.name, target.namespace, container=target.container, follow=True, timestamps=True, tail_lines=0,
            _preload_content=False, _request_timeout=(kube.connect_timeout_s, QUIET_S))

    def feed(self, stop: threading.Event) -> None:
        from envoy_dissector.kube.deadline import within

        kube, target = self.kube, self.target
        prefix = f"[pod/{target.name}/{target.container}] ".encode()
        try:
            resp = within(kube.connect_timeout_s + kube.read_timeout_s, f"the log of {target.origin}", self._open)
        except KubeError:
            raise
        except Exception as exc:
            raise kube.api_error(exc, verb="get", resource="pods/log", purpose="to follow the sidecar's log",
                                 name=target.name) from None
        self._response.append(resp)
        self.opened.set()
        carry = LineCarry()
        try:
            for chunk in resp.stream(CHUNK_BYTES, decode_content=True):
                lines = carry.lines(chunk)
                if lines:
                    self.pipe.write(prefix + lines[:-1].replace(b"\n", b"\n" + prefix) + b"\n")
        except Exception as exc:
            if not stop.is_set():  # (closed by ``interrupt`` at the end: not an error)
                raise KubeError(f"following the log of {target.origin} failed: {exc}") from None
        finally:
            rest = carry.rest()
            if rest:
                self.pipe.write(prefix + rest)
        if not stop.is_set():  # (a follow would otherwise go on without input, the level still raised)
            raise KubeError(f"the log of {target.origin} ended: the container stopped, or the API server closed "
                            "the stream")

    def interrupt(self) -> None:
        for resp in self._response:  # (shutdown wakes a read blocked on the socket; close alone does not)
            for end in ("shutdown", "close"):
                try:
                    getattr(resp, end, lambda: None)()
                except Exception:
                    pass


class PodStreams:
    """Every target's log stream feeding ``pipe``, each on a pump thread of its own."""

    def __init__(self, kube: Kube, targets: Sequence[PodTarget], pipe: LivePipe, *, thread_prefix: str) -> None:
        self.pipe = pipe
        self.streams = [PodStream(kube, t, pipe) for t in targets]
        self.pumps = [Pump(f"{thread_prefix}-{s.target.name}", s.feed, interrupt=s.interrupt, drain_s=DRAIN_S)
                      for s in self.streams]

    def start(self) -> None:
        for pump in self.pumps:
            pump.start()

    @property
    def error(self) -> BaseException | None:
        """The first pump's failure (a stream that could not open, broke, or ended)."""
        return next((p.error for p in self.pumps if p.error is not None), None)

    def wait_open(self, tick: Callable[[float], None]) -> None:
        """Return once every stream is open; ``tick(seconds)`` waits (and raises to give up: Ctrl-C)."""
        while not all(s.opened.is_set() for s in self.streams):
            if self.error is not None:
                raise self.error
            tick(0.05)

    def close(self) -> None:
        """Read what is on its way, close the streams, then the pipe's writing end: nothing more gets in."""
        for pump in self.pumps:
            pump.stop()
        self.pipe.close_writer()


def follow_raised(kube: Kube, caps: Sequence[PodCapture], streams: PodStreams, *, level: str, duration_s: float,
                  sleep: Callable[[float], None], on_raised: Callable[[], None] | None = None) -> None:
    """Open ``streams`` (started by the caller), raise every pod of ``caps`` to ``level`` (then ``on_raised``), wait
    ``duration_s`` (``sleep`` raises to end it sooner), close the streams, restore the levels (always)."""
    streams.wait_open(sleep)
    pending = [on_raised] if on_raised is not None else []

    def wait(seconds: float) -> None:
        while pending:
            pending.pop()()
        sleep(seconds)

    run_capture(kube, list(caps), duration_s, level=level, sleep=wait, before_restore=streams.close)
