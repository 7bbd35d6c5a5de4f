"""Server-side registry of analysed captures ("datasets") and of the analysis jobs that make them.

Each browser session holds a random token (``dcc.Store(storage_type="session")``);
an upload becomes a dataset owned by that token, so two sessions never see each
other's data. Shared datasets (the bundled demo, captures given on the command
line) have no owner and are visible read-only to everyone.

Memory is bounded per session, never across sessions: each session keeps at most
``max_datasets`` uploads (its own least recently used one is dropped, with its files),
at most ``max_sessions`` sessions hold uploads at once (a new one is refused with
503 while all are active; one idle for ``session_idle_s`` is dropped to make room),
and a session has at most ``max_pending`` analyses queued. So one session's uploads
never evict another session's data. Analysis runs on a small thread pool and
reports progress as a fraction of the bytes read.

Nothing here touches Dash: the callbacks call these methods.

>>> reg = Registry(max_datasets=2)
>>> reg.visible("some-token")
[]
"""
from __future__ import annotations

import inspect
import secrets
import shutil
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import polars as pl

from envoy_dissector.analysis.capture import Capture, dissect
from envoy_dissector.analysis.schema import REQUEST_FRAME_SCHEMA
from envoy_dissector.dashboard.held import Detail, Held, hold
from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.errors import DissectorError
from envoy_dissector.parser.growing import GrowingFile
from envoy_dissector.parser.sources import Source

JobState = Literal["queued", "running", "done", "error"]
DEMO_FILES: tuple[tuple[str, str], ...] = (
    ("lua-cpu.log.gz", "demo: lua-cpu (1 worker saturated by a Lua filter)"),
    ("lua-cpu-baseline.log.gz", "demo: lua-cpu-baseline (same filter, no queueing)"),
)
TOKEN_BYTES = 18
JOB_TTL_S = 600
#: rows after which an upload's workers take their first window step (``StreamingAnalysis.first_window_events``):
#: its first requests reach the provisional overview after ~10 MB of a trace log rather than ~60
FIRST_WINDOW_EVENTS = 50_000
#: Columns of the finished requests a running analysis keeps for its provisional overview.
PARTIAL_COLUMNS = tuple(c for c in REQUEST_FRAME_SCHEMA if c.endswith("_us") or c in (
    "request_uid", "origin", "thread", "status", "complete", "internal", "first_ts", "last_ts", "authority",
    "path", "cluster", "method", "outcome"))


class RegistryFull(Exception):
    """An upload cannot be taken now; ``status`` is the HTTP status to answer with (429 or 503)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def new_id() -> str:
    """A random, unguessable id (tokens, dataset ids, job ids)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def valid_token(token: object) -> bool:
    """A session token as :func:`new_id` makes them (URL-safe base64, 24 characters)."""
    return (isinstance(token, str) and len(token) == 24
            and all(c.isalnum() or c in "-_" for c in token))


