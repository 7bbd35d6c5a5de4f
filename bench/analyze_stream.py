"""End-to-end ``envoy-dissect analyze FILE -o requests.parquet`` on a big capture (prints numbers; not a test).

    python bench/analyze_stream.py [/tmp/envoy-corpus/corpus.log] [--whole] [--profile]

Runs the full command (parse, streaming analysis, summary, report, parquet) in a fresh process and prints:
MB/s, peak RSS of that process (VmHWM), its CPU time (user+sys: what a change of code saves), the CPU time
of a fixed reference workload before and after the run (the machine's speed drifts: compare runs at the same
reference figure), ``grep -c thread=`` on the same file and the ratio, and the time of
each step of the streaming analysis (``StreamingAnalysis.timings``: requests/phases stages, loop slices,
capture facts, window cuts, the capture-wide ``conclude``: seconds on the thread that ran them; the steps of two
workers and their loop slices run on threads side by side, so the times add up to more than the wall time).
``--whole`` runs the whole-file path
(``analyze --keep-events``) instead; ``BENCH_PREFETCH=N`` sets how many chunks are parsed ahead (0: none),
``BENCH_PARSE_WORKERS``, ``BENCH_WINDOW`` and ``BENCH_BLOCK`` the parser threads, window events and block bytes;
``--profile`` prints the child's top functions by cumulative time.
The load average is printed with the result: the machine may be shared. The child imports the CLI package
first, so polars' allocator is configured as for ``envoy-dissect`` (``cli/__init__.py``).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reference_seconds() -> float:
    """CPU seconds of a fixed workload (a Python loop, a polars shuffle and sort): the machine's speed right now.

    On a shared machine the same analysis took 24.5 s of CPU in one run and 32.9 s two minutes later; this
    figure, taken before and after a run, tells a slower machine from slower code.
    """
    import polars as pl

    t0 = time.process_time()
    total = 0
    for i in range(6_000_000):
        total += i & 7
    pl.DataFrame({"v": range(4_000_000)}).select(pl.col("v").shuffle(seed=1).sort())
    return time.process_time() - t0


def child(path: str, out: str, whole: bool, profile: bool) -> None:
    import envoy_dissector.cli  # noqa: F401  (first: it sets the CLI's allocator settings before polars loads)
    from envoy_dissector.analysis.engine import streaming
    from envoy_dissector.cli.main import main

    steps: dict[str, float] = {}
    finish = streaming.StreamingAnalysis.finish

    def timed_finish(self: streaming.StreamingAnalysis) -> Any:
        result = finish(self)
        steps.update(self.timings)
        return result

    streaming.StreamingAnalysis.finish = timed_finish  # type: ignore[method-assign]
    if os.environ.get("BENCH_PREFETCH"):
        from envoy_dissector.analysis import capture
        from envoy_dissector.analysis.engine import stream_capture

        stream_capture.PREFETCH = int(os.environ["BENCH_PREFETCH"])
        defaults = list(capture.dissect.__kwdefaults__ or {})
        assert "prefetch" in defaults
        capture.dissect.__kwdefaults__["prefetch"] = stream_capture.PREFETCH  # type: ignore[index]
    for env, kw in (("BENCH_PARSE_WORKERS", "parse_workers"), ("BENCH_WINDOW", "window_events"),
                    ("BENCH_BLOCK", "block_bytes")):
        if os.environ.get(env):
            from envoy_dissector.analysis import capture

            assert kw in (capture.dissect.__kwdefaults__ or {})
            capture.dissect.__kwdefaults__[kw] = int(os.environ[env])  # type: ignore[index]
    argv = ["analyze", path, "-o", out, "-q", *(["--keep-events"] if whole else [])]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            rc = prof.runcall(main, argv)
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(30)
        else:
            rc = main(argv)
    wall = time.perf_counter() - t0
    if profile:
        print(text.getvalue(), file=sys.stderr)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"rc": rc, "wall": wall, "steps": steps, "vm_hwm_mib": _vm_hwm_mib(),
                      "cpu": usage.ru_utime + usage.ru_stime}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", nargs="?", default="/tmp/envoy-corpus/corpus.log")
    ap.add_argument("--whole", action="store_true", help="the whole-file path (analyze --whole)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("FILE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.whole, args.profile)
        return 0
    path = Path(args.corpus)
    size_mb = path.stat().st_size / 1e6
    t0 = time.perf_counter()
    grep = subprocess.run(["grep", "-c", "thread=", str(path)], capture_output=True, text=True)
    grep_s = time.perf_counter() - t0
    reference_seconds()  # (the first call imports and warms polars)
    before = reference_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "requests.parquet")
        cmd = [sys.executable, __file__, "--child", str(path), out, *(["--whole"] if args.whole else []),
               *(["--profile"] if args.profile else [])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        if args.profile:
            print(done.stderr)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        rows = None
        if os.path.exists(out):
            import polars as pl

            rows = pl.scan_parquet(out).select(pl.len()).collect().item()
    wall, steps = result["wall"], result["steps"]
    after = reference_seconds()
    load = os.getloadavg()
    print(f"{path}: {size_mb:.0f} MB, path {'whole' if args.whole else 'streaming'}, exit {result['rc']}, "
          f"{rows} requests written")
    print(f"  end to end      {wall:8.1f} s   {size_mb / wall:6.1f} MB/s   peak RSS (VmHWM) "
          f"{result['vm_hwm_mib']:.0f} MiB")
    print(f"  CPU (user+sys)  {result['cpu']:8.1f} s   {result['cpu'] / wall:6.2f} cores busy on average")
    print(f"  reference work  {before:8.2f} s before, {after:.2f} s after (CPU s of a fixed workload: higher = "
          "slower machine)")
    print(f"  grep -c thread= {grep_s:8.2f} s   ({grep.stdout.strip()} lines)   analyze / grep = {wall / grep_s:.1f}x")
    if steps:
        print("  analysis steps (s on their threads; the threads run side by side: more than the wall time in all)")
    for step, seconds in sorted(steps.items(), key=lambda kv: -kv[1]):
        print(f"  {step:15s} {seconds:8.1f} s")
    print(f"  load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
