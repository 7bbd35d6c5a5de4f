"""Reconstruction throughput: ``analyse(events)`` on a big events frame (prints numbers; not a test).

    python bench/analysis_throughput.py [--fixture fixtures/istio-thread/workers/envoy.log.gz]
                                        [--events 5000000] [--repeat 1] [--profile]
    python bench/analysis_throughput.py --corpus /tmp/envoy-corpus/corpus.log [--corpus-mb 200]

How the frame is made (the parser is not timed here; bench/parse_throughput.py measures it):

* default: one real fixture capture is parsed into events once, then replicated until the frame
  holds ``--events`` rows. Copy k is shifted so it reads like the same proxy later on: timestamps
  by k × (capture span + 1 s), connection ids (``conn_id``, ``upstream_conn_id``) by k × (max id + 1),
  stream ids and line numbers likewise, x-request-ids get ``-k``. Thread ids stay (one long-lived
  process), so the event-loop model sees long per-worker histories.
* ``--corpus``: parse the first ``--corpus-mb`` MB of a real corpus (bench/make_corpus.py) into events.

Measures wall time of ``analyse`` (requests, phases, loop model, loop queue; best of ``--repeat``),
events/s, requests/s, and peak RSS (VmHWM) of a process that only loads the frame and analyses
it (the frame is built, saved to /tmp/analysis-bench-events.parquet and analysed by a fresh run of this script).
Target: ≥ 1 M events/s on a 2-core machine. Wall time suffers from anything else running: the load
average is printed with the result.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

from envoy_dissector.analysis.engine.pipeline import analyse
from envoy_dissector.parser.pipeline import iter_parse
from envoy_dissector.parser.schema import EVENT_SCHEMA

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FIXTURE = REPO / "fixtures" / "istio-thread" / "workers" / "envoy.log.gz"


def peak_rss_mb() -> float:
    """Peak RSS of this process image (VmHWM; ru_maxrss would carry the parent's peak over fork+exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def parse_events(source: str, limit_bytes: int | None = None) -> pl.DataFrame:
    if limit_bytes is not None:
        with open(source, "rb") as fh:
            data = fh.read(limit_bytes)
        cut = data.rfind(b"\n20")  # end on a record start so no record is cut
        tmp = Path("/tmp/analysis-bench-corpus-head.log")
        tmp.write_bytes(data[: cut + 1] if cut > 0 else data)
        source = str(tmp)
    chunks = [c.events for c in iter_parse(source)]
    return pl.concat(chunks).cast(EVENT_SCHEMA)  # type: ignore[arg-type]


def replicate(events: pl.DataFrame, target_rows: int) -> pl.DataFrame:
    copies = max(1, -(-target_rows // events.height))
    span = int(events["ts_us"].max() - events["ts_us"].min()) + 1_000_000  # type: ignore[operator]
    conn_step = int(max(events["conn_id"].max() or 0, events["upstream_conn_id"].max() or 0)) + 1  # type: ignore[arg-type]
    line_step = int(events["line_no"].max()) + 1  # type: ignore[arg-type]
    big = pl.DataFrame({"copy": range(copies)}, schema={"copy": pl.Int64}).join(events, how="cross")
    copy = pl.col("copy")
    big = big.with_columns(
        ts_us=pl.col("ts_us") + copy * span,
        line_no=pl.col("line_no") + copy * line_step,
        conn_id=pl.col("conn_id") + copy * conn_step,
        upstream_conn_id=pl.col("upstream_conn_id") + copy * conn_step,
        stream_id=pl.col("stream_id") + copy.cast(pl.UInt64) * 1_000_003,
        x_request_id=pl.col("x_request_id") + pl.lit("-") + copy.cast(pl.String),
    )
    # One long-lived proxy, not a restart per copy: keep only the first copy's `initializing epoch` line
    # (an Envoy restart inside one log starts a new origin).
    restart = (pl.col("kind") == "server_lifecycle_noise") & pl.col("message").str.starts_with("initializing epoch")
    big = big.filter(~(restart & (pl.col("copy") > 0))).drop("copy")
    return big.cast(EVENT_SCHEMA).sort("ts_us", "line_no")  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", default=str(DEFAULT_FIXTURE))
    ap.add_argument("--events", type=int, default=5_000_000, help="rows in the replicated events frame")
    ap.add_argument("--corpus", help="parse a real corpus instead of replicating a fixture")
    ap.add_argument("--corpus-mb", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3, help="runs of analyse(); the best is reported")
    ap.add_argument("--profile", action="store_true", help="cProfile one analyse() run, top 25 by cumulative time")
    ap.add_argument("--frame", help="events frame (parquet) to load; default: build it, save it to /tmp and "
                                    "re-run this script on it so peak RSS is the analysis', not the build's")
    args = ap.parse_args(argv)

    if args.frame:
        events = pl.read_parquet(args.frame)
        print(f"events frame: {events.height:,} rows, {events.estimated_size() / 2**20:.0f} MiB, loaded from "
              f"{args.frame} (RSS after loading {peak_rss_mb():.0f} MiB)")
        return measure(events, args.repeat, args.profile)

    t0 = time.perf_counter()
    if args.corpus:
        events = parse_events(args.corpus, args.corpus_mb * 1024 * 1024)
        how = f"{args.corpus} (first {args.corpus_mb} MB)"
    else:
        base = parse_events(args.fixture)
        events = replicate(base, args.events)
        how = f"{args.fixture} × {events.height // base.height} copies ({base.height} events each)"
    built = time.perf_counter() - t0
    print(f"built {events.height:,} events from {how} in {built:.1f} s (peak RSS of the build {peak_rss_mb():.0f} MiB)")
    frame = Path("/tmp/analysis-bench-events.parquet")
    events.write_parquet(frame)
    del events
    sys.stdout.flush()
    rest = list(argv if argv is not None else sys.argv[1:])
    # A fresh process (ru_maxrss survives exec): its peak RSS is the loaded frame plus the analysis.
    return subprocess.run([sys.executable, __file__, *rest, "--frame", str(frame)], check=False).returncode


def measure(events: pl.DataFrame, repeat: int, profile: bool) -> int:
    best = None
    result = None
    for _ in range(repeat):
        result = None  # free the previous run's frames first
        t = time.perf_counter()
        result = analyse(events)
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    assert result is not None and best is not None
    n_req = result.requests.height
    complete = int(result.requests["complete"].sum())
    print(f"load average while running: {os.getloadavg()[0]:.1f} (other work on the machine inflates wall time)")
    print(f"analyse (best of {repeat}): {best:.2f} s → {events.height / best / 1e6:.2f} M events/s, "
          f"{n_req / best:,.0f} requests/s ({n_req:,} requests, {complete:,} complete, "
          f"{result.phases.height:,} phase rows, "
          f"{result.loop.height:,} loop slices)")
    print(f"peak RSS: {peak_rss_mb():.0f} MiB")

    if profile:
        prof = cProfile.Profile()
        prof.enable()
        analyse(events)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