@dataclass
class Dataset:
    """One analysed capture."""

    id: str
    name: str
    #: the capture as held (``held.py``): the narrow requests frame, no phases or queueing rows
    capture: Capture = field(repr=False)
    #: the per-request detail on disk (full rows, phases, queueing windows)
    detail: Detail
    #: session token of the browser session that uploaded it; ``None`` = shared read-only (demo, CLI)
    owner: str | None
    #: when it was uploaded (an upload's analysis may end after a later one's) or loaded
    created: float = field(default_factory=time.time)
    #: last time a session read it (the LRU cap drops the owner's least recently used)
    used: float = field(default_factory=time.time)
    #: files or directories that belong to this dataset only (spill files...), removed when it is dropped
    files: tuple[Path, ...] = ()
    #: ``Capture.summary()`` of the whole capture (computed when it was held)
    summary_dict: dict[str, Any] = field(default_factory=dict, repr=False)
    #: the slowest complete client request (else the slowest), shown before one is chosen
    slowest_uid: str | None = None
    client_requests: int = 0
    #: the slowest request's log lines, read when the dataset was held
    slowest_lines: pl.DataFrame | None = field(default=None, repr=False)

    @classmethod
    def of(cls, held: Held, **kw: Any) -> Dataset:
        return cls(capture=held.capture, detail=held.detail, summary_dict=held.summary, slowest_uid=held.slowest_uid,
                   client_requests=held.client_requests, slowest_lines=held.slowest_lines, **kw)

    @property
    def shared(self) -> bool:
        return self.owner is None

    def summary(self) -> dict[str, Any]:
        """``Capture.summary()`` of the whole capture."""
        return self.summary_dict

    def request(self, request: str | dict[str, Any]) -> dict[str, Any]:
        """``Capture.request``: one full request row by ``request_uid`` or ``x_request_id`` (``KeyError``)."""
        return self.detail.row(request)

    def request_phases(self, row: dict[str, Any]) -> pl.DataFrame:
        return self.detail.phases(row)

    def request_queueing(self, row: dict[str, Any]) -> pl.DataFrame:
        return self.detail.queueing(row)

    def request_lines(self, row: dict[str, Any]) -> pl.DataFrame:
        """``Capture.request_lines`` of a full row (``request``); the slowest request's were read already."""
        if self.slowest_lines is not None and row["request_uid"] == self.slowest_uid:
            return self.slowest_lines
        return self.capture.request_lines(row)

    def release(self) -> None:
        """Remove the dataset's own files (called when it is dropped from the registry)."""
        if self.capture.line_index is not None:
            self.capture.line_index.close()
        for f in self.files:
            if f.is_dir():
                shutil.rmtree(f, ignore_errors=True)
            else:
                f.unlink(missing_ok=True)


@dataclass
class Job:
    """Analysis of one uploaded file, run in the background."""

    id: str
    owner: str | None
    name: str
    path: Path
    total_bytes: int | None
    delete: bool = True
    #: the Envoy ``--log-format`` the file was written with (custom formats only)
    log_format: str | None = None
    #: the file is still being written (an upload analysed as it arrives: ``parser/growing.py``)
    growing: GrowingFile | None = field(default=None, repr=False)
    #: the upload was refused or cut off after the job was submitted: it is dropped, never made a dataset
    withdrawn: bool = False
    state: JobState = "queued"
    submitted: float = field(default_factory=time.time)
    done_bytes: int = 0
    stage: str = "queued"
    error: str | None = None
    dataset_id: str | None = None
    started: float | None = None
    finished: float | None = None
    _partial: list[pl.DataFrame] = field(default_factory=list, repr=False)
    _partial_rows: int = 0
    _partial_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_finished(self, requests: pl.DataFrame, _phases: pl.DataFrame) -> None:
        """``on_finished`` of the streaming analysis: keep the batch for the provisional overview."""
        batch = requests.select(pl.col(c) if c in requests.columns else pl.lit(None, REQUEST_FRAME_SCHEMA[c]).alias(c)
                                for c in PARTIAL_COLUMNS)
        with self._partial_lock:
            self._partial.append(batch)
            self._partial_rows += batch.height

    @property
    def partial_rows(self) -> int:
        """Requests finished so far (all of them once the analysis is done)."""
        return self._partial_rows

    def partial(self) -> pl.DataFrame:
        """The requests finished so far (``PARTIAL_COLUMNS``; phase durations before the capture-wide steps:
        the event-loop queueing split and TLS handshake columns are still empty)."""
        with self._partial_lock:
            if len(self._partial) > 1:
                self._partial = [pl.concat(self._partial)]
            return self._partial[0] if self._partial else pl.DataFrame(
                schema={c: REQUEST_FRAME_SCHEMA[c] for c in PARTIAL_COLUMNS})

    def drop_partial(self) -> None:
        with self._partial_lock:
            self._partial = []

    @property
    def fraction(self) -> float:
        """Progress 0..1: reading/parsing is the first 90 %, the analysis after it the rest."""
        if self.state in ("done", "error"):
            return 1.0
        if self.stage == "analysing":
            return 0.92
        if not self.total_bytes:
            return 0.0
        return min(0.9 * self.done_bytes / self.total_bytes, 0.9)

    def describe(self) -> str:
        mb = (self.total_bytes or 0) / 1e6
        if self.state == "queued":
            return f"{self.name}: waiting for a free analysis slot"
        if self.state == "running" and self.stage == "parsing" and not self.total_bytes:  # (its size unknown)
            return (f"{self.name}: analysing ({self.done_bytes / 1e6:.0f} MB so far, "
                    f"{self.partial_rows:,} requests so far)")
        if self.state == "running" and self.stage == "parsing":
            return (f"{self.name}: analysing {self.fraction / 0.9:.0%} "
                    f"({self.done_bytes / 1e6:.0f} of ~{mb:.0f} MB, {self.partial_rows:,} requests so far)")
        if self.state == "running":
            return f"{self.name}: finishing the event-loop model, queueing and findings"
        if self.state == "error":
            error = self.error or "failed"
            return error if error.startswith(self.name) else f"{self.name}: {error}"
        took = (self.finished or 0) - (self.started or 0)
        return f"{self.name}: analysed in {took:.1f} s"


