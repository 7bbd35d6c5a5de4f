"""Findings: what the numbers say, with evidence and the fix users apply."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import polars as pl

from envoy_dissector.analysis.stats import counted
from envoy_dissector.parser.kinds import EventKind

Severity = Literal["info", "warning", "critical"]

SATURATED_UTILISATION = 0.8
IMBALANCE_RATIO = 1.5
SHARE_WARNING = 0.10
CHURN_SHARE = 0.2
CHURN_REUSE = 3.0  # requests per upstream connection above which new connections are warm-up
SLOW_UPSTREAM_SHARE = 0.5


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    title: str
    evidence: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _ms(value: object) -> str:
    """µs as text; ``value`` is a polars aggregate (int, float or None)."""
    if not isinstance(value, (int, float)):
        return "?"
    us = value
    return f"{us / 1000:.2f} ms" if abs(us) >= 1000 else f"{us:.0f} µs"


def saturated_workers(workers: pl.DataFrame, requests: pl.DataFrame) -> list[Finding]:
    out = []
    r = counted(requests)
    for origin, thread, util, _busy, n, _conns in workers.iter_rows():
        if util is None or util < SATURATED_UTILISATION or not n:
            continue
        mine = r.filter((pl.col("origin") == origin) & (pl.col("thread") == thread))
        queue = mine["loop_queue_us"].median() if mine.height else None
        total = mine["total_us"].median() if mine.height else None
        out.append(Finding(
            f"saturated-worker-{thread}", "critical",
            f"Worker {thread} is saturated ({util:.0%} busy)",
            f"{origin}: worker thread {thread} was busy {util:.0%} of the traffic window and served {n} requests; "
            f"its requests waited a median {_ms(queue)} for the event loop (median total {_ms(total)}).",
            "Give the sidecar more CPU (raise the CPU limit) and workers (--concurrency / "
            "proxy.istio.io/config concurrency), or spread connections across workers.",
        ))
    return out


def imbalance(workers: pl.DataFrame) -> list[Finding]:
    out = []
    for origin, group in workers.group_by("origin"):
        busy = group.filter(pl.col("requests") > 0)
        if busy.height < 2 and group.height < 2:
            continue
        counts = group["requests"]
        top, low = int(counts.max() or 0), int(counts.min() or 0)  # type: ignore[arg-type]
        utils = group["utilisation"].drop_nulls()
        if top >= 10 and (low == 0 or top / max(low, 1) >= IMBALANCE_RATIO):
            detail = ", ".join(f"thread {t}: {n} requests, {u:.0%} busy" for t, n, u in
                               group.select("thread", "requests", "utilisation").fill_null(0).iter_rows())
            out.append(Finding(
                "worker-imbalance", "warning", "Work is unevenly spread across workers",
                f"{origin[0] if isinstance(origin, tuple) else origin}: {detail}"
                + (f" (busiest {utils.max():.0%}, idlest {utils.min():.0%})" if utils.len() else ""),  # type: ignore[str-bytes-safe]
                "Balance accepted connections across workers: listener connection_balance_config: "
                "exact_balance (Istio: an EnvoyFilter on the inbound/outbound listener).",
            ))
    return out


def shares(requests: pl.DataFrame) -> list[Finding]:
    r = counted(requests)
    out: list[Finding] = []
    if r.height == 0:
        return out
    total = r["total_us"].sum() or 1
    for column, what, fix in (
        ("wasm_us", "Wasm filters", "Fewer/lighter Wasm plugins; Istio: Telemetry API with native stats "
                                   "instead of the Wasm stats plugin."),
        ("tracing_us", "tracing", "Lower the tracing sampling rate (meshConfig.defaultConfig.tracing.sampling) "
                                  "or disable tracing where not needed."),
    ):
        share = float(r[column].sum() or 0) / float(total)
        if share >= SHARE_WARNING:
            out.append(Finding(f"{column[:-3]}-share", "warning", f"{what} take {share:.0%} of request time",
                               f"{what}: median {_ms(r[column].median())} per request over {r.height} requests.",
                               fix))
    return out


def churn(requests: pl.DataFrame) -> list[Finding]:
    r = counted(requests).filter(pl.col("upstream_conn_id").is_not_null())
    if r.height < 5:
        return []
    new = r.filter(pl.col("us_cx_beg_us").is_not_null())
    share = new.height / r.height
    # Warm-up is not churn: a pool that opened its connections once and then reused them serves several
    # requests per connection.
    per_connection = r.height / max(r.select("origin", "upstream_conn_id").unique().height, 1)
    if share < CHURN_SHARE or per_connection >= CHURN_REUSE:
        return []
    return [Finding(
        "upstream-connection-churn", "warning", f"{share:.0%} of requests opened a new upstream connection",
        f"{new.height} of {r.height} requests waited for a new upstream connection "
        f"(median connect {_ms(new['upstream_connect_us'].median())}); {per_connection:.1f} requests per "
        "upstream connection.",
        "Reuse connections: check the upstream's keep-alive, the cluster's max_requests_per_connection and "
        "idle_timeout (Istio DestinationRule connectionPool.http).",
    )]


def retries(requests: pl.DataFrame) -> list[Finding]:
    r = requests.filter(~pl.col("internal"))
    retried = r.filter(pl.col("upstream_attempts") > 1)
    failed = r.filter(pl.col("status") >= 500)
    out = []
    if retried.height:
        statuses = retried.group_by("status").len().sort("len", descending=True)
        out.append(Finding(
            "retries", "warning", f"{retried.height} request(s) needed upstream retries",
            f"max {retried['upstream_attempts'].max()!s} attempts; statuses after retrying: "
            + ", ".join(f"{s}: {n}" for s, n in statuses.iter_rows())
            + f"; median total {_ms(retried['total_us'].median())} (retry back-off is inside `router`).",
            "Fix the failing upstream; bound retries (retry_on, num_retries, per_try_timeout) so they do not "
            "multiply load.",
        ))
    if failed.height:
        out.append(Finding("server-errors", "warning", f"{failed.height} request(s) ended with a 5xx",
                           f"statuses: {dict(failed.group_by('status').len().iter_rows())}", ""))
    return out


def slow_side(requests: pl.DataFrame) -> list[Finding]:
    r = counted(requests).filter(pl.col("upstream_conn_id").is_not_null())
    if r.height == 0:
        return []
    total = float(r["total_us"].median() or 0)  # type: ignore[arg-type]
    wait = float(r["upstream_wait_us"].median() or 0)  # type: ignore[arg-type]
    queue = float(r["loop_queue_us"].median() or 0)  # type: ignore[arg-type]
    proxy = total - wait
    if total > 0 and wait / total >= SLOW_UPSTREAM_SHARE and queue < wait / 2:
        return [Finding(
            "slow-upstream", "info", "The upstream is slow, not the proxy",
            f"median upstream_wait {_ms(wait)} of median total {_ms(total)} ({wait / total:.0%}); "
            f"the proxy's own phases take a median {_ms(proxy)}.",
            "Look at the upstream service (its latency, CPU, dependencies); the sidecar is not the bottleneck.",
        )]
    return [Finding(
        "proxy-time", "info", "Most of the time is spent in the proxy",
        f"median total {_ms(total)}: upstream_wait {_ms(wait)}, proxy phases {_ms(proxy)}, "
        f"event-loop queueing {_ms(queue)}.", "See the phase percentiles and the event-loop view.",
    )]


def observer_cost(events: pl.DataFrame, requests: pl.DataFrame) -> list[Finding]:
    """Trace logging's own cost: the gap between two lines Envoy writes back to back.

    ``socket event`` is followed by ``write ready``/``read ready`` with almost no work between,
    so that gap is about the cost of formatting and writing one record.
    """
    pairs = events.filter(pl.col("thread").is_not_null()).sort("origin", "thread", "ts_us", "line_no").with_columns(
        nxt=pl.col("kind").shift(-1).over("origin", "thread"),
        gap=pl.col("ts_us").shift(-1).over("origin", "thread") - pl.col("ts_us"))
    gaps = pairs.filter((pl.col("kind") == EventKind.SOCKET_EVENT)
                        & pl.col("nxt").cast(pl.String).is_in([EventKind.WRITE_READY, EventKind.READ_READY]))["gap"]
    r = counted(requests)
    if gaps.len() < 5 or r.height == 0:
        return []
    per_line = float(gaps.median() or 0)  # type: ignore[arg-type]
    lines = r["log_lines"].median() if "log_lines" in r.columns else None
    cost = per_line * float(lines) if lines is not None else None  # type: ignore[arg-type]
    return [Finding(
        "observer-effect", "info", f"Trace logging itself costs about {per_line:.1f} µs per log record",
        f"median gap between back-to-back records ({gaps.len()} samples); "
        + (f"a request here logs a median {lines:.0f} records, so ≈{_ms(cost)} of its time is the observer."  # type: ignore[str-bytes-safe]
           if cost is not None else ""),
        "Phases with many log lines (header parsing, filters) are inflated by this much; turn trace logging "
        "off outside captures.",
    )]


def slow_filters(requests: pl.DataFrame, phases: pl.DataFrame, threshold_us: int = 100) -> list[Finding]:
    """Filters whose own span is large (decode or encode)."""
    uids = counted(requests).select("request_uid")
    spans = phases.filter(~pl.col("part_of_total") & pl.col("phase").is_in(["filter_chain", "encode"])
                          & ~pl.col("detail").str.contains("route lookup")).join(uids, on="request_uid", how="semi")
    if spans.height == 0:
        return []
    stats = spans.group_by("phase", "detail").agg(p50=pl.col("dur_us").median(), p99=pl.col("dur_us").quantile(0.99),
                                                  n=pl.len()).filter(pl.col("p50") >= threshold_us)
    out = []
    for phase, detail, p50, p99, n in stats.sort("p50", descending=True).iter_rows():
        if detail.endswith(" (paused)"):  # the filter stopped iteration and waited (timer, external call): no CPU
            name = detail.removesuffix(" (paused)")
            out.append(Finding(
                f"paused-filter-{name}", "warning", f"Filter {name} holds requests a median {_ms(p50)} ({phase})",
                f"{name} stopped the filter chain and resumed it later: p50 {_ms(p50)}, p99 {_ms(p99)} "
                f"over {n} requests. The worker was free meanwhile (a timer or an external call, not CPU).",
                "Check this filter's configuration (fault injection delay, ext_authz / rate-limit service "
                "latency, Lua httpCall target).",
            ))
            continue
        out.append(Finding(
            f"slow-filter-{detail}", "warning", f"Filter {detail} takes a median {_ms(p50)} per request ({phase})",
            f"{detail}: p50 {_ms(p50)}, p99 {_ms(p99)} over {n} requests in {phase}.",
            "Profile or simplify this filter (Lua/Wasm script cost, external calls); it runs on the worker thread "
            "and delays every other connection on it.",
        ))
    return out


def tracing_flushes(requests: pl.DataFrame, phases: pl.DataFrame) -> list[Finding]:
    """The tracer's span flushes: how many, their own worker time, how many client requests they delayed."""
    if "flush_work_us" not in requests.columns:
        return []
    flushes = requests.filter(pl.col("flush_work_us").is_not_null())
    if flushes.height == 0:
        return []
    delayed = phases.filter(pl.col("detail").str.starts_with("tracing flush "))
    clients = counted(requests)
    work = flushes["flush_work_us"]
    per_client = (work.sum() or 0) / max(clients.height, 1)
    cluster = flushes["cluster"].drop_nulls().mode().to_list() if "cluster" in flushes.columns else []
    return [Finding(
        "tracing-flush", "info",
        f"The tracer flushed spans {flushes.height} times, {_ms(work.median())} of worker time each",
        f"{flushes.height} internal requests to the collector{f' (cluster {cluster[0]})' if cluster else ''} took "
        f"{_ms(work.sum())} of worker time in all (median {_ms(work.median())}, max {_ms(work.max())} per flush; "
        f"≈ {_ms(per_client)} per client request); they delayed {delayed['request_uid'].n_unique()} client "
        f"requests in flight on the same worker by {_ms(delayed['dur_us'].sum())} in all (tracing_us).",
        "Lower the sampling rate (Istio: meshConfig.defaultConfig.tracing.sampling / Telemetry API "
        "randomSamplingPercentage), send larger batches less often (Envoy runtime tracing.zipkin.min_flush_spans, "
        "tracing.zipkin.flush_interval_ms), or disable tracing where it is not used.")]


def format_notes(notes: list[str]) -> list[Finding]:
    return [Finding(f"note-{i}", "info", "Capture caveat", note) for i, note in enumerate(notes, 1)]


def all_findings(requests: pl.DataFrame, workers: pl.DataFrame, events: pl.DataFrame, phases: pl.DataFrame,
                 notes: list[str]) -> list[Finding]:
    found = (saturated_workers(workers, requests) + imbalance(workers) + shares(requests)
             + slow_filters(requests, phases) + churn(requests)
             + retries(requests) + slow_side(requests) + observer_cost(events, requests)
             + tracing_flushes(requests, phases) + format_notes(notes))
    order = {"critical": 0, "warning": 1, "info": 2}
    return sorted(found, key=lambda f: order[f.severity])
