"""The benchmark scenarios: what a sidecar costs, measured the way the mesh benchmark write-ups measure it.

* ``bench-ladder`` (:func:`run_ladder`): closed-loop load at rising concurrency until throughput stops rising.
  Envoy runs ``--concurrency 1`` pinned to one core (``taskset``), the client and the upstream to the other,
  trace logging on. Each step is its own Envoy run (its own ``envoy.log`` under ``step-N/``) and records the
  client's throughput and latencies and Envoy's CPU time from ``/proc/PID/task/*/stat`` (utime + stime of the
  worker threads, and of all threads) before and after the load.
* ``bench-ab`` (:func:`run_ab`): the same open-loop rate through the sidecar with trace logging on, through
  the sidecar at info level, and straight to the upstream; the client's p50/p90/p99 per arm (not pinned).
  The trace arm's capture (``sidecar-trace/envoy.log``) is what the cost figures are predicted from.

Results go to ``ladder.json`` / ``ab.json`` in the output directory. All traffic is to 127.0.0.1, bounded in
count and time (``lab.bench_client``'s caps), and stops by itself.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from envoy_dissector.lab.bench_client import BenchLoad, closed_loop, open_loop
from envoy_dissector.lab.bench_upstream import LeanUpstream
from envoy_dissector.lab.envoy import EnvoyConfig, EnvoyProcess, EnvoySettings, LabError, free_port
from envoy_dissector.lab.formats import DEFAULT_LOG_FORMAT, resolve_log_format

#: The request mixes a ladder can run: Envoy settings per name.
MIXES: Final = {
    "plain": EnvoySettings(concurrency=1),
    "lua-cpu": EnvoySettings(concurrency=1, lua_cpu_ms=0.5),
}
#: Closed-loop connections per ladder step. The first steps are paced (4 connections, each pausing between
#: requests, :data:`PACED_THINK_US`) so that some step runs the worker under half busy whatever the mix, with
#: several connections as a moderately loaded proxy serves many clients whose events sometimes share a
#: wake-up (one connection never lets them, which no production proxy sees); the steps between powers of two
#: make a step near half busy likely.
LADDER: Final = (4, 4, 4, 4, 4, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
#: The pause between requests (µs) of the paced steps, by step: 4 connections at 16, 8, 4, 2, 1 ms is about 250,
#: 500, 1,000, 2,000, 4,000 requests/s: the plain mix from ~5 % busy to near half, lua-cpu under half busy at the
#: first three (its 1 ms step saturates).
PACED_THINK_US: Final = {0: 16_000, 1: 8_000, 2: 4_000, 3: 2_000, 4: 1_000}
#: The paced steps run twice, the second time after the closed-loop steps (``paced_pass`` 1, 2), so that a reader can
#: take each step from the machine's faster pass, as the saturation is the ladder's best rate: a machine that slowed
#: for ~10 s (one quiet run: Envoy's /proc CPU per request 333, 215, 190, 169 µs at the first four paced steps against
#: 212-238, 167-177, 129-156, 108 in the runs before and after it, the fifth and the lua-cpu ladder right after it at
#: their usual cost) slows the steps of one pass.
PACED_PASSES: Final = 2
#: A step whose throughput (per second of the worker's CPU, :func:`worker_row`) is not this much above the best so
#: far counts as no rise; two in a row end the ladder once it has reached :data:`MIN_TOP_CONNECTIONS` (one noisy
#: step early on must not end it before saturation). The rate per CPU-second keeps rising a little with connections
#: after the worker always has work (deeper batches), and a ladder that stopped at 8 connections on a slow spell
#: measured its saturation 5-14 % under the same day's other runs: so every ladder measures up to 16.
RISE: Final = 1.05
MIN_TOP_CONNECTIONS: Final = 16
#: A step whose worker was on its core or waiting for it this share of the wall time (``worker_demand``) always had
#: work: Envoy, not the client, set its rate. The ladder does not stop before one such step (a client starved of
#: its core levels the throughput off too), unless it runs out of steps.
SATURATED_DEMAND: Final = 0.8
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")


def cores() -> tuple[int, int]:
    """(Envoy's core, the client's core): the first two this process may run on."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        raise LabError("the benchmark scenarios need two cores (Envoy on one, client and upstream on the other)")
    return allowed[0], allowed[1]