def decompressed_size(path: Path) -> int | None:
    """Bytes ``read_blocks`` will count for this file: its size, or for gzip the size the trailer
    records (modulo 4 GiB, so larger files fall back to an estimate of 8× the compressed size)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            return size
        if size < 18:
            return None
        fh.seek(-4, 2)
        isize = struct.unpack("<I", fh.read(4))[0]
    return isize if isize >= size else size * 8


Analyse = Callable[..., Capture]


class Registry:
    """Datasets by id and analysis jobs by id, thread-safe.

    Args:
        max_datasets: uploaded datasets kept per browser session (its least recently used one is
            dropped first); shared datasets do not count.
        max_sessions: sessions holding uploads (or analyses) at once; past it new sessions are refused.
        max_pending: analyses a session may have queued or running at once.
        session_idle_s: a session unused this long is dropped (with its datasets) when room is needed.
        workers: analyses run at once; more uploads wait in the queue.
        analyse: the function building a ``Capture`` (``dissect``: bounded memory, and the finished
            requests reach the job as they come, for the provisional overview; tests may pass a slower one).
        first_window_events: rows after which an analysis' workers take their first window step, when
            ``analyse`` takes it (``FIRST_WINDOW_EVENTS``).
    """

    def __init__(self, *, max_datasets: int = 4, max_sessions: int = 16, max_pending: int = 4,
                 session_idle_s: float = 3600.0, workers: int = 2, analyse: Analyse = dissect,
                 first_window_events: int = FIRST_WINDOW_EVENTS) -> None:
        self.max_datasets = max(1, max_datasets)
        self.max_sessions = max(1, max_sessions)
        self.max_pending = max(1, max_pending)
        self.session_idle_s = session_idle_s
        self._datasets: dict[str, Dataset] = {}
        self._jobs: dict[str, Job] = {}
        self._last_used: dict[str, float] = {}
        self._evict_listeners: list[Callable[[str], None]] = []
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="dissect-job")
        self._analyse = analyse
        self._streams = "on_finished" in inspect.signature(analyse).parameters
        self._first_window = "first_window_events" in inspect.signature(analyse).parameters
        self.first_window_events = first_window_events

    # -- datasets ---------------------------------------------------------------------------------
    def on_evict(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(dataset_id)`` whenever a dataset is dropped (caches keyed by dataset)."""
        self._evict_listeners.append(listener)

    def add(self, capture: Capture, *, name: str, owner: str | None, files: Sequence[Path] = (),
            created: float | None = None) -> Dataset:
        """Register an analysed capture; ``owner=None`` makes it shared read-only. Past the owner's cap
        its own least recently used dataset is dropped (never another session's). ``created``: when it was
        uploaded (default now); a new dataset counts as used then, so uploads analysed at once keep their order."""
        stamp = time.time() if created is None else created
        held_dir = Path(tempfile.mkdtemp(prefix="envoy-dissect-held-"))
        try:
            held = hold(capture, held_dir)
        except BaseException:
            shutil.rmtree(held_dir, ignore_errors=True)
            raise
        ds = Dataset.of(held, id=new_id(), name=name, owner=owner, files=(*files, held_dir), created=stamp,
                        used=stamp)
        # (a registry dropped without its datasets, as in a notebook or a test, leaves no directory behind)
        weakref.finalize(ds, shutil.rmtree, held_dir, True)
        with self._lock:
            self._datasets[ds.id] = ds
            if owner is not None:
                self._touch(owner)
                mine = sorted((d for d in self._datasets.values() if d.owner == owner), key=lambda d: d.used)
                dropped = [self._datasets.pop(d.id) for d in mine[: max(0, len(mine) - self.max_datasets)]]
            else:
                dropped = []
        self._released(dropped)
        return ds

    def _released(self, dropped: Sequence[Dataset]) -> None:
        for d in dropped:
            d.release()
            for listener in self._evict_listeners:
                listener(d.id)

    def _touch(self, owner: str | None) -> None:
        if owner is not None:
            self._last_used[owner] = time.time()

    def get(self, dataset_id: str | None, owner: str | None) -> Dataset | None:
        """The dataset if it is shared or owned by ``owner``; ``None`` otherwise (also for unknown ids)."""
        if not dataset_id or not isinstance(dataset_id, str):
            return None
        with self._lock:
            ds = self._datasets.get(dataset_id)
            if ds is None or not (ds.shared or (owner is not None and ds.owner == owner)):
                return None
            ds.used = time.time()
            self._touch(owner if ds.owner == owner else None)
            return ds

    def visible(self, owner: str | None) -> list[Dataset]:
        """Datasets this session may see: its own uploads (newest first), then the shared ones."""
        with self._lock:
            mine = [d for d in self._datasets.values() if owner is not None and d.owner == owner]
            shared = [d for d in self._datasets.values() if d.shared]
            if mine:
                self._touch(owner)
        return sorted(mine, key=lambda d: d.created, reverse=True) + sorted(shared, key=lambda d: d.created)

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._datasets)

    def forget(self, dataset_id: str, owner: str | None) -> bool:
        """Drop an owned dataset (shared ones cannot be dropped from a session)."""
        with self._lock:
            ds = self._datasets.get(dataset_id)
            if ds is None or ds.shared or ds.owner != owner:
                return False
            del self._datasets[dataset_id]
        self._released([ds])
        return True

    # -- sessions ------------------------------------------------------------------------------------
    def _pending(self, owner: str) -> int:
        return sum(1 for j in self._jobs.values() if j.owner == owner and j.state in ("queued", "running"))

    def _active_sessions(self) -> set[str]:
        owners = {d.owner for d in self._datasets.values() if d.owner is not None}
        owners |= {j.owner for j in self._jobs.values() if j.owner is not None and j.state in ("queued", "running")}
        return owners

    def sessions(self) -> int:
        """Sessions holding uploads or analyses now."""
        with self._lock:
            return len(self._active_sessions())

    def expire_idle(self, now: float | None = None) -> int:
        """Drop the datasets of sessions unused for ``session_idle_s`` (none with an analysis running);
        returns how many sessions were dropped."""
        now = time.time() if now is None else now
        with self._lock:
            idle = {o for o in self._active_sessions()
                    if self._pending(o) == 0 and now - self._last_used.get(o, 0.0) > self.session_idle_s}
            dropped = [self._datasets.pop(k) for k, d in list(self._datasets.items()) if d.owner in idle]
            for o in idle:
                self._last_used.pop(o, None)
        self._released(dropped)
        return len(idle)

    def admit(self, owner: str) -> None:
        """Raise :class:`RegistryFull` when ``owner`` may not start another analysis now."""
        with self._lock:
            if self._pending(owner) >= self.max_pending:
                raise RegistryFull(429, f"{self.max_pending} of your uploads are still being analysed: "
                                        "wait for one to finish")
            if owner in self._active_sessions():
                return
        if self.sessions() >= self.max_sessions:
            self.expire_idle()
        with self._lock:
            if len(self._active_sessions()) >= self.max_sessions:
                raise RegistryFull(503, f"the server holds data for {self.max_sessions} browser sessions, its "
                                        "limit: try again later (or ask whoever runs it for --max-sessions)")

    # -- jobs ---------------------------------------------------------------------------------------
    def submit(self, path: Path, *, name: str, owner: str | None, delete: bool = True,
               log_format: str | None = None, total_bytes: int | None = None,
               growing: GrowingFile | None = None) -> Job:
        """Analyse ``path`` in the background; the file is deleted afterwards when ``delete``.
        ``total_bytes``: its decompressed size when known (else read from the gzip trailer of a complete
        file). ``growing``: the file is still being written, and is read as it grows. Raises
        :class:`RegistryFull` (see :meth:`admit`) for an owned upload that may not start now."""
        if total_bytes is None and growing is None:
            total_bytes = decompressed_size(path)
        job = Job(id=new_id(), owner=owner, name=name, path=path, total_bytes=total_bytes, delete=delete,
                  log_format=log_format or None, growing=growing)
        with self._lock:
            if owner is not None:
                self.admit(owner)
                self._touch(owner)
            self._jobs[job.id] = job
        self._pool.submit(self._run, job)
        return job

    def withdraw(self, job: Job) -> None:
        """Drop a submitted job whose upload was refused or cut off: no session sees it again, and its analysis
        (which fails on the unfinished file, or has not begun) adds no dataset."""
        job.withdrawn = True
        with self._lock:
            self._jobs.pop(job.id, None)

    def _run(self, job: Job) -> None:
        if job.withdrawn:
            if job.delete:
                job.path.unlink(missing_ok=True)
            return
        job.state, job.stage, job.started = "running", "parsing", time.time()

        def advance(n: int) -> None:
            job.done_bytes += n

        keep = False
        try:
            kw: dict[str, Any] = {"format": "custom", "log_format": job.log_format} if job.log_format else {}
            if self._streams:
                kw["on_finished"] = job.add_finished
            if self._first_window:  # (the provisional overview's first requests sooner)
                kw["first_window_events"] = self.first_window_events
            capture = self._analyse(Source(job.name, path=job.path, growing=job.growing), progress=advance,
                                    name=job.name, redact=True, **kw)
            if job.withdrawn:
                raise DissectorError("withdrawn")
            job.stage = "analysing"
            # a streamed capture reads a request's lines again from the upload: the file now belongs to it
            keep = capture.line_index is not None and capture.line_index.path == job.path
            ds = self.add(capture, name=job.name, owner=job.owner, files=(job.path,) if keep and job.delete else (),
                          created=job.submitted)
            job.dataset_id, job.state = ds.id, "done"
        except DissectorError as exc:
            job.error, job.state = str(exc), "error"
        except Exception as exc:
            job.error, job.state = f"analysis failed ({type(exc).__name__}: {exc})", "error"
        finally:
            job.finished = time.time()
            job.drop_partial()
            if job.delete and not keep:
                job.path.unlink(missing_ok=True)

    def add_job(self, job: Job) -> None:
        """Register a job run elsewhere (``dashboard --follow``'s live job: shared when its owner is None)."""
        with self._lock:
            self._jobs[job.id] = job

    def job(self, job_id: str, owner: str | None) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
        return job if job is not None and job.owner in (owner, None) else None

    def poll(self, owner: str | None, seen: set[str] | frozenset[str] = frozenset()) -> tuple[list[Job], list[Job]]:
        """``(pending, finished)`` jobs of this session; ``finished`` leaves out the ids in ``seen`` (the
        browser keeps them, so a poll whose answer was lost is simply answered again)."""
        now = time.time()
        with self._lock:
            for j in list(self._jobs.values()):  # forget jobs finished long ago (every session's)
                if j.finished is not None and now - j.finished > JOB_TTL_S:
                    del self._jobs[j.id]
            mine = [j for j in self._jobs.values() if j.owner in (owner, None)]  # (None: shared, every session's)
            if mine:
                self._touch(owner)
            pending = [j for j in mine if j.state in ("queued", "running")]
            finished = [j for j in mine if j.state in ("done", "error") and j.id not in seen
                        and now - (j.finished or now) <= JOB_TTL_S]
        return pending, sorted(finished, key=lambda j: j.finished or 0)

    def wait(self, job: Job, timeout: float = 60.0) -> Job:
        """Block until ``job`` has finished (tests, CLI)."""
        deadline = time.time() + timeout
        while job.state not in ("done", "error") and time.time() < deadline:
            time.sleep(0.02)
        return job

    def shutdown(self, wait: bool = False) -> None:
        """Stop the analysis threads (queued analyses are dropped; ``wait`` for the running ones)."""
        self._pool.shutdown(wait=wait, cancel_futures=True)


