"""Peak memory of ``envoy-dissect analyze`` on inputs that used to grow it without bound (prints numbers; not a test).

    python bench/memory_bound.py one-line [N]      # N one-line `new stream` records on N connections (10 000 000)
    python bench/memory_bound.py many-files [N]    # N small files given on one command line (3 000)
    python bench/memory_bound.py ladder            # 1 M, 3 M and 10 M one-line requests, then 3 000 files
    python bench/memory_bound.py stages [N]        # one-line N, in this process: the peak RSS of each step of the end

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
#: ``stages``: the steps of the end of a run whose peak RSS is told apart, as (module, function) names.
STAGE_STEPS = (
    ("envoy_dissector.analysis.engine.streaming", "conclude"),
    ("envoy_dissector.analysis.engine.pipeline", "downstream_waits"),
    ("envoy_dissector.analysis.engine.pipeline", "loop_queue"),
    ("envoy_dissector.analysis.engine.pipeline", "with_sidecar_added"),
    ("envoy_dissector.analysis.engine.pipeline", "render_queueing"),
    ("envoy_dissector.analysis.engine.pipeline", "request_order"),
    ("envoy_dissector.analysis.engine.pipeline", "in_order_of"),
    ("envoy_dissector.analysis.engine.pipeline", "stitch"),
    ("envoy_dissector.analysis.engine.uids", "with_uids"),  # (the uids made when ``Capture.requests`` is asked for)
    ("envoy_dissector.cli.analyze", "write"),
    ("envoy_dissector.cli.analyze", "render"),
)
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/istio-thread/keepalive/envoy.log.gz"
#: ``stages``: the wait after the engine finished before ``held_mib`` is read (polars' jemalloc returns freed
#: pages after 500 ms)
SETTLE_S = 2.0
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


def stages(inputs: list[Path]) -> dict[str, object]:
    """``analyze INPUT -o requests.parquet -q`` in this process, its RSS read every 10 ms: the peak while each of
    ``STAGE_STEPS`` runs (``after <step>``: from its return to the next step), the spill's reads (``take <kind>``)
    and the read before them (``read``); then ``held``: the RSS above the start once the engine has finished and
    freed pages went back (``SETTLE_S`` later): what the analysed capture itself holds, the floor of any end
    that hands it over whole, and its frames' bytes a request. A probe for where the memory goes, not a bound."""
    import contextlib
    import gc
    import importlib
    import io
    import threading

    import envoy_dissector.cli  # noqa: F401  (first: it sets polars' allocator as the command does, before polars loads)
    from envoy_dissector.analysis.engine.spill import Spill
    from envoy_dissector.cli.main import main as cli

    current, peaks = ["read"], {}

    def rss_mib() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20

    def sample() -> None:
        while True:
            step = current[0]
            peaks[step] = max(peaks.get(step, 0), rss_mib())
            time.sleep(0.01)

    def labelled(name: str, function):  # type: ignore[no-untyped-def]
        def run(*args, **kwargs):  # type: ignore[no-untyped-def]
            current[0] = name
            try:
                return function(*args, **kwargs)
            finally:
                current[0] = f"after {name}"
        return run

    for module_name, function_name in STAGE_STEPS:
        module = importlib.import_module(module_name)
        setattr(module, function_name, labelled(function_name, getattr(module, function_name)))
    held: dict[str, object] = {}
    engine = importlib.import_module("envoy_dissector.analysis.engine.streaming").StreamingAnalysis
    finishing = engine.finish

    def finish(analysis):  # type: ignore[no-untyped-def]
        done = finishing(analysis)
        current[0] = "settle"
        gc.collect()
        time.sleep(SETTLE_S)
        held.update(start_mib=start_mib, held_mib=rss_mib() - start_mib, bytes_a_request=bytes_a_request(done))
        return done

    engine.finish = finish
    take = Spill.take
    Spill.take = lambda spill, kind, *a, **k: labelled(f"take {kind}", take)(spill, kind, *a, **k)  # type: ignore[method-assign]
    start_mib = rss_mib()
    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # (the report)
            code = cli(["analyze", *map(str, inputs), "-o", os.path.join(tmp, "requests.parquet"), "-q"])
        wall = time.perf_counter() - t0
    time.sleep(0.05)
    import resource

    return {"exit": code, "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "wall_s": round(wall, 1), "steps_mib": peaks, "held": held, "load": os.getloadavg()[0]}


def bytes_a_request(done) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """The frames the capture holds whole, in bytes a request: polars' estimate of each frame's columns that vary
    (a column of one value is not materialised, ``spill.constant_columns``). Text gathered from another column
    shares its buffer, and so do columns of equal values (``spill.sharing_equal_columns``): each is counted again
    here, an upper bound; ``held_mib`` is the measure."""
    from envoy_dissector.analysis.engine.spill import constant_columns

    rows = max(done.requests.height, 1)
    sizes = {}
    for name in ("requests", "phases", "queueing"):
        frame = getattr(done, name)
        sizes[name] = round(frame.drop(list(constant_columns(frame))).estimated_size() / rows, 1)
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=["one-line", "many-files", "ladder", "stages"])
    ap.add_argument("n", nargs="?", type=int)
    args = ap.parse_args()
    if args.case == "stages":
        n = args.n or 1_000_000
        print(json.dumps({"case": "stages", "n": n, **stages(one_line_capture(n))}), flush=True)
        return 0
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
