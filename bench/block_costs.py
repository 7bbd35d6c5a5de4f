"""What a block costs beyond its lines: captures parsed and analysed cut in small blocks and whole (prints numbers;
not a test).

    POLARS_MAX_THREADS=1 python bench/block_costs.py [CAPTURE ...] [--blocks 32] [--repeats 5]

Each capture is cut as ``tests/analysis/test_determinism.py``'s small-block way cuts it (a ``--blocks``-th of it,
at least 4 KiB) and read whole (16 MiB blocks). The parse (``iter_parse`` with the analysis' columns, one parse
worker) and the engine (``StreamingAnalysis`` fed the parsed chunks, steps in line) are timed apart, each the
median of ``--repeats`` runs of every capture in process CPU; the difference per extra block is the fixed cost of
a block. Without a capture, three fixtures of ~220 KB.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from envoy_dissector.analysis.engine.streaming import StreamingAnalysis
from envoy_dissector.analysis.schema import ANALYSED_COLUMNS
from envoy_dissector.parser.pipeline import iter_parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEFAULT = [FIXTURES / "istio/retries-503/envoy.log", FIXTURES / "istio-thread/large-body/envoy.log",
           FIXTURES / "legacy-1.19/plain/lua-cpu-baseline/envoy.log"]


def _parsed(path: Path, block: int | None) -> list[pl.DataFrame]:
    return [c.events for c in iter_parse(str(path), block_bytes=block, columns=ANALYSED_COLUMNS, workers=1)]


def _analysed(chunks: list[pl.DataFrame]) -> None:
    engine = StreamingAnalysis(background=False)
    for chunk in chunks:
        engine.add(chunk)
    engine.finish()


def _median_cpu(work: Callable[[], object], repeats: int) -> float:
    work()  # (warm: imports, the grammar, polars' pools)
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        work()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("captures", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--blocks", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    small: dict[Path, int | None] = {p: max(4096, os.path.getsize(p) // args.blocks) for p in args.captures}
    sizes = {"small": small, "whole": dict.fromkeys(args.captures)}
    found: dict[str, tuple[int, float, float]] = {}
    for way, blocks in sizes.items():
        chunks = {p: _parsed(p, block) for p, block in blocks.items()}
        parse = _median_cpu(lambda blocks=blocks: [_parsed(p, b) for p, b in blocks.items()], args.repeats)
        engine = _median_cpu(lambda chunks=chunks: [_analysed(c) for c in chunks.values()], args.repeats)
        found[way] = (sum(len(c) for c in chunks.values()), parse, engine)
        print(f"{way:5s}: {found[way][0]:4d} chunks, parse {parse:.3f} CPU-s, engine {engine:.3f} CPU-s "
              f"(POLARS_MAX_THREADS={os.environ.get('POLARS_MAX_THREADS', 'unset')})")
    extra = found["small"][0] - found["whole"][0]
    if extra > 0:
        print(f"per extra block: parse {(found['small'][1] - found['whole'][1]) / extra * 1e3:.1f} ms, engine "
              f"{(found['small'][2] - found['whole'][2]) / extra * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
