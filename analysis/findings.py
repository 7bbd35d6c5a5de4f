"""Findings: what the numbers say, with evidence and the fix users apply.

Severity follows measured harm — how long requests waited, how many, how often — never a busy share
alone. The rules and thresholds are listed in docs/findings.md (keep the two in step).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Literal

import polars as pl

from envoy_dissector.analysis.gap_counts import COLD, GapCounts, back_to_back
from envoy_dissector.analysis.schema import Phase
from envoy_dissector.analysis.stages.cost import (
    BACK_TO_BACK_US,
    COLD_BACK_TO_BACK_US,
    STALL_NOTE_SHARE,
    record_costs_from_gaps,
)
from envoy_dissector.analysis.stages.internal import (
    AUTHZ,
    HEALTH_CHECK_RESULT_KINDS,
    RATE_LIMIT,
    WorkKind,
    is_work_row,
)
from envoy_dissector.analysis.stages.loop import WAITED_US
from envoy_dissector.analysis.stats import counted, median, percentile, percentile_expr, rows_where
from envoy_dissector.analysis.units import format_us

Severity = Literal["info", "warning", "critical"]
#: The one severity order (most severe first): report, summary.json and dashboard sort by it.
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}

#: Saturation: a worker whose requests waited for it (docs/findings.md, "saturated-worker").
SATURATION_WAITED_SHARE = 0.25  # share of the worker's requests that waited ≥ WAITED_US: warning
SATURATION_MIN_WAITED = 3
SATURATION_CRITICAL_SHARE = 0.5  # ... and more than this share (most), and waiting was at least half the median
#: request's time in the proxy: critical means most requests lost a large part of their time (docs/findings.md)
SATURATION_CRITICAL_WAIT_SHARE = 0.5
IMBALANCE_RATIO = 1.5
IMBALANCE_MIN_REQUESTS = 10
SHARE_WARNING = 0.10
CHURN_SHARE = 0.2
CHURN_REUSE = 3.0  # requests per upstream connection above which new connections are warm-up
SLOW_UPSTREAM_SHARE = 0.5
SLOW_FILTER_US = 100
SLOW_FILTER_SHARE = 0.10  # of the median total: below it a slow filter is info
SERVER_ERRORS_CRITICAL_SHARE = 0.25
#: Worker stalls: a gap this long between two adjacent statements of Envoy (no work between them) means the
#: worker was off the CPU or blocked writing its log (docs/findings.md, "worker-stalls").
STALL_US = 100
STALL_MIN_PAIRS = 20
STALL_MIN_FOR_RATE = 3  # stalls seen before a rate per request is given
STALL_WARNING_SHARE = 0.10  # expected stall time per request, of the median request's total: warning


@dataclass(frozen=True)
class Finding:
    id: str
    severity: Severity
    title: str
    evidence: str
    fix: str = ""

    @property
    def rank(self) -> int:
        """Position in :data:`SEVERITY_ORDER` (0 = most severe)."""
        return SEVERITY_ORDER[self.severity]

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def _waited(requests: pl.DataFrame) -> pl.Series:
    """Each request's event-loop wait: before its first read plus inside its life."""
    return (requests["queue_before_read_us"].fill_null(0) + requests["loop_queue_us"].fill_null(0)).alias("wait")


