"""Stream one container's log from the API server to a file, chunk by chunk.

The API is asked for ``timestamps=true`` (each line starts with the RFC3339Nano
time at which the container runtime read it). Each line is written as::

    [pod/NAME/CONTAINER] 2025-01-02T03:04:05.123456789Z <the line Envoy wrote>

i.e. exactly what ``kubectl logs --prefix --timestamps`` prints, so the parser
unwraps it and reports ``origin = NAME/CONTAINER``, and files of several pods
can be analysed together (or concatenated) without losing where a line came from.

Memory stays bounded: the response is read in :data:`CHUNK_BYTES` pieces and
written out before the next one is read (only a partial last line is carried).
A time window (``capture``) drops lines whose runtime timestamp falls outside it;
whole chunks inside the window are written without looking at each line.
"""
from __future__ import annotations

import calendar
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from envoy_dissector.kube.client import Kube, PodTarget
from envoy_dissector.kube.deadline import ApiTooSlow, within
from envoy_dissector.kube.errors import KubeError

CHUNK_BYTES: Final = 64 * 1024
#: Byte patterns of a trace-level record in the envelope formats we know (Istio text, Istio JSON, Envoy).
TRACE_MARKERS: Final = (b"\ttrace\t", b'"level":"trace"', b"][trace][")


class Cancelled(Exception):
    """The fetch was told to stop (another fetch failed, or Ctrl-C)."""


@dataclass
class LogStats:
    """What one container log fetch produced."""

    target: PodTarget
    path: Path
    previous: bool = False
    lines: int = 0
    bytes: int = 0
    trace_lines: int = 0
    dropped_before: int = 0
    dropped_after: int = 0
    unstamped: int = 0
    """Lines without a parseable timestamp (kept when there is no window, dropped with one)."""
    first_ts_ns: int | None = None
    last_ts_ns: int | None = None
    window: tuple[int, int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.target.name, "container": self.target.container, "namespace": self.target.namespace,
            "origin": self.target.origin, "file": str(self.path), "previous": self.previous,
            "lines": self.lines, "bytes": self.bytes, "trace_lines": self.trace_lines,
            "first_timestamp": format_ns(self.first_ts_ns), "last_timestamp": format_ns(self.last_ts_ns),
        }
        if self.window is not None:
            out.update(window_start=format_ns(self.window[0]), window_end=format_ns(self.window[1]),
                       dropped_before_window=self.dropped_before, dropped_after_window=self.dropped_after,
                       dropped_unstamped=self.unstamped)
        out.update(self.extra)
        return out


_SECONDS_CACHE: dict[bytes, int] = {}


def parse_rfc3339_ns(ts: bytes) -> int | None:
    """Epoch nanoseconds of an RFC3339 / RFC3339Nano timestamp (any fraction length, ``Z`` or offset)."""
    if len(ts) < 20 or ts[4:5] != b"-" or ts[10:11] not in (b"T", b"t"):
        return None
    base = ts[:19]
    secs = _SECONDS_CACHE.get(base)
    if secs is None:
        try:
            secs = calendar.timegm((int(ts[0:4]), int(ts[5:7]), int(ts[8:10]),
                                    int(ts[11:13]), int(ts[14:16]), int(ts[17:19]), 0, 0, 0))
        except ValueError:
            return None
        if len(_SECONDS_CACHE) > 100_000:
            _SECONDS_CACHE.clear()
        _SECONDS_CACHE[base] = secs
    rest = ts[19:]
    frac = 0
    if rest[:1] == b".":
        end = 1
        while end < len(rest) and 48 <= rest[end] <= 57:
            end += 1
        digits = rest[1:end]
        if not digits:
            return None
        frac = int(digits[:9].ljust(9, b"0"))
        rest = rest[end:]
    if rest in (b"Z", b"z"):
        offset = 0
    elif len(rest) == 6 and rest[:1] in (b"+", b"-") and rest[3:4] == b":":
        try:
            offset = (int(rest[1:3]) * 3600 + int(rest[4:6]) * 60) * (1 if rest[:1] == b"+" else -1)
        except ValueError:
            return None
    else:
        return None
    return (secs - offset) * 1_000_000_000 + frac


def line_ts_ns(line: bytes) -> int | None:
    """Timestamp of an API log line (``TIMESTAMP SP text``)."""
    space = line.find(b" ", 0, 40)
    if space < 0:
        return parse_rfc3339_ns(line.rstrip(b"\r"))  # an empty line carries only its timestamp
    return parse_rfc3339_ns(line[:space])


