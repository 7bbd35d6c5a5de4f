"""Memory of a long live follow (issue 29: ``analyze --follow``/``watch`` for hours): prints numbers; not a test.

    python bench/follow_memory.py [--minutes 30] [--spill-mb MB] [--rev REV] [--capture REL]

A capture (istio-thread health-check: socket events and health-check bursts; ``--capture`` another under fixtures/,
e.g. ``legacy-1.19/plain/workers/envoy.log.gz``, a log without thread ids) is replayed copy after copy, one copy
per second of log time (``tests/analysis/replay.py``: each copy later, with ids of its own), into the streaming
engine as the follow runs it (``window_events`` 1, steps on their own threads, ``settle`` after each batch of
``--batch`` copies) until ``--minutes`` of log time have been fed; finished output is spilled beyond ``--spill-mb``
(the engine's budget by default). Every ``--every`` log minutes it prints, as JSON:
the log minutes fed, the record gaps and internal work bursts the engine holds in memory for the final report
(``StreamingAnalysis.held_rows``), and the process's RSS. The final report is not built (the follow's end brings
the finished frames back, as ``analyze`` does; issue 33).

``--rev REV`` runs the same replay on the engine of git revision REV (its package exported to a temporary
directory), to compare with the code checked out: the engine before the bound kept every gap and burst in lists,
which are counted instead.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURE = "istio-thread/health-check/envoy.log.gz"
PACKAGES = ("analysis", "cli", "dashboard", "fleet", "kube", "lab", "parser")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _held(engine: Any) -> dict[str, int]:
    if hasattr(engine, "held_rows"):
        return dict(engine.held_rows())
    # (an engine before the bound: every gap Series and burst frame in a list until the end)
    return {"gaps": sum(s.len() for s in engine._gaps), "bursts": sum(b.height for b in engine._bursts)}


def replay(minutes: float, batch: int, every: float, spill_mb: float | None, capture: str) -> None:
    sys.path.insert(0, str(REPO / "tests" / "analysis"))
    import polars as pl
    from replay import PAUSE_US, replayer

    from envoy_dissector.analysis.engine.streaming import StreamingAnalysis
    from envoy_dissector.cli.follow import LIVE_WINDOW_EVENTS
    from envoy_dissector.parser.pipeline import parse

    fixture = REPO / "fixtures" / capture
    events = parse(fixture).events
    copy = replayer(events)
    span_s = (int(events["ts_us"].max() - events["ts_us"].min()) + PAUSE_US) / 1e6  # type: ignore[operator]
    copies = int(minutes * 60 / span_s)
    budget = {} if spill_mb is None else {"spill_budget": int(spill_mb * 2**20)}
    engine = StreamingAnalysis(window_events=LIVE_WINDOW_EVENTS, **budget)  # type: ignore[arg-type]
    fed = rows = 0
    next_report = 0.0
    t0 = time.perf_counter()
    print(json.dumps({"capture": capture, "copy_log_s": round(span_s, 3), "copies": copies,
                      "rss_mib_start": round(_rss_mib(), 1)}), flush=True)
    try:
        while fed < copies:
            part = pl.concat([copy(k) for k in range(fed, min(fed + batch, copies))])
            engine.add(part)
            engine.settle()
            fed = min(fed + batch, copies)
            rows += part.height
            log_minutes = fed * span_s / 60
            if log_minutes >= next_report or fed == copies:
                engine._steps.drain()  # (the steps given so far have added their output: the held rows are theirs)
                print(json.dumps({"log_min": round(log_minutes, 1), "events": rows, **_held(engine),
                                  "rss_mib": round(_rss_mib(), 1), "wall_s": round(time.perf_counter() - t0, 1)}),
                      flush=True)
                next_report += every
    finally:
        engine.close()


def _exported(rev: str, into: Path) -> Path:
    """The package of ``rev`` as an importable ``envoy_dissector`` under ``into`` (with the compiled extension)."""
    root = into / "envoy_dissector"
    root.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, *PACKAGES], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    for native in (REPO / "parser").glob("_native*.so"):
        shutil.copy(native, root / "parser" / native.name)
    return into


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="log time to replay (default 30)")
    ap.add_argument("--batch", type=int, default=10, help="copies (seconds of log) per add, then a settle")
    ap.add_argument("--every", type=float, default=5.0, help="log minutes between two lines")
    ap.add_argument("--spill-mb", type=float, help="the spill's memory budget (default: the engine's)")
    ap.add_argument("--rev", help="replay on the engine of this git revision instead")
    ap.add_argument("--capture", default=FIXTURE, help=f"the capture replayed, under fixtures/ (default {FIXTURE})")
    args = ap.parse_args()
    if args.rev is None:
        replay(args.minutes, args.batch, args.every, args.spill_mb, args.capture)
        return 0
    with tempfile.TemporaryDirectory(prefix="follow-memory-") as tmp:
        tree = _exported(args.rev, Path(tmp))
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, __file__, "--minutes", str(args.minutes), "--batch", str(args.batch),
               "--every", str(args.every), "--capture", args.capture,
               *(["--spill-mb", str(args.spill_mb)] if args.spill_mb else [])]
        return subprocess.run(cmd, env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