def saturated_workers(workers: pl.DataFrame, requests: pl.DataFrame,
                      on_cpu: dict[tuple[str, int], float] | None = None) -> list[Finding]:
    """A worker whose requests waited for it: enough of them, long enough (utilisation is context only).
    ``on_cpu``: per (origin, thread), the share of the window the worker ran (``Cost.on_cpu``: its busy time
    without the events stretched while it did not run, the rule CPU per request uses); when the time off the CPU
    is ``stages.cost.STALL_NOTE_SHARE`` of the busy time or more, the finding says so (more workers help less
    than the busy share suggests)."""
    out = []
    r = counted(requests.select_seq("complete", "internal", "origin", "thread", "total_us", "queue_before_read_us",
                                    "loop_queue_us"))
    per_worker = r.partition_by("origin", "thread", as_dict=True) if r.height else {}  # (one pass, not a filter each)
    for w in workers.iter_rows(named=True):
        mine = per_worker.get((w["origin"], w["thread"]))
        if mine is None or mine.height == 0:
            continue
        wait = _waited(mine)
        waited = int((wait >= WAITED_US).sum())
        share = waited / mine.height
        if waited < SATURATION_MIN_WAITED or share < SATURATION_WAITED_SHARE:
            continue
        in_proxy = mine["total_us"].fill_null(0) + mine["queue_before_read_us"].fill_null(0)
        wait_share = median(wait / in_proxy.clip(lower_bound=1)) or 0.0
        critical = share > SATURATION_CRITICAL_SHARE and wait_share >= SATURATION_CRITICAL_WAIT_SHARE
        util = w["utilisation"] or 0.0
        ran = (on_cpu or {}).get((w["origin"], w["thread"]))
        off = ran is not None and util > 0 and (util - ran) >= STALL_NOTE_SHARE * util
        busy = f"busy {util:.0%} of the traffic window over {w['connections']} connections"
        if off and ran is not None:
            busy += (f", but on the CPU only {ran:.0%}: {1 - ran / util:.0%} of its busy time was events stretched "
                     "while it did not run (see cost)")
        fix = ("Give the sidecar more CPU (raise the CPU limit) and workers (--concurrency / "
               "proxy.istio.io/config concurrency), or spread connections across workers; at trace level the "
               "logging itself is part of the load (see observer-effect).")
        if off:
            fix = ("Part of the busy time the worker did not run: check the sidecar's CPU limit and throttling, the "
                   "node's CPU pressure and the log's destination (see worker-stalls) before adding workers. " + fix)
        out.append(Finding(
            f"saturated-worker-{w['thread']}", "critical" if critical else "warning",
            f"Worker {w['thread']} is saturated: {share:.0%} of its requests waited for it",
            f"{w['origin']}: {waited} of {mine.height} requests on worker {w['thread']} waited ≥ "
            f"{format_us(WAITED_US)} for the event loop (median wait {format_us(median(wait))}, p90 "
            f"{format_us(percentile(wait, 0.9))}; waiting was a median {wait_share:.0%} of a request's time in "
            f"the proxy); the worker was {busy}.",
            fix,
        ))
    return out


@dataclass(frozen=True)
class Imbalance:
    """How unevenly one origin's requests are spread over its workers (the one rule: findings + dashboard)."""

    origin: str
    workers: int
    min_requests: int
    max_requests: int
    min_utilisation: float
    max_utilisation: float
    #: ``None`` when the spread is not imbalanced; else the finding's severity
    severity: Severity | None

    @property
    def ratio(self) -> float:
        return self.max_requests / max(self.min_requests, 1)


def imbalance_of(origin: str, group: pl.DataFrame) -> Imbalance:
    """Imbalanced: ≥ 2 workers, the busiest served ≥ 10 requests and ≥ 1.5× the least busy. A warning only
    when that hurt: the busiest worker's requests waited (≥ 25% of them ≥ 1 ms) and the least busy worker's
    median wait is at least 1 ms shorter; otherwise info."""
    req = group["requests"].cast(pl.Int64)
    util = group["utilisation"].fill_null(0.0)
    top, low = int(req.max() or 0), int(req.min() or 0)  # type: ignore[arg-type]
    severity: Severity | None = None
    if group.height >= 2 and top >= IMBALANCE_MIN_REQUESTS and top / max(low, 1) >= IMBALANCE_RATIO:
        busiest = group.sort("requests", descending=True).row(0, named=True)
        idlest = group.sort("requests").row(0, named=True)
        hurt = (busiest["requests"] and busiest["waited"] >= SATURATION_WAITED_SHARE * busiest["requests"]
                and (busiest["wait_p50_us"] or 0) - (idlest["wait_p50_us"] or 0) >= WAITED_US)
        severity = "warning" if hurt else "info"
    return Imbalance(origin, group.height, low, top, float(util.min() or 0.0),  # type: ignore[arg-type]
                     float(util.max() or 0.0), severity)  # type: ignore[arg-type]


