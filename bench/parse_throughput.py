"""Parser throughput on a corpus file (prints numbers; not a test).

    python bench/parse_throughput.py [CORPUS] [--workers N] [--block-mb MB]
                                     [--sample-lines 20000] [--skip-full]

CORPUS defaults to /tmp/envoy-corpus/corpus.log (see bench/make_corpus.py).

Measures, on a warm page cache:

* full parse into events with ``iter_parse`` (chunks are counted and dropped,
  never held): MB/s, lines/s, records/s, peak RSS of this process;
* ``grep -c thread=`` on the same file, and parse time / grep time;
* per-line ANTLR: the grammar on each of ``--sample-lines`` records taken from
  the middle of the corpus — once uncached (``parse_message.__wrapped__``, the
  real per-line cost) and once as the slow path runs it (``classify(...,
  fast=False)``, with its per-text cache) — in lines/s and MB/s of raw log; the fast path on the
  same sample, cold (a grammar call per new shape) and warm;
* number of distinct message shapes (grammar calls of the fast path) and
  lines the fast path handed to the grammar one by one.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.classify import Classifier, classify
from envoy_dissector.parser.grammar import parse_message
from envoy_dissector.parser.pipeline import WORKERS, iter_parse, parse_text

DEFAULT_CORPUS = Path("/tmp/envoy-corpus/corpus.log")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def warm(path: Path) -> None:
    with path.open("rb") as fh:
        while fh.read(64 << 20):
            pass


def time_grep(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(["grep", "-c", "thread=", str(path)], capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, int(out.stdout.strip() or 0)


def full_parse(path: Path, workers: int, block_mb: float) -> dict[str, float]:
    rows = chunks = 0
    t0 = time.perf_counter()
    run = iter_parse(path, shapes=shape_cache, workers=workers, block_bytes=int(block_mb * 2**20))
    for chunk in run:
        rows += chunk.events.height
        chunks += 1
    diag = run.diagnostics
    wall = time.perf_counter() - t0
    size = path.stat().st_size
    assert rows == diag.records, (rows, diag.records)
    assert diag.lines_read == diag.lines_in_records + diag.lines_malformed
    return {"wall_s": wall, "mb": size / 1e6, "mb_s": size / 1e6 / wall, "lines": diag.lines_read,
            "lines_s": diag.lines_read / wall, "records": diag.records, "records_s": diag.records / wall,
            "malformed": diag.lines_malformed, "unknown": diag.records_unknown, "chunks": chunks,
            "shapes": diag.shapes, "grammar_calls": diag.grammar_calls,
            "fallback_lines": getattr(diag, "fallback_lines", 0), "format": diag.format}


def sample_records(path: Path, n: int) -> tuple[pl.DataFrame, int]:
    """``n`` records from the middle of the corpus, and the raw bytes of their lines."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        fh.seek(size // 2)
        fh.readline()  # to a line start
        data = fh.read(max(8 << 20, n * 400))
    text = data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")
    parsed = parse_text(text)
    records = parsed.events.head(n)
    first = records["line_no"].min()
    last = records["line_no"].max() + records["n_lines"].tail(1).item() - 1
    lines = text.split("\n")[first - 1 : last]
    raw_bytes = sum(len(line.encode()) + 1 for line in lines)
    # classify() needs first_line beside logger, as the envelope stage makes it.
    records = records.with_columns(first_line=pl.col("message").str.split("\n").list.first())
    return records, raw_bytes