def format_ns(ns: int | None) -> str | None:
    """RFC3339 with nanoseconds, UTC (``2025-01-02T03:04:05.123456789Z``)."""
    if ns is None:
        return None
    secs, frac = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(secs, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def count_trace(data: bytes) -> int:
    return sum(data.count(marker) for marker in TRACE_MARKERS)


def log_path(out_dir: Path, target: PodTarget, previous: bool = False) -> Path:
    """``OUT/POD/CONTAINER.log`` (``CONTAINER.previous.log`` for ``--previous``)."""
    return out_dir / target.name / (f"{target.container}.previous.log" if previous else f"{target.container}.log")


class _Writer:
    """Prefixes, filters by window, counts, writes."""

    def __init__(self, fh: Any, stats: LogStats, prefix: bytes, window: tuple[int, int] | None) -> None:
        self.fh, self.stats, self.prefix, self.window = fh, stats, prefix, window
        self.joiner = b"\n" + prefix

    def _write_lines(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = self.prefix + self.joiner.join(lines) + b"\n"
        self.fh.write(data)
        st = self.stats
        st.lines += len(lines)
        st.bytes += len(data)
        st.trace_lines += count_trace(data)
        first, last = line_ts_ns(lines[0]), line_ts_ns(lines[-1])
        if first is not None and st.first_ts_ns is None:
            st.first_ts_ns = first
        if last is not None:
            st.last_ts_ns = last

    def lines(self, lines: list[bytes]) -> None:
        if not lines:
            return
        if self.window is None:
            self._write_lines(lines)
            return
        start, end = self.window
        first, last = line_ts_ns(lines[0]), line_ts_ns(lines[-1])
        if first is not None and last is not None and start <= first and last <= end:
            self._write_lines(lines)  # whole chunk inside the window (runtime timestamps are ordered)
            return
        keep: list[bytes] = []
        for line in lines:
            ts = line_ts_ns(line)
            if ts is None:
                self.stats.unstamped += 1
            elif ts < start:
                self.stats.dropped_before += 1
            elif ts > end:
                self.stats.dropped_after += 1
            else:
                keep.append(line)
        self._write_lines(keep)


def stream_log(kube: Kube, target: PodTarget, out_path: Path, *, since_seconds: int | None = None,
               previous: bool = False, window: tuple[int, int] | None = None,
               cancel: threading.Event | None = None, chunk_bytes: int = CHUNK_BYTES) -> LogStats:
    """Stream ``target``'s log into ``out_path`` (via ``out_path.part``, renamed when complete).

    Args:
        since_seconds: the API's ``sinceSeconds`` (None: the whole log).
        previous: the previous (terminated) instance of the container.
        window: (start, end) epoch ns; lines stamped outside it are dropped.
        cancel: checked between chunks; when set the fetch stops and the partial file is removed.

    Raises:
        KubeNotFound / KubeForbidden / KubeError: mapped API failures.
    """
    stats = LogStats(target=target, path=out_path, previous=previous, window=window)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    part = out_path.with_name(out_path.name + ".part")
    purpose = "to read the sidecar's log" + (" (previous instance)" if previous else "")
    try:
        resp = kube.call(kube.core.read_namespaced_pod_log, target.name, target.namespace,
                         container=target.container, timestamps=True, since_seconds=since_seconds,
                         previous=previous or None, _preload_content=False, what=f"the log of {target.origin}")
    except ApiTooSlow:
        raise
    except Exception as exc:
        raise kube.api_error(exc, verb="get", resource="pods/log", purpose=purpose,
                             name=target.name) from None
    prefix = f"[pod/{target.name}/{target.container}] ".encode()
    ok = False
    try:
        with part.open("wb") as fh:
            writer = _Writer(fh, stats, prefix, window)
            carry = b""
            chunks = resp.stream(chunk_bytes, decode_content=True)
            # each chunk within the read timeout: a server trickling bytes cannot hold the stream open
            while (chunk := within(kube.read_timeout_s, f"the log of {target.origin}",
                                   lambda: next(chunks, None))) is not None:
                if cancel is not None and cancel.is_set():
                    raise Cancelled(target.origin)
                if not chunk:
                    continue
                data = carry + chunk if carry else chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data
                    continue
                carry = data[cut + 1:]
                writer.lines(data[:cut].split(b"\n"))
            if carry:
                writer.lines([carry])
        part.replace(out_path)
        ok = True
    except Cancelled:
        raise
    except OSError as exc:
        if isinstance(exc, (ConnectionError, TimeoutError)) or exc.__class__.__module__.startswith("urllib3"):
            raise KubeError(f"reading the log of {target.origin} failed: {exc}") from None
        raise KubeError(f"writing {out_path} failed: {exc}") from None
    except Exception as exc:  # urllib3 ProtocolError / ReadTimeoutError during the stream
        if exc.__class__.__module__.startswith("urllib3"):
            raise KubeError(f"reading the log of {target.origin} failed: {exc}") from None
        raise
    finally:
        if not ok:
            resp.close()  # do not hand a half-read connection back to the pool
        resp.release_conn()
        if not ok:
            part.unlink(missing_ok=True)
    return stats


def fetch_many(jobs: Sequence[Callable[[threading.Event], LogStats]], parallel: int) -> list[LogStats]:
    """Run fetch ``jobs`` (each given the shared cancel event), ``parallel`` at once, results in order.

    The first failure (or Ctrl-C) sets the cancel event, so the other streams stop at
    their next chunk and remove their partial files; the failure is re-raised.
    """
    if not jobs:
        return []
    cancel = threading.Event()
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(jobs))), thread_name_prefix="fetch") as pool:
        futures = [pool.submit(job, cancel) for job in jobs]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future in done and future.exception() is not None:
                    raise future.exception()  # type: ignore[misc]
            return [future.result() for future in futures]
        except BaseException:
            cancel.set()
            for future in futures:
                future.cancel()
            raise