def imbalances(workers: pl.DataFrame) -> list[Imbalance]:
    return [imbalance_of(str(origin), g) for (origin,), g in workers.group_by("origin", maintain_order=True)]


def imbalance(workers: pl.DataFrame) -> list[Finding]:
    out = []
    for im in imbalances(workers):
        if im.severity is None:
            continue
        g = workers.filter(pl.col("origin") == im.origin).sort("thread")
        detail = ", ".join(f"thread {w['thread']}: {w['requests']} requests, {(w['utilisation'] or 0):.0%} busy"
                           + f", median wait {format_us(w['wait_p50_us'])}"
                           for w in g.iter_rows(named=True))
        out.append(Finding(
            "worker-imbalance", im.severity, "Work is unevenly spread across workers",
            f"{im.origin}: {detail} ({im.ratio:.1f}× more requests on the busiest).",
            "Balance accepted connections across workers: listener connection_balance_config: "
            "exact_balance (Istio: an EnvoyFilter on the inbound/outbound listener).",
        ))
    return out


def shares(requests: pl.DataFrame) -> list[Finding]:
    r = counted(requests, ("total_us", "wasm_us", "tracing_us"))
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
                               f"{what}: median {format_us(median(r[column]))} per request over {r.height} "
                               "requests.", fix))
    return out


def churn(requests: pl.DataFrame) -> list[Finding]:
    r = counted(requests, ("origin", "upstream_conn_id", "us_cx_beg_us", "upstream_connect_us")).filter(
        pl.col("upstream_conn_id").is_not_null())
    if r.height < 5:
        return []
    new = r.filter(pl.col("us_cx_beg_us").is_not_null())
    share = new.height / r.height
    # Warm-up is not churn: a pool that opened its connections once and then reused them serves several
    # requests per connection.
    per_connection = r.height / max(r.select_seq("origin", "upstream_conn_id").unique().height, 1)
    if share < CHURN_SHARE or per_connection >= CHURN_REUSE:
        return []
    return [Finding(
        "upstream-connection-churn", "warning", f"{share:.0%} of requests opened a new upstream connection",
        f"{new.height} of {r.height} requests waited for a new upstream connection "
        f"(median connect {format_us(median(new['upstream_connect_us']))}); {per_connection:.1f} requests per "
        "upstream connection.",
        "Reuse connections: check the upstream's keep-alive, the cluster's max_requests_per_connection and "
        "idle_timeout (Istio DestinationRule connectionPool.http).",
    )]


def retries(requests: pl.DataFrame) -> list[Finding]:
    r = rows_where(requests, ~pl.col("internal"), ("upstream_attempts", "status", "total_us"))
    retried = r.filter(pl.col("upstream_attempts") > 1)
    failed = r.filter(pl.col("status") >= 500)
    out = []
    if retried.height:
        after = retried.group_by("status").len().sort("len", descending=True)
        attempts = int(retried["upstream_attempts"].max() or 0)  # type: ignore[arg-type]
        out.append(Finding(
            "retries", "warning", f"{retried.height} request(s) needed upstream retries",
            f"max {attempts} attempts; statuses after retrying: "
            + ", ".join(f"{s}: {n}" for s, n in after.iter_rows())
            + f"; median total {format_us(median(retried['total_us']))} (retry back-off is inside `router`).",
            "Fix the failing upstream; bound retries (retry_on, num_retries, per_try_timeout) so they do not "
            "multiply load.",
        ))
    if failed.height:
        share = failed.height / max(r.height, 1)
        statuses: dict[int, int] = dict(failed.group_by("status").len().sort("status").iter_rows())
        out.append(Finding(
            "server-errors", "critical" if share >= SERVER_ERRORS_CRITICAL_SHARE else "warning",
            f"{failed.height} request(s) ended with a 5xx ({share:.0%})",
            f"{failed.height} of {r.height} client requests; statuses: {statuses}", ""))
    return out


