"""``envoy-dissect analyze`` beside lnav and ``grep -c`` on the same capture, in one run (issue 32).

    python bench/vs_lnav.py [FILE] [--repeats 3] [--size-mb 200]

FILE defaults to ``/tmp/envoy-corpus-<size>/corpus.log``; when it is missing it is built by
``bench/make_corpus.py`` (one real Envoy run of 4000 requests, replicated to ``--size-mb``). Each repeat runs, in
this order: ``grep -c thread= FILE``, lnav (Debian's package) indexing FILE and answering one SQL query
(``lnav -n -c ';SELECT count(*) FROM all_logs' FILE``), and ``envoy-dissect analyze FILE -o OUT.parquet``. Each
child is measured by ``wait4``: wall time, CPU seconds (user + sys of the child and its descendants) and its peak
RSS. The medians of the repeats are printed side by side, with our rate's ratio to lnav's and to grep's, by wall
time and by CPU time (on a loaded machine the CPU ratio is the steadier one). Without lnav it says so and measures
the rest. Prints one markdown row for bench/README.md at the end.
"""
from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

LNAV_QUERY = ";SELECT count(*) FROM all_logs"
#: Not our package's modules: skipped by the byte-compile (the Rust build directory alone holds thousands of files).
_NOT_PACKAGE = re.compile(r"[/\\](tests|bench|native|fixtures|build|\.git)[/\\]")


def byte_compile_package() -> Path | None:
    """Write the package's ``.pyc`` files (as ``pip install`` of a wheel does); its directory, None when absent."""
    spec = importlib.util.find_spec("envoy_dissector.parser")  # (an editable install maps the top package by a
    if spec is None or spec.origin is None:                       # path hook: a subpackage's file is real)
        return None
    home = Path(spec.origin).parents[1]
    compileall.compile_dir(home, quiet=2, rx=_NOT_PACKAGE, workers=0)
    return home


@dataclass(frozen=True)
class Measured:
    wall: float
    cpu: float
    peak_mib: float
    stdout: str


def measure(argv: list[str], succeeded: tuple[int, ...] = (0,)) -> Measured:
    """Run ``argv`` to its end; its wall time, CPU seconds (user + sys) and peak RSS from ``wait4``. An exit code
    outside ``succeeded`` ends the bench with the child's last words: a failed run is not a measurement."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert child.stderr is not None
        err = child.stderr.read()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if child.returncode not in succeeded:
        sys.exit(f"{argv[0]} exited {child.returncode}: {err.decode(errors='replace').strip()[-400:]}")
    return Measured(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, text)


def ensure_corpus(path: Path, size_mb: float) -> None:
    if path.exists():
        return
    make = Path(__file__).with_name("make_corpus.py")
    print(f"building {path} ({size_mb:.0f} MiB) with {make.name} ...", flush=True)
    subprocess.run([sys.executable, str(make), "--runs", "1", "--requests", "4000", "--size-mb", str(size_mb),
                    "--out", str(path)], check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size-mb", type=float, default=200.0, help="size of the capture to build when FILE is missing")
    args = ap.parse_args()
    path: Path = args.file or Path(f"/tmp/envoy-corpus-{args.size_mb:.0f}/corpus.log")
    ensure_corpus(path, args.size_mb)
    megabytes = path.stat().st_size / 1e6
    lnav = shutil.which("lnav")
    dissect = shutil.which("envoy-dissect") or sys.exit("envoy-dissect is not on PATH (pip install -e .)")
    home = byte_compile_package()
    print(f"byte-compiled {home} (as an installed wheel is)" if home else "envoy_dissector not importable here")
    if lnav is None:
        print("lnav: not installed (Debian: apt-get install -y lnav); measuring without it")
    tools: dict[str, list[str]] = {"grep -c": ["grep", "-c", "thread=", str(path)]}
    if lnav is not None:
        tools["lnav"] = [lnav, "-n", "-c", LNAV_QUERY, str(path)]
    results: dict[str, list[Measured]] = {name: [] for name in [*tools, "envoy-dissect"]}
    with tempfile.TemporaryDirectory(prefix="vs-lnav-") as tmp:
        tools["envoy-dissect"] = [dissect, "analyze", str(path), "-o", str(Path(tmp) / "requests.parquet")]
        for repeat in range(args.repeats):
            for name, argv in tools.items():
                got = measure(argv, (0, 1) if name == "grep -c" else (0,))  # (grep -c: 1 when it counts none)
                results[name].append(got)
                print(f"  repeat {repeat + 1} {name:<14} {got.wall:7.2f} s wall {got.cpu:7.2f} CPU-s "
                      f"{got.peak_mib:7.0f} MiB", flush=True)
    print(f"\n{path}: {megabytes:.0f} MB; medians of {args.repeats} (CPU-s: user + sys of the child)")
    print(f"{'':<14} {'wall s':>8} {'MB/s':>8} {'CPU-s':>8} {'MB/CPU-s':>9} {'peak MiB':>9}")
    med: dict[str, tuple[float, float, float]] = {}
    for name, runs in results.items():
        wall = statistics.median(r.wall for r in runs)
        cpu = statistics.median(r.cpu for r in runs)
        peak = statistics.median(r.peak_mib for r in runs)
        med[name] = (wall, cpu, peak)
        print(f"{name:<14} {wall:8.2f} {megabytes / wall:8.1f} {cpu:8.2f} {megabytes / max(cpu, 1e-3):9.1f} "
              f"{peak:9.0f}")
    ours_wall, ours_cpu, ours_peak = med["envoy-dissect"]
    ratios = []
    for other in ("lnav", "grep -c"):
        if other in med:
            wall, cpu, _ = med[other]
            ratios.append(f"{wall / ours_wall:.2f}x {other}'s rate by wall, {cpu / ours_cpu:.2f}x by CPU")
    print("envoy-dissect: " + ("; ".join(ratios) or "no reference measured"))
    if "lnav" in results:
        print(f"lnav answered: {results['lnav'][-1].stdout.split()[-1] if results['lnav'][-1].stdout else '?'} "
              "log lines")
    lnav_cell = (f"{megabytes / med['lnav'][0]:.1f} MB/s, {med['lnav'][1]:.2f} CPU-s, {med['lnav'][2]:.0f} MiB"
                 if "lnav" in med else "not installed")
    print(f"\n| {datetime.now(UTC):%Y-%m-%d %H:%M} | {megabytes:.0f} MB | {megabytes / ours_wall:.1f} | "
          f"{ours_cpu:.2f} | {ours_peak:.0f} MiB | {lnav_cell} | {'; '.join(ratios)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
