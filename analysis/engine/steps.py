"""Where the streaming analysis' window steps run: threads, each worker's steps in turn, outputs in given order.

``StreamingAnalysis`` (``analysis/engine/streaming.py``) decides *what* a step does (the windowing: a worker's window,
carry, finished requests); ``Steps`` decides *where and when* it runs. A step is two parts: its work on the state of
a few keys (a worker's window, carry, loop slices, …), which runs after those keys' previous steps and beside the
steps of other keys (``STEP_THREADS``), and what it adds to the shared output, returned by the work as an
``Apply`` and run in the order the steps were given (``_Ordered``). So the output is the same as in line, batch
for batch, whichever step's work ends first. ``beside`` runs a part of a step's work (its own state only) on
another pool while the step goes on.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

#: What a step adds to the shared output, run once every step given before it has added its own.
Apply = Callable[[], None]
#: Window steps of different workers run side by side on this many threads (a step's polars queries often run
#: on one core; with the intake blocked behind a step, the parser's threads sat idle).
STEP_THREADS = 2
#: Window steps given and not yet done at most, beyond one per step thread (each holds a worker's new lines).
STEPS_AHEAD = 1


class _Ordered:
    """Runs the steps' outputs in the order the steps were given, whichever step's work ends first: the thread
    that hands in output number ``next`` runs it and every later one already waiting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, Apply] = {}
        self._next = 0

    def hand_in(self, index: int, apply: Apply) -> None:
        with self._lock:
            self._waiting[index] = apply
            while self._next in self._waiting:
                self._waiting.pop(self._next)()
                self._next += 1


class Steps:
    """Runs steps on threads of their own (``background``), or each at once where it is given."""

    def __init__(self, background: bool = True) -> None:
        self.background = background
        self._stepper: ThreadPoolExecutor | None = None
        #: runs a part of a step's work beside the rest of it (``beside``)
        self._sider: ThreadPoolExecutor | None = None
        self._steps: deque[Future[None]] = deque()
        #: each key's last step given (the next one's work waits for it)
        self._last: dict[Hashable, Future[None]] = {}
        self._given = 0
        self._ordered = _Ordered()
        self._failed = False

    def give(self, work: Callable[[], Apply], keys: Sequence[Hashable] = ()) -> None:
        """Run a step: ``work`` (on the state of ``keys`` only) returns what the step adds to the shared output.
        When ``background``, the work runs on a step thread once the keys' previous steps are done, beside other
        keys' steps, and its output is added once every step given before it has added its own: the state and
        the output change exactly as in line; what a step reads of the caller's state must be taken when it is
        given. Else it runs here. A step's error is raised here, at the next step or at ``drain``."""
        if not self.background:
            work()()
            return
        if self._stepper is None:
            self._stepper = ThreadPoolExecutor(max_workers=STEP_THREADS, thread_name_prefix="envoy-dissect-window")
            self._sider = ThreadPoolExecutor(max_workers=STEP_THREADS, thread_name_prefix="envoy-dissect-window-side")
        while len(self._steps) > STEPS_AHEAD + STEP_THREADS - 1 or (self._steps and self._steps[0].done()):
            self._steps.popleft().result()
        before = [self._last[k] for k in keys if k in self._last]
        index, self._given = self._given, self._given + 1
        step = self._stepper.submit(self._run, index, before, work)
        for key in keys:
            self._last[key] = step
        self._steps.append(step)

    def beside(self, part: Callable[..., T], *args: object) -> Callable[[], T]:
        """``part(*args)`` on the side pool while the caller goes on (at once when steps run in line); call the
        result for its value."""
        if self._sider is None:
            done = part(*args)
            return lambda: done
        return self._sider.submit(part, *args).result

    def _run(self, index: int, before: list[Future[None]], work: Callable[[], Apply]) -> None:
        """A step given ``index``-th, after ``before`` (its keys' previous steps: given earlier, so started
        earlier on the step threads), unless an earlier step failed (the state is then in no shape to go on
        from)."""
        for step in before:
            step.result()
        if self._failed:
            return
        try:
            apply = work()
            self._ordered.hand_in(index, apply)
        except BaseException:
            self._failed = True
            raise

    def drain(self) -> None:
        """Wait for the steps given so far (their errors are raised here; once each step's work is done, every
        output has been added: the last step to hand its output in added the ones waiting for it)."""
        while self._steps:
            self._steps.popleft().result()
        self._last.clear()

    def close(self) -> None:
        """Stop the threads (steps not started are dropped)."""
        if self._stepper is not None:
            self._stepper.shutdown(wait=True, cancel_futures=True)
            self._stepper = None
        if self._sider is not None:
            self._sider.shutdown(wait=True, cancel_futures=True)
            self._sider = None
        self._steps.clear()
        self._last.clear()