#: Causes of a failed upstream connect, tested in order on ``failure_reason`` and the connection's error line:
#: (id, pattern, cause, fix).
CONNECT_CAUSES: tuple[tuple[str, str, str, str], ...] = (
    ("upstream-tls-verify", r"(?i)CERTIFICATE_VERIFY_FAILED|\bSAN\b|verify|TLS_error|TLS error|handshake|SSL",
     "the upstream's certificate failed verification (TLS; a SAN matcher or an untrusted CA)",
     "Make the certificate and the cluster's validation agree: its subject alt names must match the cluster's "
     "match_subject_alt_names / match_typed_subject_alt_names and its CA must be in trusted_ca (Istio: the "
     "destination's service account, a DestinationRule tls mode of ISTIO_MUTUAL vs SIMPLE, the mesh's root CA)."),
    ("upstream-connect-refused", r"(?im)refused|^111$",  # (errno 111 is ECONNREFUSED: Envoy <= 1.19 logs the number)
     "the upstream refused the connection (nothing listens on that address and port)",
     "Check the endpoint's port (Service targetPort, the cluster's endpoints) and that the upstream listens "
     "and is ready."),
    ("upstream-connect-timeout", r"(?i)timeout|timed out",
     "the connect timed out (the upstream is unreachable or does not accept in time)",
     "Check the path to the upstream (NetworkPolicy, firewall, security groups, the pod's readiness) and the "
     "cluster's connect_timeout."),
    ("no-healthy-upstream", r"^UH\b|no_healthy_upstream",
     "no healthy upstream host (every endpoint absent, unhealthy or ejected)",
     "Check the cluster's endpoints (kubectl get endpoints), active health checks and outlier-detection "
     "ejections."),
    ("upstream-connect-failed", r"^UF\b|^[A-Z,]*\bUF\b",
     "the upstream connection failed before the request was sent",
     "Look at the failed connection's lines (its id is in failed_upstream_conn_id) and at the upstream's logs."),
)


def failed_connects(requests: pl.DataFrame) -> list[Finding]:
    """Requests whose upstream connect failed, grouped by cause (the first of ``CONNECT_CAUSES`` that matches
    their ``failure_reason`` or the failed connection's own error line), each with its fix."""
    failed = requests.filter(~pl.col("internal") & pl.col("failure_reason").is_not_null()
                             & (pl.col("failed_upstream_conn_id").is_not_null()
                                | pl.col("failure_reason").str.contains(r"^[A-Z,]*\b(UF|UH)\b")))
    said = pl.concat_str("failure_reason", pl.col("failed_upstream_error").fill_null(""), separator="\n")
    out = []
    for cause_id, pattern, cause, fix in CONNECT_CAUSES:
        if failed.height == 0:
            break
        hit = said.str.contains(pattern)
        mine = failed.filter(hit)
        failed = failed.filter(~hit)
        if mine.height == 0:
            continue
        conns = mine.sort("first_line_no")["failed_upstream_conn_id"].drop_nulls()
        shown = ", ".join(f"C{c}" for c in conns.head(5).to_list())
        connect = median(mine["upstream_connect_us"].drop_nulls())
        handshake = median(mine["tls_handshake_us"].drop_nulls())
        evidence = (f"{mine.height} request(s): {cause}. "
                    + (f"Connections that failed: {shown}{' …' if conns.len() > 5 else ''}; " if shown else "")
                    + (f"median connect {format_us(connect)}" if connect is not None else "")
                    + (f", TLS handshake until the failure {format_us(handshake)}" if handshake is not None else "")
                    # (spaces around Envoy's `|` separators let the report wrap the details there)
                    + f". Envoy's reason: {mine.sort('first_line_no')['failure_reason'][0].replace('|', ' | ')}")
        out.append(Finding(cause_id, "critical", f"{mine.height} request(s) failed to connect upstream: "
                           + cause.split(" (")[0], evidence, fix))
    return out