@contextmanager
def pinned(core: int) -> Iterator[None]:
    """Run this thread (and the threads it starts meanwhile) on ``core`` only."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@dataclass(frozen=True)
class CpuTimes:
    """CPU seconds (utime + stime) of a process's worker threads (``wrk:*``) and of all its threads; and, from
    ``/proc/PID/task/*/schedstat`` (in ns, not clock ticks), the worker threads' time on a CPU and time runnable
    but waiting for one (another task had the core). None where the kernel keeps no schedstat."""

    workers_s: float
    all_s: float
    workers_run_s: float | None = None
    workers_wait_s: float | None = None
    all_run_s: float | None = None


def _schedstat(task: Path) -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable and waiting for one) of one thread, or None."""
    try:
        fields = (task / "schedstat").read_text().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def cpu_times(pid: int) -> CpuTimes:
    """Read ``/proc/PID/task/*/stat`` and the worker threads' ``schedstat`` now."""
    workers = total = 0
    run_ns = wait_ns = all_ns = 0
    sched = True
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        total += ticks
        ran = _schedstat(task)
        sched = sched and ran is not None
        all_ns += ran[0] if ran else 0
        if name.startswith("wrk:"):
            workers += ticks
            run_ns, wait_ns = (run_ns + ran[0], wait_ns + ran[1]) if ran else (run_ns, wait_ns)
    return CpuTimes(workers / _CLOCK_TICKS, total / _CLOCK_TICKS, run_ns / 1e9 if sched else None,
                    wait_ns / 1e9 if sched else None, all_ns / 1e9 if sched else None)


def waited_s(tasks: list[Path]) -> float | None:
    """Seconds the threads ``tasks`` (``/proc/.../task/TID`` directories) were runnable but waiting for a CPU
    (schedstat's second field), or None where the kernel keeps no schedstat."""
    total = 0
    for task in tasks:
        got = _schedstat(task)
        if got is None:
            return None
        total += got[1]
    return total / 1e9


def threads_of(pid: int | None) -> list[Path]:
    """The thread directories of process ``pid`` (None: none)."""
    return [] if pid is None else sorted(Path(f"/proc/{pid}/task").iterdir())


def worker_row(before: CpuTimes, after: CpuTimes, load: BenchLoad) -> dict[str, object]:
    """Envoy's worker CPU over one load: utime + stime (clock ticks), per 1000 requests and over the wall time;
    and from ``schedstat``: CPU per 1000 requests in ns precision, ``worker_demand`` (time on a CPU or waiting
    for one, over the wall time: near 1 the worker always had work, whatever share of its core it was given)
    and ``worker_capacity_rps`` (requests per second of CPU the worker got: what it would serve with its core
    to itself when its demand is near 1)."""
    worker_s, all_s = after.workers_s - before.workers_s, after.all_s - before.all_s
    row: dict[str, object] = {
        "envoy_worker_cpu_s": round(worker_s, 3), "envoy_cpu_s": round(all_s, 3),
        "worker_utilisation": round(worker_s / load.wall_s, 3) if load.wall_s else None,
        "worker_cpu_ms_per_1000": round(worker_s * 1e6 / load.requests, 1) if load.requests else None}
    if None in (before.workers_run_s, after.workers_run_s, before.workers_wait_s, after.workers_wait_s):
        return {**row, "worker_run_s": None, "worker_wait_s": None, "worker_demand": None,
                "worker_run_ms_per_1000": None, "worker_capacity_rps": None}
    ran = after.workers_run_s - before.workers_run_s  # type: ignore[operator]
    waited = after.workers_wait_s - before.workers_wait_s  # type: ignore[operator]
    return {**row, "worker_run_s": round(ran, 4), "worker_wait_s": round(waited, 4),
            "worker_demand": round((ran + waited) / load.wall_s, 3) if load.wall_s else None,
            "worker_run_ms_per_1000": round(ran * 1e6 / load.requests, 1) if load.requests else None,
            "worker_capacity_rps": round(load.requests / ran, 1) if ran > 0 and load.requests else None}


class PinnedEnvoy(EnvoyProcess):
    """An Envoy started under ``taskset -c CORE`` (``core`` None: where the scheduler puts it)."""

    def __init__(self, config: EnvoyConfig, core: int | None) -> None:
        super().__init__(config)
        self.core = core

    def build_command(self) -> list[str]:
        command = super().build_command()
        return command if self.core is None else ["taskset", "-c", str(self.core), *command]


