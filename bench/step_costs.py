"""Where the streaming analysis' CPU goes on a capture, step by step (prints numbers; not a test).

    POLARS_MAX_THREADS=1 python bench/step_costs.py [CORPUS] [--events /tmp/step-costs-events.parquet]

The capture is parsed once into events (saved to ``--events`` and reused while CORPUS is older), then fed to
``StreamingAnalysis`` in the parser's chunks (16 MiB blocks: ~91.6 k rows each) with the window steps in line
(``background=False``), so ``time.process_time`` (every thread of the process) is the analysis' own CPU when
polars has one thread. Prints the whole analysis' CPU, each call of the requests and phases stages (a window step
or the final step of ended workers, with its rows and CPU), the new lines' side work (loop slices, record gaps,
health-check bursts), and the per-thread split of each chunk with its minor page faults and system time (the
split copies every column of the chunk: fresh pages).
"""
from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from envoy_dissector.analysis.engine import streaming
from envoy_dissector.parser.pipeline import iter_parse
from envoy_dissector.parser.schema import EVENT_SCHEMA

CHUNK_ROWS = 91_600

calls: list[tuple[str, int, float]] = []  # (stage call kind, rows, CPU s)
splits: list[tuple[float, int, float]] = []  # (CPU s, minor faults, system s)


def _events(corpus: Path, cache: Path) -> pl.DataFrame:
    if not cache.exists() or cache.stat().st_mtime < corpus.stat().st_mtime:
        pl.concat([c.events for c in iter_parse(str(corpus))]).cast(EVENT_SCHEMA).write_parquet(  # type: ignore[arg-type]
            cache)
    return pl.read_parquet(cache)


def _timed(kind: str, inner: Callable[..., Any], rows: Callable[[tuple[Any, ...]], int]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        t0 = time.process_time()
        try:
            return inner(*args)
        finally:
            calls.append((kind, rows(args), time.process_time() - t0))
    return wrapper


def _split(inner: Callable[[pl.DataFrame], Any]) -> Callable[[pl.DataFrame], Any]:
    def wrapper(lines: pl.DataFrame) -> Any:
        before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
        out = inner(lines)
        after = resource.getrusage(resource.RUSAGE_SELF)
        splits.append((time.process_time() - t0, after.ru_minflt - before.ru_minflt, after.ru_stime - before.ru_stime))
        return out
    return wrapper


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", default="/tmp/envoy-corpus-200/corpus.log")
    ap.add_argument("--events", default="/tmp/step-costs-events.parquet")
    args = ap.parse_args()
    events = _events(Path(args.corpus), Path(args.events))
    chunks = [events.slice(i, CHUNK_ROWS).rechunk() for i in range(0, events.height, CHUNK_ROWS)]
    del events
    engine_class = streaming.StreamingAnalysis
    engine_class._stages = _timed("window", engine_class._stages, lambda a: a[2][3].height)  # type: ignore[method-assign]
    engine_class._final_stages = _timed(  # type: ignore[method-assign]
        "final", engine_class._final_stages, lambda a: sum(step[3].height for _, step in a[1]))
    engine_class._lines_side = _timed(  # type: ignore[method-assign]
        "side", engine_class._lines_side, lambda a: 0 if a[2] is None else a[2].height)
    streaming._per_thread = _split(streaming._per_thread)  # type: ignore[assignment]
    t0 = time.process_time()
    engine = engine_class(background=False)
    for chunk in chunks:
        engine.add(chunk)
    done = engine.finish()
    total = time.process_time() - t0
    rows = sum(c.height for c in chunks)
    print(f"{args.corpus}: {rows:,} events in {len(chunks)} chunks, {done.requests.height:,} requests; "
          f"analysis {total:.2f} CPU-s (POLARS_MAX_THREADS={os.environ.get('POLARS_MAX_THREADS', 'unset')})")
    stage_calls = [c for c in calls if c[0] != "side"]
    for kind, n, cpu in stage_calls:
        print(f"  stages ({kind:6s}) {n:9,} rows  {cpu * 1e3:7.1f} ms")
    print(f"  stage calls: {len(stage_calls)}, {sum(c[2] for c in stage_calls):.2f} CPU-s")
    side = [c for c in calls if c[0] == "side"]
    print(f"  side work: {len(side)} calls, {sum(c[2] for c in side):.2f} CPU-s")
    print(f"  per-thread split: {len(splits)} chunks, {sum(s[0] for s in splits):.2f} CPU-s, "
          f"{sum(s[1] for s in splits):,} minor faults, {sum(s[2] for s in splits):.2f} s system")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