def slow_side(requests: pl.DataFrame) -> list[Finding]:
    r = counted(requests, ("upstream_conn_id", "total_us", "upstream_wait_us", "loop_queue_us")).filter(
        pl.col("upstream_conn_id").is_not_null())
    if r.height == 0:
        return []
    total = median(r["total_us"]) or 0.0
    wait = median(r["upstream_wait_us"]) or 0.0
    measured_queue = median(r["loop_queue_us"])  # None: not measured (no socket lines), not 0
    queue = measured_queue or 0.0
    proxy = total - wait
    if total > 0 and wait / total >= SLOW_UPSTREAM_SHARE and queue < wait / 2:
        return [Finding(
            "slow-upstream", "info", "The upstream is slow, not the proxy",
            f"median upstream_wait {format_us(wait)} of median total {format_us(total)} ({wait / total:.0%}); "
            f"the rest of the median request takes {format_us(proxy)}.",
            "Look at the upstream service (its latency, CPU, dependencies); the sidecar is not the bottleneck.",
        )]
    return [Finding(
        "proxy-time", "info", "Most of the time is spent in the proxy",
        f"median total {format_us(total)}: upstream_wait {format_us(wait)}, the rest "
        f"{format_us(proxy)}, "
        + (f"of which event-loop queueing {format_us(queue)}" if measured_queue is not None
           else "event-loop queueing not measured (no socket lines)") + " (medians of each column).",
        "See the phase percentiles and the event-loop view.",
    )]


def record_gaps(events: pl.DataFrame) -> pl.Series:
    """Gaps between a ``socket event`` and the ``write ready``/``read ready`` its worker logs next, with the idle
    class before the ``socket event`` (``gap_counts.back_to_back``)."""
    lines = events.filter(pl.col("thread").is_not_null()).sort("origin", "thread", "ts_us", "line_no")
    return back_to_back(lines.select_seq("origin", "thread", "ts_us", "kind"), over=["origin", "thread"])


def observer_cost_of(gaps: GapCounts, requests: pl.DataFrame) -> list[Finding]:
    """Trace logging's own cost, from the gaps ``record_gaps`` measures (or gathered worker by worker when
    streaming): ``socket event`` is followed by ``write ready``/``read ready`` with almost no work between, so that
    gap is about the cost of formatting and writing one record; the record that wakes an idle worker costs more
    (``stages.cost.record_costs_from_gaps``, the cost's own per-record figures: one definition)."""
    r = counted(requests, ("log_lines",))
    costs = record_costs_from_gaps(gaps)
    if costs is None or r.height == 0:
        return []
    warm, cold = costs.warm + costs.unseen, costs.cold + costs.unseen
    woken = COLD in costs.measured  # (a worker that never idled shows no record waking it)
    lines = median(r["log_lines"])
    cost = ((warm + costs.write_out) * lines + (costs.cold - costs.warm if woken else 0.0)
            if lines is not None else None)
    return [Finding(
        "observer-effect", "info",
        f"Trace logging itself costs about {warm:.1f} µs per log record"
        + (f", {cold:.1f} µs for one that wakes an idle worker" if woken else ""),
        f"mean back-to-back record gap of at most {BACK_TO_BACK_US} µs ({COLD_BACK_TO_BACK_US} after > 1 ms idle) by "
        f"the worker's idle before it ({gaps.len()} samples), plus {costs.unseen:.1f} µs a record no gap shows "
        f"and {costs.write_out:.2f} µs Envoy's log flush thread spends writing it out (docs/cost.md); "
        + (f"a request here logs a median {lines:.0f} records, so ≈{format_us(cost)} of its time is the observer"
           + (" (one wake-up)." if woken else ".") if cost is not None else ""),
        "Phases with many log lines (header parsing, filters) are inflated by this much; turn trace logging "
        "off outside captures.",
    )]


