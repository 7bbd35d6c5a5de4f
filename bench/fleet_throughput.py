"""Fleet mode vs one process over many captures (prints numbers; not a test).

    python bench/fleet_throughput.py [--inputs 8] [--requests 3000] [--workers 2] [--out /tmp/envoy-fleet]

Makes ``--inputs`` real captures with the lab (one Envoy run each, scenario ``workers``: 2 worker threads,
16 keep-alive connections; reused from ``OUT/runs`` on later invocations), then times

* one process: ``dissect(input)`` for each input in turn (what ``analyze`` does per file), and
* fleet: ``run_fleet(inputs)`` on a Dask LocalCluster of ``--workers`` processes (dataset written),

printing wall time, MB/s over the inputs' bytes and peak RSS (this process; the workers' own peaks from
``/proc`` while they run). Everything runs on 127.0.0.1; the load of each Envoy run is bounded.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import threading
import time
from pathlib import Path

import psutil

from envoy_dissector.analysis import dissect
from envoy_dissector.fleet.engine import run_fleet
from envoy_dissector.lab.run import run_scenario


def _captures(out: Path, n: int, requests: int) -> list[Path]:
    logs = []
    for i in range(n):
        run = out / "runs" / f"run-{i}"
        log = run / "envoy.log"
        if not log.exists():
            run_scenario("workers", run, log_format="istio-thread", requests=requests)
        logs.append(log)
    return logs


class _PeakChildren:
    """Peak summed RSS of this process's children (the Dask workers) while it runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.1)

    def __enter__(self) -> _PeakChildren:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/envoy-fleet"))
    args = ap.parse_args()
    logs = _captures(args.out, args.inputs, args.requests)
    size_mb = sum(p.stat().st_size for p in logs) / 1e6
    print(f"{len(logs)} inputs, {size_mb:.1f} MB, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")

    t0 = time.perf_counter()
    requests = sum(dissect(str(p)).requests.height for p in logs)
    single_s = time.perf_counter() - t0
    single_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"one process : {single_s:7.1f} s  {size_mb / single_s:6.1f} MB/s  {requests} requests  "
          f"peak RSS {single_rss:.0f} MiB")

    dataset = args.out / "dataset"
    shutil.rmtree(dataset, ignore_errors=True)
    with _PeakChildren() as peak:
        t0 = time.perf_counter()
        summary = run_fleet([str(p) for p in logs], dataset, workers=args.workers)
        fleet_s = time.perf_counter() - t0
    print(f"fleet ({args.workers} w): {fleet_s:7.1f} s  {size_mb / fleet_s:6.1f} MB/s  "
          f"{summary['diagnostics'].get('requests')} requests  workers' peak RSS {peak.peak / 2**20:.0f} MiB "
          f"(cluster start-up included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
