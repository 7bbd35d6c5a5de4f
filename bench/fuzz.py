"""Fuzz target: N generated hostile captures through every stage and every output; prints counts.

    python bench/fuzz.py                      # 100 000 inputs (batches of 250 as pods of one capture)
    python bench/fuzz.py --cases 2000 --seed 7

Inputs come from tests/security/hostile_inputs.py (mutated real captures, fixtures/). Most run in
batches: each input becomes one pod (``kubectl logs --prefix``) of a batch capture, parsed at once,
and each input's lines are accounted for per origin; every ``--analyse-every``-th batch is also
analysed whole (reconstruction, report, summary, trace). Every ``--alone``-th input
also runs alone through parse, analysis, report, summary, trace and every ``-o`` writer. A traceback
(any exception but a one-line DissectorError) or an accounting mismatch is counted, and the first
few are saved under ``--failures``.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import random
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "security"))

from hostile_inputs import BASES, LOG_FORMATS, check_capture, hostile_capture, load_lines, physical_lines  # noqa: E402


def batch_text(cases: list[str]) -> tuple[str, dict[str, int]]:
    """The cases as pods of one kubectl --prefix capture; lines expected per pod."""
    out, expected = [], {}
    for n, text in enumerate(cases):
        lines = text.replace("\r\n", "\n").split("\n")
        if text.endswith("\n"):
            lines = lines[:-1]
        if not text:
            continue
        pod = f"case{n}"
        expected[f"{pod}/istio-proxy"] = len(lines)
        out.extend(f"[pod/{pod}/istio-proxy] {line.replace(chr(13), ' ')}" for line in lines)
    return "\n".join(out) + "\n", expected


def check_batch(cases: list[str], log_format: str | None, analyse: bool) -> str:
    """Sources, envelope, wrappers, grammar path and accounting per input; with ``analyse`` also the
    reconstruction, report, summary and trace of the whole batch."""
    from envoy_dissector.analysis.capture import dissect
    from envoy_dissector.analysis.outputs.report import render
    from envoy_dissector.analysis.outputs.trace_export import trace_events
    from envoy_dissector.parser.errors import DissectorError
    from envoy_dissector.parser.pipeline import parse_text

    text, expected = batch_text(cases)
    try:
        d = parse_text(text, log_format=log_format).diagnostics
    except DissectorError:
        return "refused"
    assert d.lines_read == physical_lines(text) == sum(expected.values())
    assert d.lines_read == d.lines_in_records + d.lines_malformed
    already_prefixed = any(c.startswith("[pod/") for c in cases)  # a second prefix: one origin, by design
    for origin, n in ({} if already_prefixed else expected).items():
        got = d.by_origin.get(origin, {})
        assert got.get("lines_in_records", 0) + got.get("lines_malformed", 0) == n, (origin, got, n)
    if analyse:
        capture = dissect(text, log_format=log_format)
        assert capture.diagnostics_info.lines_read == d.lines_read
        render(capture)
        capture.summary()
        trace_events(capture)
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--analyse-every", type=int, default=10, help="every N-th batch is also analysed whole")
    ap.add_argument("--alone", type=int, default=500, help="every N-th case also runs alone with every output")
    ap.add_argument("--mutation-rate", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--failures", default="/tmp/envoy-dissector-fuzz-failures")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    corpora = {base: load_lines(REPO / "fixtures", base) for base in BASES}
    counts: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    failures = Path(args.failures)
    failures.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = 0
    with tempfile.TemporaryDirectory() as tmp, _interruptible():
        while done < args.cases:
            base = BASES[(done // args.batch) % len(BASES)]
            log_format = LOG_FORMATS.get(base)
            cases = [hostile_capture(rng, corpora[base], max_lines=30, mutation_rate=args.mutation_rate)
                     for _ in range(min(args.batch, args.cases - done))]
            analyse = (done // args.batch) % args.analyse_every == 0
            counts["lines"] += sum(physical_lines(c) for c in cases)
            for n, case in enumerate(cases):
                if (done + n) % args.alone == 0:
                    counts["alone"] += 1
                    _record(counts, kinds, failures, case,
                            functools.partial(check_capture, case, Path(tmp), log_format))
            _record(counts, kinds, failures, "".join(cases[:5]),
                    functools.partial(check_batch, cases, log_format, analyse), prefix="batch-")
            done += len(cases)
            rate = done / (time.monotonic() - started)
            print(f"\r{done} cases, {rate:.0f}/s, tracebacks {counts['traceback']}, "
                  f"accounting {counts['accounting']}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    elapsed = time.monotonic() - started
    print(f"cases generated: {done} ({counts['lines']} lines) in {elapsed:.0f} s; "
          f"batches ok {counts['batch-ok']}, refused {counts['batch-refused']}; "
          f"alone with every output: {counts['alone']} (ok {counts['ok']}, refused {counts['refused']})")
    print(f"tracebacks: {counts['traceback']}, accounting mismatches: {counts['accounting']}")
    for kind, n in kinds.most_common():
        print(f"  {n:6d}  {kind}")
    return 1 if counts["traceback"] or counts["accounting"] else 0


class _Stop(BaseException):  # not caught as a failure by _record
    pass


@contextlib.contextmanager
def _interruptible():  # type: ignore[no-untyped-def]
    """Ctrl-C or SIGTERM ends the run early; the counts so far are still printed."""
    def stop(*_):  # type: ignore[no-untyped-def]
        raise _Stop

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except (_Stop, KeyboardInterrupt):
        print("\nstopped early", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _record(counts, kinds, failures: Path, case: str, run, prefix: str = "") -> None:  # type: ignore[no-untyped-def]
    try:
        counts[prefix + run()] += 1
    except AssertionError as exc:
        counts["accounting"] += 1
        kinds[f"accounting: {str(exc)[:120]}"] += 1
        _save(failures, case, traceback.format_exc(), counts["accounting"] + counts["traceback"])
    except Exception as exc:
        counts["traceback"] += 1
        where = traceback.extract_tb(exc.__traceback__)[-1]
        kinds[f"{type(exc).__name__} at {Path(where.filename).name}:{where.lineno}"] += 1
        _save(failures, case, traceback.format_exc(), counts["accounting"] + counts["traceback"])


def _save(failures: Path, case: str, trace: str, n: int) -> None:
    if n <= 20:
        (failures / f"{n}.log").write_text(case, errors="replace")
        (failures / f"{n}.txt").write_text(trace)


if __name__ == "__main__":
    sys.exit(main())