def worker_stalls(gaps: GapCounts, requests: pl.DataFrame) -> list[Finding]:
    """Workers descheduled mid-work, from the same gaps as ``observer_cost_of``: Envoy logs ``socket event`` and
    ``read ready``/``write ready`` from adjacent statements, so a long gap between them is time the worker did
    not run. The rate per record pair, times the records a request logs, is how often a request's phases carry
    such a stall; the log cannot say which phase of which request (docs/phases.md, "What the log cannot show")."""
    r = counted(requests, ("log_lines", "total_us"))
    if gaps.len() < STALL_MIN_PAIRS or r.height == 0:
        return []
    stalls = gaps.at_least(STALL_US)
    if stalls.len() == 0:
        return []
    longest, typical = stalls.max() or 0, stalls.median() or 0.0
    title = f"Worker stalls mid-work: {stalls.len()} of {gaps.len()} back-to-back record pairs ≥ {STALL_US} µs apart"
    seen = f"up to {format_us(longest)} (median {format_us(typical)}) between two adjacent statements of Envoy"
    fix = ("The worker was off the CPU or blocked writing its log: check the sidecar's CPU limit and throttling "
           "(container_cpu_cfs_throttled_periods_total), the node's CPU pressure and the log's destination. A "
           "single request's phases can carry such a stall; percentiles over many requests are less affected.")
    if stalls.len() < STALL_MIN_FOR_RATE:  # too few to give a rate
        return [Finding("worker-stalls", "info", title, seen + ".", fix)]
    rate = stalls.len() / gaps.len()
    lines = median(r["log_lines"]) or 0.0
    per_request = rate * lines * float(stalls.sum()) / stalls.len()
    total = median(r["total_us"])
    severity: Severity = "warning" if total and per_request >= STALL_WARNING_SHARE * total else "info"
    return [Finding(
        "worker-stalls", severity, title,
        f"{seen}; a request here logs a median {lines:.0f} records, so it meets ≈{rate * lines:.2f} such stalls, "
        f"≈{format_us(per_request)} of its time" + (f" (median request {format_us(total)})." if total else "."),
        fix,
    )]


def slow_filters(requests: pl.DataFrame, phases: pl.DataFrame, threshold_us: int = SLOW_FILTER_US) -> list[Finding]:
    """Filters whose own span is large (decode or encode); a warning when it is a tenth of the median request."""
    r = counted(requests, ("request_uid", "total_us"))
    # (one lazy pass over the phase rows, a morsel at a time: filtered and joined eagerly, the millions of rows of a
    # big capture were copied three times, +280 MiB at the 5 GB corpus' report; the text tests run on the filter
    # rows only: a filter evaluates every condition on every row it is given)
    spans = (phases.lazy().select_seq("request_uid", "phase", "detail", "dur_us", "part_of_total")
             .filter(~pl.col("part_of_total") & pl.col("phase").is_in([Phase.FILTER_CHAIN, Phase.ENCODE]))
             .filter(~pl.col("detail").str.contains("route lookup") & ~is_work_row())
             .join(r.lazy().select_seq("request_uid"), on="request_uid", how="semi")
             .group_by("phase", "detail").agg(p50=percentile_expr("dur_us", 0.5), p99=percentile_expr("dur_us", 0.99),
                                              n=pl.len())
             .sort("phase", "detail").collect(engine="streaming"))
    if spans.height == 0:
        return []
    total = median(r["total_us"]) or 0.0
    out = []
    for phase, detail, p50_found, p99, n in spans.iter_rows():
        p50 = p50_found or 0.0
        if p50 < threshold_us:
            continue
        severity: Severity = "warning" if total and p50 >= SLOW_FILTER_SHARE * total else "info"
        if str(detail).endswith(" (paused)"):  # the filter stopped iteration and waited (timer, external call)
            name = str(detail).removesuffix(" (paused)")
            out.append((p50, Finding(
                f"paused-filter-{name}", severity, f"Filter {name} holds requests a median {format_us(p50)} ({phase})",
                f"{name} stopped the filter chain and resumed it later: p50 {format_us(p50)}, p99 {format_us(p99)} "
                f"over {n} requests (median total {format_us(total)}). The worker was free meanwhile (a timer or "
                "an external call, not CPU).",
                _paused_fix(name),
            )))
            continue
        out.append((p50, Finding(
            f"slow-filter-{detail}", severity, f"Filter {detail} takes a median {format_us(p50)} per request ({phase})",
            f"{detail}: p50 {format_us(p50)}, p99 {format_us(p99)} over {n} requests in {phase} (median total "
            f"{format_us(total)}).",
            "Profile or simplify this filter (Lua/Wasm script cost, external calls); it runs on the worker thread "
            "and delays every other connection on it.",
        )))
    return [f for _, f in sorted(out, key=lambda pf: -pf[0])]