def demo_sources() -> list[tuple[Source, str]]:
    """The bundled demo captures (package data ``demo/*.log.gz``) as sources, with their labels."""
    root = resources.files("envoy_dissector.dashboard") / "demo"
    out = []
    for filename, label in DEMO_FILES:
        res = root / filename
        if res.is_file():
            out.append((Source(f"demo/{filename}", path=Path(str(res))), label))
    return out


#: the demo captures analysed in this process, by file (path, size, mtime) and label: every app made in one process
#: (the tests make many) shows the same ones, so each is analysed once; a registry holds its own narrowed copy
#: (``hold``), so the datasets, their files and the sessions stay each app's own
_DEMO_CAPTURES: dict[tuple[str, int, int, str], Capture] = {}
_DEMO_LOCK = threading.Lock()


def demo_capture(source: Source, label: str) -> Capture:
    """The analysis of one demo capture, made on the first call for this file as it is now (then the same one)."""
    path = source.path
    if path is None:
        return dissect(source, name=label, shapes=shape_cache)
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns, label)
    with _DEMO_LOCK:
        if key not in _DEMO_CAPTURES:
            _DEMO_CAPTURES[key] = dissect(source, name=label, shapes=shape_cache)
        return _DEMO_CAPTURES[key]


def load_demo(registry: Registry) -> list[Dataset]:
    """Register the bundled demo captures as shared read-only datasets (each analysed once a process)."""
    return [registry.add(demo_capture(src, label), name=label, owner=None) for src, label in demo_sources()]


def load_shared(registry: Registry, sources: Sequence[tuple[Source | str | Path, str]],
                **dissect_kw: Any) -> list[Dataset]:
    """Analyse captures now (streamed: bounded memory) and register them as shared read-only datasets (demo,
    CLI arguments)."""
    out = []
    for src, label in sources:
        capture = dissect(src if isinstance(src, Source) else str(src), name=label, shapes=shape_cache, **dissect_kw)
        out.append(registry.add(capture, name=label, owner=None))
    return out


__all__ = ["Dataset", "Job", "Registry", "RegistryFull", "decompressed_size", "demo_capture", "demo_sources",
           "load_demo", "load_shared", "new_id", "valid_token"]