def per_line_antlr(records: pl.DataFrame, raw_bytes: int) -> dict[str, float]:
    texts = (records["logger"].fill_null("") + "\t" + records["first_line"].fill_null("")).to_list()
    raw = parse_message.__wrapped__
    t0 = time.perf_counter()
    for text in texts:
        raw(text)
    uncached = time.perf_counter() - t0
    parse_message.cache_clear()
    t0 = time.perf_counter()
    classify(records, fast=False)
    slow = time.perf_counter() - t0
    classifier = Classifier()
    parse_message.cache_clear()
    t0 = time.perf_counter()
    classify(records, fast=True, classifier=classifier)  # cold: one grammar call per new shape
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    classify(records, fast=True, classifier=classifier)  # warm shape table, as in the middle of a capture
    fast = time.perf_counter() - t0
    n = len(texts)
    return {"lines": n, "raw_mb": raw_bytes / 1e6, "shapes": len(classifier.rules),
            "uncached_lines_s": n / uncached, "uncached_mb_s": raw_bytes / 1e6 / uncached,
            "slow_lines_s": n / slow, "slow_mb_s": raw_bytes / 1e6 / slow,
            "cold_lines_s": n / cold, "cold_mb_s": raw_bytes / 1e6 / cold,
            "fast_lines_s": n / fast, "fast_mb_s": raw_bytes / 1e6 / fast}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--workers", type=int, default=WORKERS, help=f"parser threads (default {WORKERS})")
    ap.add_argument("--block-mb", type=float, default=16.0, help="block size read per chunk (default 16)")
    ap.add_argument("--sample-lines", type=int, default=20000, help="records for the per-line ANTLR sample")
    ap.add_argument("--skip-full", action="store_true", help="only the per-line sample")
    args = ap.parse_args(argv)
    path: Path = args.corpus
    if not path.exists():
        raise SystemExit(f"{path}: no such corpus; run bench/make_corpus.py first")
    print(f"corpus: {path} ({path.stat().st_size / 1e6:.1f} MB); cpus {os.cpu_count()}, "
          f"workers {args.workers}, block {args.block_mb:g} MiB, polars {pl.__version__}")
    warm(path)
    rss0 = peak_rss_mb()
    if not args.skip_full:
        grep_s, grep_n = time_grep(path)
        with tempfile.TemporaryDirectory(prefix="shape-cache-") as cache:
            # the first run starts with an empty shape table (and fills the cache); the second reads it
            os.environ["ENVOY_DISSECTOR_CACHE"] = "1"
            os.environ["ENVOY_DISSECTOR_CACHE_DIR"] = cache
            for label in ("cold", "warm"):
                r = full_parse(path, args.workers, args.block_mb)
                print(f"parse ({label}: {r['grammar_calls']} grammar calls):  {r['wall_s']:.1f} s  "
                      f"{r['mb_s']:.1f} MB/s  {r['lines_s']:,.0f} lines/s  {r['records_s']:,.0f} records/s")
        print(f"        {r['lines']:,} lines, {r['records']:,} records ({r['format']}), "
              f"{r['malformed']} malformed, {r['unknown']} unknown, {r['chunks']} chunks")
        print(f"        {r['shapes']} distinct shapes, "
              f"{r['fallback_lines']} distinct texts checked by the grammar one by one")
        print(f"peak RSS: {peak_rss_mb():.0f} MB (before parsing: {rss0:.0f} MB)")
        print(f"grep -c thread=: {grep_s:.2f} s ({grep_n:,} lines) -> parse/grep = {r['wall_s'] / grep_s:.1f}x")
    records, raw_bytes = sample_records(path, args.sample_lines)
    a = per_line_antlr(records, raw_bytes)
    print(f"per-line ANTLR on {a['lines']:,} records ({a['raw_mb']:.2f} MB of log):")
    print(f"  grammar per line, uncached:  {a['uncached_lines_s']:,.0f} lines/s  {a['uncached_mb_s']:.3f} MB/s")
    print(f"  classify(fast=False):        {a['slow_lines_s']:,.0f} lines/s  {a['slow_mb_s']:.3f} MB/s")
    print(f"  classify(fast=True), cold:   {a['cold_lines_s']:,.0f} lines/s  {a['cold_mb_s']:.1f} MB/s "
          f"({a['shapes']} shapes parsed by the grammar)")
    print(f"  classify(fast=True), warm:   {a['fast_lines_s']:,.0f} lines/s  {a['fast_mb_s']:.1f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