def _percentiles(latencies: list[int]) -> dict[str, int | None]:
    ordered = sorted(latencies)
    if not ordered:
        return {"p50": None, "p90": None, "p99": None}
    return {f"p{q}": ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] for q in (50, 90, 99)}


def _load_row(load: BenchLoad) -> dict[str, object]:
    return {"requests": load.requests, "wall_s": round(load.wall_s, 4),
            "rps": round(load.rps, 1), "latency_us": _percentiles(load.latencies_us)}


@contextmanager
def _envoy(settings: EnvoySettings, work_dir: Path, upstream_port: int, log_format: str,
           core: int | None) -> Iterator[PinnedEnvoy]:
    work_dir.mkdir(parents=True, exist_ok=True)
    config = EnvoyConfig(settings=settings, upstream_port=upstream_port, listener_port=free_port(),
                         log_format=log_format, work_dir=work_dir)
    envoy = PinnedEnvoy(config, core)
    envoy.start()
    try:
        yield envoy
    finally:
        envoy.stop()
        (work_dir / "admin-address.txt").unlink(missing_ok=True)


def _meta(work_dir: Path, settings: EnvoySettings, log_format: tuple[str, str], envoy: PinnedEnvoy,
          load: BenchLoad, extra: dict[str, object]) -> None:
    meta = {"envoy": {"settings": dataclasses.asdict(settings), "command": envoy.command},
            "log_format": {"name": log_format[0], "pattern": log_format[1]}, "load": _load_row(load), **extra}
    (work_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def run_ladder(out_dir: Path | str, *, mix: str = "plain", step_requests: int = 3_000, step_s: float = 2.0,
               log_format: str = DEFAULT_LOG_FORMAT, max_steps: int = len(LADDER)) -> Path:
    """Run the ladder for request ``mix`` (a name of :data:`MIXES`); write ``ladder.json`` and ``step-N/``.

    Each step sends at most ``step_requests`` requests within ``step_s`` seconds.

    Raises:
        LabError: Envoy or the upstream could not run, or fewer than two cores.
    """
    if mix not in MIXES:
        raise LabError(f"unknown request mix {mix!r}; known: {', '.join(MIXES)}")
    settings = MIXES[mix]
    fmt = resolve_log_format(log_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    envoy_core, client_core = cores()
    steps: list[dict[str, object]] = []
    with pinned(client_core), LeanUpstream(out) as upstream:

        def step(index: int, connections: int, think: int, paced_pass: int) -> dict[str, object]:
            step_dir = out / f"step-{index}"
            with _envoy(settings, step_dir, upstream.port, fmt[1], envoy_core) as envoy:
                assert envoy.pid is not None
                time.sleep(0.2)  # start-up work settles
                before = cpu_times(envoy.pid)
                load = closed_loop(envoy.listener_port, connections=connections, requests=step_requests,
                                   wall_s=step_s, think_us=think)
                after = cpu_times(envoy.pid)
                time.sleep(0.2)  # the last lines reach the log before Envoy stops
            row = {"step": index, "connections": connections, "think_us": think,
                   **({"paced_pass": paced_pass} if think else {}), **_load_row(load),
                   **worker_row(before, after, load), "loadavg_1m": round(os.getloadavg()[0], 2),
                   "dir": step_dir.name}
            _meta(step_dir, settings, fmt, envoy, load, {"scenario": "bench-ladder", "mix": mix, "step": row})
            steps.append(row)
            return row

        best, flat, saturated = 0.0, 0, False
        for index, connections in enumerate(LADDER[:max_steps]):
            think = PACED_THINK_US.get(index, 0)
            row = step(index, connections, think, paced_pass=1)
            if think:
                continue
            # (requests per second of the worker's CPU where schedstat gives it: on a core shared with other work
            # the rate served follows the share the scheduler gives, the rate per CPU-second follows Envoy)
            rate = float(row["worker_capacity_rps"] or row["rps"])  # type: ignore[arg-type]
            demand = row["worker_demand"] if row["worker_demand"] is not None else row["worker_utilisation"]
            saturated = saturated or float(demand or 0) >= SATURATED_DEMAND  # type: ignore[arg-type]
            if rate > best * RISE:
                best, flat = rate, 0
            else:
                best, flat = max(best, rate), flat + 1
                if flat >= 2 and connections >= MIN_TOP_CONNECTIONS and saturated:
                    break
        # the paced steps again, after the closed-loop ones (:data:`PACED_PASSES`)
        index = len(steps)
        for paced_pass in range(2, PACED_PASSES + 1):
            for paced, think in sorted(PACED_THINK_US.items()):
                if paced < max_steps:
                    step(index, LADDER[paced], think, paced_pass=paced_pass)
                    index += 1
    saturation = max((float(s["rps"]) for s in steps if not s["think_us"]), default=0.0)  # type: ignore[arg-type]
    ladder = {"scenario": "bench-ladder", "mix": mix, "envoy_core": envoy_core, "client_core": client_core,
              "settings": dataclasses.asdict(settings), "saturation_rps": saturation, "steps": steps}
    (out / "ladder.json").write_text(json.dumps(ladder, indent=2) + "\n", encoding="utf-8")
    return out


#: The arms of ``bench-ab``: (name, Envoy log level or None for straight to the upstream).
AB_ARMS: Final = (("direct", None), ("sidecar-info", "info"), ("sidecar-trace", "trace"))


def _since(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def _wait_parts(upstream_pid: int | None, envoy_pid: int | None) -> dict[str, list[Path]]:
    """The threads whose CPU waiting an A/B arm records, by part: the client (the calling thread), the
    upstream and, when the arm runs Envoy, its worker threads (``wrk:*``, which carry the requests) and its
    other threads (the main thread, the log's flush thread: off the requests' path)."""
    parts = {"client": [Path("/proc/thread-self")], "upstream": threads_of(upstream_pid)}
    if envoy_pid is not None:
        envoy = threads_of(envoy_pid)
        workers = [task for task in envoy if _thread_name(task).startswith("wrk:")]
        parts["envoy_workers"] = workers
        parts["envoy_other"] = [task for task in envoy if task not in workers]
    return parts


def _thread_name(task: Path) -> str:
    try:
        return (task / "comm").read_text().strip()
    except OSError:
        return ""


def _waits(parts: dict[str, list[Path]]) -> dict[str, float | None]:
    return {part: waited_s(tasks) for part, tasks in parts.items()}


def _waits_since(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float | None]:
    return {part: _since(before[part], after[part]) for part in before}


#: Between two bursts of bench-ab: the last burst's connections close and its log is written before the next
#: arm's burst starts.
AB_PAUSE_S: Final = 0.2


def run_ab(out_dir: Path | str, *, rate: float = 200.0, requests: int = 100, rounds: int = 16,
           log_format: str = DEFAULT_LOG_FORMAT) -> Path:
    """Run every arm of :data:`AB_ARMS` in ``rounds`` bursts of ``requests`` at ``rate`` requests/s, the arms'
    bursts interleaved, each arm's Envoy running throughout (a machine that slows for a few seconds slows every
    arm alike); write ``ab.json`` and each arm's capture under ``sidecar-info/`` and ``sidecar-trace/``.

    Raises:
        LabError: Envoy or the upstream could not run, or fewer than two cores.
    """
    fmt = resolve_log_format(log_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # (not pinned: a latency comparison pinned to a core that other work shares measures the scheduler's
    # wake-up delays, not the proxy; the scheduler places Envoy, the client and the upstream)
    wall = min(30.0, 3 * requests / rate + 5)
    loads: dict[str, BenchLoad] = {name: BenchLoad() for name, _ in AB_ARMS}
    worker_run_s: dict[str, float | None] = {name: 0.0 for name, level in AB_ARMS if level is not None}
    envoy_run_s: dict[str, float | None] = dict(worker_run_s)
    per_burst: dict[str, list[float | None]] = {name: [] for name in worker_run_s}
    p50_by_burst: dict[str, list[int | None]] = {name: [] for name in loads}
    # (the client's thread, the upstream's and Envoy's threads waiting for a CPU: contention the latencies carry)
    wait_s: dict[str, dict[str, float | None]] = {name: {} for name in loads}
    with LeanUpstream(out) as upstream, ExitStack() as stack:
        envoys: dict[str, tuple[EnvoySettings, PinnedEnvoy]] = {}
        for name, level in AB_ARMS:
            if level is not None:
                settings = dataclasses.replace(MIXES["plain"], log_level=level)
                envoys[name] = settings, stack.enter_context(_envoy(settings, out / name, upstream.port, fmt[1],
                                                                     None))
        time.sleep(AB_PAUSE_S)
        for _ in range(max(1, rounds)):
            for name, _level in AB_ARMS:
                envoy = envoys[name][1] if name in envoys else None
                parts = _wait_parts(upstream.pid, None if envoy is None else envoy.pid)
                waited = _waits(parts)
                before = None if envoy is None else cpu_times(envoy.pid)  # type: ignore[arg-type]
                load = open_loop(upstream.port if envoy is None else envoy.listener_port, rate=rate,
                                 requests=requests, wall_s=wall)
                waited = _waits_since(waited, _waits(parts))
                if envoy is not None and before is not None:
                    after = cpu_times(envoy.pid)  # type: ignore[arg-type]
                    ran = worker_row(before, after, load)["worker_run_s"]
                    per_burst[name].append(None if ran is None or not load.requests
                                           else round(float(ran) * 1e6 / load.requests, 1))  # type: ignore[arg-type]
                    for into, got in ((worker_run_s, ran), (envoy_run_s, _since(before.all_run_s, after.all_run_s))):
                        total = into[name]
                        into[name] = None if got is None or total is None else total + float(got)  # type: ignore[arg-type]
                p50_by_burst[name].append(_percentiles(load.latencies_us)["p50"])
                arm_load = loads[name]
                arm_load.latencies_us += load.latencies_us
                arm_load.late += load.late
                arm_load.wall_s += load.wall_s
                for part, part_waited in waited.items():
                    so_far = wait_s[name].get(part, 0.0)
                    wait_s[name][part] = None if part_waited is None or so_far is None else so_far + part_waited
                time.sleep(AB_PAUSE_S)
        for name, (settings, envoy) in envoys.items():
            _meta(out / name, settings, fmt, envoy, loads[name], {"scenario": "bench-ab", "arm": name})
    arms: dict[str, dict[str, object]] = {
        name: {"requests": load.requests, "late": load.late, "latency_us": _percentiles(load.latencies_us),
               "p50_us_by_burst": p50_by_burst[name]}
        for name, load in loads.items()}
    for name, by_part in wait_s.items():
        count = loads[name].requests
        per_part = {part: round(w * 1e6 / count, 1) if w is not None and count else None
                    for part, w in by_part.items()}
        arms[name]["cpu_wait_us_per_request_by_part"] = per_part
        arms[name]["cpu_wait_us_per_request"] = (None if None in per_part.values() or not per_part
                                                 else round(sum(per_part.values()), 1))  # type: ignore[arg-type]
    for name, ran in worker_run_s.items():  # Envoy's CPU per request, worker and all threads (schedstat, ns)
        count, every = loads[name].requests, envoy_run_s[name]
        arms[name]["worker_run_us_per_request"] = round(ran * 1e6 / count, 1) if ran is not None and count else None
        arms[name]["envoy_run_us_per_request"] = round(every * 1e6 / count, 1) if every is not None and count else None
        arms[name]["worker_run_us_per_request_by_burst"] = per_burst[name]
    ab = {"scenario": "bench-ab", "rate": rate, "requests_per_burst": requests, "rounds": rounds,
          "loadavg_1m": round(os.getloadavg()[0], 2), "arms": arms}
    (out / "ab.json").write_text(json.dumps(ab, indent=2) + "\n", encoding="utf-8")
    return out


#: The benchmark scenarios by name, with what each does (``envoy-dissect lab --list``).
BENCH_SCENARIOS: Final = {
    "bench-ladder": "Closed-loop load at 1, 2, 4, ... connections until throughput stops rising, Envoy "
                    "--concurrency 1 pinned to one core, client and upstream on the other, trace logging on; "
                    "per step throughput, latencies and Envoy's CPU from /proc; two request mixes: DIR/plain, "
                    "DIR/lua-cpu (a Lua filter burns 0.5 ms CPU per request).",
    "bench-ab": "The same open-loop rate (200/s) straight to the upstream, through the sidecar at info level "
                "and through it at trace level, in 16 interleaved bursts of 100 an arm (every arm's Envoy running "
                "throughout); client p50/p90/p99 per arm in DIR/ab.json.",
}


def run_bench(name: str, out_dir: Path | str, *, log_format: str = DEFAULT_LOG_FORMAT) -> Path:
    """Run benchmark scenario ``name`` (:data:`BENCH_SCENARIOS`) into ``out_dir``."""
    out = Path(out_dir)
    if name == "bench-ladder":
        for mix in MIXES:
            run_ladder(out / mix, mix=mix, log_format=log_format)
        return out
    if name == "bench-ab":
        return run_ab(out, log_format=log_format)
    raise LabError(f"unknown benchmark scenario {name!r}; known: {', '.join(BENCH_SCENARIOS)}")
