"""Peak memory of ``envoy-dissect analyze`` on inputs that used to grow it without bound (prints numbers; not a test).

    python bench/memory_bound.py one-line [N]      # N one-line `new stream` records on N connections (10 000 000)
    python bench/memory_bound.py many-files [N]    # N small files given on one command line (3 000)
    python bench/memory_bound.py ladder            # 1 M, 3 M and 10 M one-line requests, then 3 000 files

The inputs are generated into /tmp/envoy-memory-bound/ (kept for the next run; ~1.4 GB for 10 M lines) and
``envoy-dissect analyze INPUT... -o requests.parquet -q`` runs in a child process; its peak RSS (``ru_maxrss``
from ``wait4``), wall time, exit code and the request count of the written parquet are printed as JSON.
docs/scale.md states the bound (``streaming.MAX_OPEN_REQUESTS``, ``carry.MAX_CARRIED_CONNECTIONS``, one source
after another) and the issue's target: peak RSS ≤ 1.5 GiB for 10 M one-line requests and for 3 000 small files.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path("/tmp/envoy-memory-bound")
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/istio-thread/keepalive/envoy.log.gz"
#: ``ladder``: the one-line request counts run one after another.
LADDER = (1_000_000, 3_000_000, 10_000_000)
#: one `new stream` line (Istio text with thread ids), on its own connection, on one of two workers
LINE = ('2026-11-22T01:{m:02d}:{s:02d}.{us:06d}Z\tdebug\tenvoy http source/common/http/conn_manager_impl.cc:506\t'
        '[Tags: "ConnectionId":"{conn}"] new stream\tthread={thread}\n')


def one_line_capture(n: int) -> list[Path]:
    """``n`` one-line requests 2 µs apart (all within IDLE_US of each other for n < 2.5 M: none goes idle)."""
    path = ROOT / f"one-line-{n}.log"
    if not path.exists():
        ROOT.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".tmp"), "w") as out:
            batch: list[str] = []
            for i in range(n):
                t = i * 2
                batch.append(LINE.format(m=9 + t // 60_000_000, s=(t // 1_000_000) % 60, us=t % 1_000_000,
                                         conn=i + 1, thread=100 + (i & 1)))
                if len(batch) == 100_000:
                    out.write("".join(batch))
                    batch.clear()
            out.write("".join(batch))
        path.with_suffix(".tmp").rename(path)
    return [path]


def many_files(n: int) -> list[Path]:
    """``n`` small real captures (the first 400 lines of istio-thread keepalive, ~40 KB), one file each."""
    folder = ROOT / f"many-files-{n}"
    if not folder.exists():
        staging = ROOT / f".many-files-{n}.tmp"
        staging.mkdir(parents=True, exist_ok=True)
        text = b"".join(gzip.decompress(FIXTURE.read_bytes()).splitlines(keepends=True)[:400])
        for i in range(n):
            (staging / f"proxy-{i:05d}.log").write_bytes(text)
        staging.rename(folder)
    return sorted(folder.iterdir())


def run(inputs: list[Path]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "requests.parquet")
        cmd = [sys.executable, "-c", "import sys; from envoy_dissector.cli.main import main; sys.exit(main())",
               "analyze", *map(str, inputs), "-o", out, "-q"]
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        err = child.stderr.read().decode(errors="replace") if child.stderr else ""
        rows = None
        if os.path.exists(out):
            import polars as pl

            rows = pl.scan_parquet(out).select(pl.len()).collect().item()
    return {"exit": os.waitstatus_to_exitcode(status), "peak_rss_mib": round(usage.ru_maxrss / 1024),
            "wall_s": round(wall, 1), "requests": rows, "inputs": len(inputs), "stderr": err[-400:],
            "load": os.getloadavg()[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=["one-line", "many-files", "ladder"])
    ap.add_argument("n", nargs="?", type=int)
    args = ap.parse_args()
    cases = ([("one-line", n) for n in LADDER] + [("many-files", 3_000)] if args.case == "ladder"
             else [(args.case, args.n or (10_000_000 if args.case == "one-line" else 3_000))])
    failed = 0
    for case, n in cases:
        result = run(one_line_capture(n) if case == "one-line" else many_files(n))
        print(json.dumps({"case": case, "n": n, **result}), flush=True)
        failed += result["exit"] != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