def _paused_fix(filter_name: str) -> str:
    """The fix for a filter that holds requests: the service it calls (ext_authz, rate limit), else generic."""
    if re.search(AUTHZ, filter_name):
        return INTERNAL_WORK_FINDINGS[WorkKind.EXT_AUTHZ.value][1]
    if re.search(RATE_LIMIT, filter_name):
        return INTERNAL_WORK_FINDINGS[WorkKind.RATE_LIMIT.value][1]
    return ("Check this filter's configuration (fault injection delay, ext_authz / rate-limit service latency, "
            "Lua httpCall target).")


def tracing_flushes(requests: pl.DataFrame, phases: pl.DataFrame) -> list[Finding]:
    """The tracer's span flushes: how many, their own worker time, how many client requests they delayed."""
    flushes = requests.filter(pl.col("flush_work_us").is_not_null())
    if flushes.height == 0:
        return []
    delayed = phases.filter(pl.col("detail").str.starts_with("tracing flush "))
    clients = counted(requests, ("request_uid",))
    work = flushes["flush_work_us"]
    per_client = float(work.sum() or 0) / max(clients.height, 1)
    cluster = flushes["cluster"].drop_nulls().mode().to_list()
    return [Finding(
        "tracing-flush", "info",
        f"The tracer flushed spans {flushes.height} times, {format_us(median(work))} of worker time each",
        f"{flushes.height} internal requests to the collector{f' (cluster {cluster[0]})' if cluster else ''} took "
        f"{format_us(float(work.sum()))} of worker time in all (median {format_us(median(work))}, max "
        f"{format_us(percentile(work, 1.0))} per flush; ≈ {format_us(per_client)} per client request); they "
        f"delayed {delayed['request_uid'].n_unique()} client requests in flight on the same worker by "
        f"{format_us(float(delayed['dur_us'].sum()))} in all (tracing_us).",
        "Lower the sampling rate (Istio: meshConfig.defaultConfig.tracing.sampling / Telemetry API "
        "randomSamplingPercentage), send larger batches less often (Envoy runtime tracing.zipkin.min_flush_spans, "
        "tracing.zipkin.flush_interval_ms), or disable tracing where it is not used.")]


#: Per kind of internal work (besides tracing flushes, which have `tracing-flush`): finding id and the fix.
INTERNAL_WORK_FINDINGS: dict[str, tuple[str, str]] = {
    WorkKind.HEALTH_CHECK.value: (
        "health-checks",
        "Check less often: a longer health_checks interval (and no_traffic_interval, with interval_jitter), fewer "
        "checked hosts or clusters; Istio: rely on outlier detection instead of active checks where it suffices."),
    WorkKind.EXT_AUTHZ.value: (
        "ext-authz-calls",
        "Make the check cheaper or rarer: cache decisions in the authorization service, disable ext_authz on routes "
        "that need no check (per-route ExtAuthzPerRoute disabled), keep the service close with a tight "
        "http_service/grpc_service timeout (failure_mode_allow only if acceptable)."),
    WorkKind.RATE_LIMIT.value: (
        "rate-limit-calls",
        "Use local rate limiting where a global limit is not needed, or make the rate-limit service faster; "
        "bound its timeout."),
    WorkKind.FILTER_CALL.value: (
        "filter-calls",
        "Look at the filter that makes the call (Lua httpCall, a custom filter): cache its answers or call "
        "asynchronously where the request need not wait."),
    WorkKind.INTERNAL_REQUEST.value: (
        "internal-requests",
        "Find what Envoy calls (the internal requests' clusters) and make those calls rarer or cheaper."),
}


