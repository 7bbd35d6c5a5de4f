"""The dashboard fuzz against its speed and memory goals (prints numbers; not a test).

    python bench/fuzz_dashboard.py [--seed 33] [--calls 360] [--uploads 48] [--threads 4]
    python bench/fuzz_dashboard.py --threads 1        # CPU seconds per answer are the answer's own

Runs tests/dashboard/dashboard_fuzz.py's seeded fuzz (every server callback with random inputs and the upload
route with random bodies, from several threads) against ``envoy-dissect dashboard`` in a subprocess on
127.0.0.1, as tests/dashboard/test_fuzz.py does, and prints per answer kind (each callback's output, the
upload) how many answers, their statuses, p50 and the slowest, then the server's peak RSS, each against the
goals of issue 33: no answer slower than 2 s, server RSS at most 1 GiB. Exit status 1 when a goal is missed
(or an answer was an error: the test's correctness check, repeated here). The machine's load counts in the
seconds: run it on a quiet machine. The server's CPU seconds during each answer (median and most) do not
depend on the load; they are one answer's own work with ``--threads 1`` (with more threads, the others' work
done meanwhile is counted too).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.builders import DashboardProcess  # noqa: E402
from tests.dashboard.dashboard_fuzz import CAPTURE, fuzz  # noqa: E402

SLOWEST_GOAL_S = 2.0
RSS_GOAL = 1024**3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--calls", type=int, default=360, help="callback requests in all (360)")
    parser.add_argument("--uploads", type=int, default=48, help="uploads in all (48)")
    parser.add_argument("--threads", type=int, default=4, help="client threads (4)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz-dashboard-") as tmp:
        server = DashboardProcess([str(CAPTURE), "--max-upload-mb", "1", "--max-sessions", "8"], Path(tmp))
        try:
            run = fuzz(server, seed=args.seed, calls=args.calls, uploads=args.uploads, threads=args.threads)
        finally:
            server.stop()
    by_kind: dict[str, list[tuple[int, float, float]]] = {}
    for label, status, seconds, cpu in run.results:
        by_kind.setdefault(label, []).append((status, seconds, cpu))
    print(f"{'answer':50} {'n':>4} {'p50 s':>7} {'max s':>7} {'p50 cpu':>8} {'max cpu':>8}  statuses")
    for label, answers in sorted(by_kind.items(), key=lambda kv: -max(a[2] for a in kv[1])):
        times, cpus = [a[1] for a in answers], [a[2] for a in answers]
        statuses: dict[int, int] = {}
        for status, _, _ in answers:
            statuses[status] = statuses.get(status, 0) + 1
        shown = label if len(label) <= 50 else label[:47] + "..."
        print(f"{shown:50} {len(answers):>4} {statistics.median(times):>7.3f} {max(times):>7.3f} "
              f"{statistics.median(cpus):>8.3f} {max(cpus):>8.3f}  {dict(sorted(statuses.items()))}")
    slowest = max(run.results, key=lambda r: r[2])
    slow_ok, rss_ok, failed = slowest[2] <= SLOWEST_GOAL_S, run.rss_peak <= RSS_GOAL, run.failed()
    print(f"\n{len(run.results)} answers from {args.threads} threads (seed {args.seed})")
    print(f"slowest answer: {slowest[2]:.2f} s ({slowest[0]}) — goal ≤ {SLOWEST_GOAL_S:g} s: "
          f"{'met' if slow_ok else 'MISSED'}")
    busiest = max(run.results, key=lambda r: r[3])
    print(f"most server CPU during one answer: {busiest[3]:.2f} s ({busiest[0]})")
    print(f"server RSS: baseline {run.rss_baseline / 2**20:.0f} MiB, peak {run.rss_peak / 2**20:.0f} MiB — goal "
          f"≤ {RSS_GOAL / 2**30:g} GiB: {'met' if rss_ok else 'MISSED'}")
    print(f"error answers (a 5xx but the documented 503, or none): {len(failed)}")
    return 0 if slow_ok and rss_ok and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
