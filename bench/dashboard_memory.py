"""The dashboard's memory share of an uploaded log (prints numbers; not a test).

    python bench/dashboard_memory.py [--lines 800000] [--keep-s 5]
    python bench/dashboard_memory.py --trace-mb 110       # a trace-level log instead (~15 KB of log a request)

The probe's case (issue 33 item 6): one-line requests (a `new stream` line each, on its own connection,
bench/memory_bound.py's generator), gzipped (~6 MB for 800 000 lines, ~110 MB of log text), uploaded over
HTTP to ``envoy-dissect dashboard`` (waitress on 127.0.0.1, a subprocess) as the page does, then polled
until the analysis is done. The server's RSS is sampled every 50 ms: before the upload (baseline), its peak
while uploading and analysing, and what it still holds ``--keep-s`` seconds after the dataset is ready (the
dataset lives in the registry). Each is printed as MiB and as MiB per MB of decompressed log — the share
docs/dashboard.md states — together with the dataset's request count. ``--trace-mb`` uploads a trace-level
capture of that size instead (the real ``workers`` fixture replicated by bench/dashboard_upload.py's
``make_capture``), the other end of the range: many lines per request.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from dashboard_upload import make_capture  # noqa: E402
from memory_bound import ROOT as WORK  # noqa: E402
from memory_bound import one_line_capture  # noqa: E402

from tests.builders import Callbacks, DashboardProcess, RssSampler  # noqa: E402


def gzipped(lines: int, trace_mb: float | None) -> tuple[Path, int]:
    """The one-line capture of ``lines`` requests (or a trace-level one of ``trace_mb``), gzipped next to it;
    (gzip path, log bytes)."""
    if trace_mb is None:
        (log,) = one_line_capture(lines)
    else:
        log = WORK / f"trace-{trace_mb:g}mb.log"
        if not log.exists():
            make_capture(ROOT / "fixtures/istio-thread/workers/envoy.log.gz", log, trace_mb)
    packed = log.with_suffix(".log.gz")
    if not packed.exists():
        with log.open("rb") as src, gzip.open(packed.with_suffix(".tmp"), "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        packed.with_suffix(".tmp").rename(packed)
    return packed, log.stat().st_size


def measure(packed: Path, log_bytes: int, keep_s: float) -> dict[str, object]:
    import requests

    from envoy_dissector.dashboard.datasets import new_id

    with tempfile.TemporaryDirectory(prefix="dashboard-memory-") as tmp:
        server = DashboardProcess(["--max-upload-mb", "2048"], Path(tmp))
        try:
            http = requests.Session()
            calls = Callbacks(http, server.base)
            session = new_id()
            with RssSampler(server.pid) as rss:
                t0 = time.monotonic()
                with packed.open("rb") as body:  # streamed; a long timeout: the machine may be busy
                    answer = http.post(f"{server.base}/_dissector/upload", params={"name": packed.name}, data=body,
                                       timeout=1800, headers={"X-Dissector-Session": session,
                                                              "Content-Type": "application/octet-stream"})
                if answer.status_code != 200:
                    raise SystemExit(f"upload refused: {answer.status_code} {answer.text[:300]}")
                while True:
                    options, pending = calls.poll(session)
                    if not pending:
                        break
                    time.sleep(1.0)
                analysed_s = time.monotonic() - t0
                time.sleep(keep_s)
            mine = [o for o in options if "uploaded" in str(o.get("label", ""))]
            overview = calls.overview(session, mine[0]["value"]) if mine else ""
        finally:
            server.stop()
    mb = log_bytes / 1e6
    mib = 2**20
    return {
        "gzip_mb": round(packed.stat().st_size / 1e6, 1), "log_mb": round(mb, 1), "analysed_s": round(analysed_s, 1),
        "dataset": mine[0]["label"] if mine else None, "overview_says_requests": "requests" in overview,
        "rss_baseline_mib": round(rss.baseline / mib), "rss_peak_mib": round(rss.peak / mib),
        "rss_held_mib": round(rss.last / mib),
        "peak_growth_mib_per_log_mb": round((rss.peak - rss.baseline) / mib / mb, 2),
        "held_growth_mib_per_log_mb": round((rss.last - rss.baseline) / mib / mb, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=800_000, help="one-line requests in the log (800 000)")
    parser.add_argument("--trace-mb", type=float, help="upload a trace-level capture of this size instead")
    parser.add_argument("--keep-s", type=float, default=5.0, help="seconds to sample after the analysis ends")
    args = parser.parse_args()
    packed, log_bytes = gzipped(args.lines, args.trace_mb)
    print(json.dumps(measure(packed, log_bytes, args.keep_s), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
