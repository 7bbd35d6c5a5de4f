"""CPU and page faults per 16 MiB block of the text parse, stage by stage (prints numbers; not a test).

    POLARS_MAX_THREADS=1 python bench/parse_block.py [CORPUS] [--at-mb 100] [--block-mb 16] [--rounds 7]

Takes one block of whole records from CORPUS (default /tmp/envoy-corpus/corpus.log, from ``--at-mb`` on), parses
it as the pipeline's compiled path does (``pipeline._events_for_bytes``) ``--rounds`` times in this process (a
first round fills the class and shape caches and is not counted) and prints, per stage, the best and the median
CPU time (``time.process_time``: every thread of the process, so run it with ``POLARS_MAX_THREADS=1`` for the
stages' own cost) and the median minor page faults (``ru_minflt``). A stage's figures include the stages it calls
(the envelope includes prefix fields and redaction).
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envoy_dissector.parser import classify, envelope, extension, pipeline, redact
from envoy_dissector.parser.classify import Classifier
from envoy_dissector.parser.formats import detect_format

DEFAULT_CORPUS = Path("/tmp/envoy-corpus/corpus.log")
spent: dict[str, float] = defaultdict(float)
faults: dict[str, int] = defaultdict(int)


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(module: Any, name: str, label: str) -> None:
    """Wrap ``module.name`` so each call adds its CPU time to ``spent[label]``."""
    inner: Callable[..., Any] = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, f0 = time.process_time(), minor_faults()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.process_time() - t0
            faults[label] += minor_faults() - f0

    setattr(module, name, wrapper)


def one_block(path: Path, at: int, size: int) -> tuple[bytes, str]:
    with path.open("rb") as fh:
        fh.seek(at)
        data = fh.read(size + (1 << 20))
    first = data.index(b"\n") + 1
    data = data[first:]
    head = data[:1 << 16].decode(errors="replace").splitlines()
    fmt = detect_format(head).compiled
    cut = extension.last_start(data[:size], fmt)
    assert cut is not None
    return data[:cut], fmt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--at-mb", type=float, default=100)
    ap.add_argument("--block-mb", type=float, default=16)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    data, fmt = one_block(args.corpus, int(args.at_mb * 1e6), int(args.block_mb * 2**20))
    # the stages, outermost first (a stage's time includes the ones it calls)
    timed(extension, "scan_text", "scan (compiled)")
    timed(pipeline, "split_text_native", "envelope (after the scan)")
    timed(envelope, "_prefix_fields", "  prefix fields")
    timed(envelope, "_suffix_fields", "  suffix fields")
    timed(envelope, "_older_layouts", "  older layouts")
    timed(envelope, "redact_frame", "  redaction")
    timed(redact, "_candidates", "    redaction candidates")
    timed(envelope, "_select", "  select + first line")
    timed(pipeline, "holds_foreign", "foreign check")
    timed(pipeline, "read_damaged", "damaged lines")
    timed(pipeline, "classify", "classify")
    timed(classify, "_record_classes", "  record classes")
    timed(pipeline, "header_columns", "header columns")
    classifier = Classifier()
    rounds: list[dict[str, float]] = []
    round_faults: list[dict[str, int]] = []
    totals = []
    total_faults = []
    for i in range(args.rounds + 1):
        spent.clear()
        faults.clear()
        t0, f0 = time.process_time(), minor_faults()
        (events, _malformed), _, _ = pipeline._events_for_bytes([(data, len(data))], 1, "x", fmt, classifier, True,
                                                                  None)
        total = time.process_time() - t0
        if i:
            rounds.append(dict(spent))
            round_faults.append(dict(faults))
            totals.append(total)
            total_faults.append(minor_faults() - f0)
    print(f"block: {len(data) / 1e6:.1f} MB, {events.height} records; CPU ms per block, best / median of "
          f"{args.rounds}; minor page faults (median)")
    for label in rounds[0]:
        values = [r[label] * 1e3 for r in rounds]
        paged = statistics.median(r[label] for r in round_faults)
        print(f"{label:30} {min(values):7.1f} {statistics.median(values):7.1f} {paged:8.0f}")
    print(f"{'whole block':30} {min(totals) * 1e3:7.1f} {statistics.median(totals) * 1e3:7.1f} "
          f"{statistics.median(total_faults):8.0f}")
    print(f"{'(CPU-s per GB at the median)':30} {statistics.median(totals) / len(data) * 1e9:7.2f}")


if __name__ == "__main__":
    main()