def internal_work(requests: pl.DataFrame, phases: pl.DataFrame, bursts: pl.DataFrame,
                  checks: int) -> list[Finding]:
    """Envoy's own work besides tracing flushes (health checks, ext_authz and other filter calls): how much
    thread time it took, and how much it cost client requests. A warning when it delayed client requests that
    did not ask for it by ≥ 10 % of their summed time; else info (own filter calls are `paused-filter-*`).
    ``checks``: the health-check result lines (``CaptureFacts.health_checks``)."""
    clients = counted(requests, ("request_uid", "total_us", "origin", "thread"))
    total = float(clients["total_us"].sum() or 0) if clients.height else 0.0
    uids = clients.select_seq("request_uid")
    out = []
    for kind, (fid, fix) in INTERNAL_WORK_FINDINGS.items():
        mine = bursts.filter(pl.col("kind") == kind)
        if mine.height == 0:
            continue
        units = mine["work_uid"].n_unique() if kind != WorkKind.HEALTH_CHECK.value else checks
        work = (mine["end_us"] - mine["start_us"])
        rows = phases.filter(pl.col("detail").str.starts_with(kind + " ")).join(uids, on="request_uid", how="semi")
        # A filter's call is its owner's own wait (`paused-filter-*` judges it); the rows of other requests, and of
        # work nobody asked for (health checks), are delays.
        other = pl.col("detail").str.ends_with("(another request's)")
        owned = bool(mine["owner_uid"].is_not_null().any())
        own = rows.filter(~other) if owned else rows.head(0)
        delayed = rows.filter(other) if owned else rows
        delay = float(delayed["dur_us"].sum() or 0)
        share = delay / total if total else 0.0
        client_threads = clients.select_seq("origin", "thread").unique()
        on_workers = mine.join(client_threads, on=["origin", "thread"], how="semi").height
        main = (" (Envoy runs active health checks on its main thread: they compete with the workers for CPU but "
                "hold no worker's event loop)" if kind == WorkKind.HEALTH_CHECK.value else "")
        where = ("on the workers that serve client requests" if on_workers == mine.height else
                 f"on threads that serve no client request{main}"
                 if on_workers == 0 else f"({on_workers} of {mine.height} bursts on client requests' workers)")
        what = f"{units} {kind}{'' if units == 1 else 's'}"
        evidence = (f"{what} took {format_us(float(work.sum()))} of thread time in {mine.height} bursts "
                    f"{where} (median burst {format_us(median(work))}); they delayed "
                    f"{delayed['request_uid'].n_unique()} client requests in flight on the same thread by "
                    f"{format_us(delay)} in all ({share:.1%} of the client requests' time; internal_us).")
        if own.height:
            evidence += (f" Each of {own['request_uid'].n_unique()} client requests waited for its own call: median "
                         f"{format_us(median(own['dur_us']))}, p99 {format_us(percentile(own['dur_us'], 0.99))} "
                         f"(median total {format_us(median(clients['total_us']))}).")
        severity: Severity = "warning" if share >= SHARE_WARNING else "info"
        out.append(Finding(fid, severity, f"{what} took {format_us(float(work.sum()))} of Envoy's thread time",
                           evidence, fix))
    return out


def format_notes(notes: list[str]) -> list[Finding]:
    return [Finding(f"note-{i}", "info", "Capture caveat", note) for i, note in enumerate(notes, 1)]


def health_checks(events: pl.DataFrame) -> int:
    """Health-check result lines in ``events`` (the engine sums them window by window into ``CaptureFacts``)."""
    return int(events.select_seq(pl.col("kind").is_in(HEALTH_CHECK_RESULT_KINDS).sum()).item())


def all_findings(requests: pl.DataFrame, workers: pl.DataFrame, phases: pl.DataFrame, notes: list[str],
                 internal: pl.DataFrame, gaps: GapCounts, checks: int,
                 on_cpu: dict[tuple[str, int], float] | None = None) -> list[Finding]:
    """Every rule's findings, most severe first. ``internal``: the capture's internal work bursts
    (``Capture.internal_work()``); ``gaps`` and ``checks``: the record gaps and health-check lines the engine
    gathered (``Capture.facts``); ``on_cpu``: each worker's share of the window on the CPU (``Cost.on_cpu``)."""
    found = (saturated_workers(workers, requests, on_cpu) + imbalance(workers) + shares(requests)
             + slow_filters(requests, phases) + churn(requests)
             + retries(requests) + failed_connects(requests) + slow_side(requests) + observer_cost_of(gaps, requests)
             + worker_stalls(gaps, requests)
             + tracing_flushes(requests, phases) + internal_work(requests, phases, internal, checks)
             + format_notes(notes))
    return sorted(found, key=lambda f: f.rank)
