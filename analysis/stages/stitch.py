"""One request across two proxies: join requests that share an ``x-request-id`` across origins.

In a mesh a call crosses the client sidecar (outbound) and the server sidecar (inbound); each logs the same
``x-request-id``. Given captures of both (several files, or pods from ``fetch``), the outbound request A and
the inbound request B of one call are stitched:

* **Which is outside.** Durations need no common clock: per pair of origins, the side whose Envoy duration
  (``ds_tx_end − ds_rx_beg``) is the longer in most shared requests is the outbound (client) side.
* **Clock offset** (how far B's clock runs ahead of A's, θ). Causality bounds it for every pair, NTP-style:
  B cannot receive before A sends, ``θ ≤ u = B.ds_rx_beg − A.us_tx_beg``, and A cannot receive the
  response before B sends it, ``θ ≥ l = B.ds_tx_end − A.us_rx_beg``. Over many requests
  θ ∈ [max l, min u]; the estimate is the middle of that interval and the uncertainty its half-width. When
  log timestamps make the bounds cross (max l > min u), the 1st/99th percentiles replace min/max and the
  uncertainty is at least half the overlap.
* **Network times** on the outbound request, corrected for θ: ``network_out_us = u − θ``,
  ``network_back_us = θ − l``. Negative values (a bound violated by more than the uncertainty) are kept
  as measured and counted in the summary, never clipped silently.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from envoy_dissector.analysis.schema import PEER_SCHEMA
from envoy_dissector.analysis.stats import percentile
from envoy_dissector.analysis.units import format_us

_NEEDED = ("request_uid", "origin", "x_request_id", "ds_rx_beg_us", "ds_tx_end_us", "us_tx_beg_us",
           "us_rx_beg_us", "complete", "internal")


@dataclass(frozen=True)
class ClockOffset:
    """How far ``to``'s clock runs ahead of ``from_``'s, estimated from stitched pairs."""

    from_: str
    to: str
    offset_us: int
    uncertainty_us: int
    pairs: int
    negative_network: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"from": self.from_, "to": self.to, "offset_us": self.offset_us,
                "uncertainty_us": self.uncertainty_us, "pairs": self.pairs,
                "negative_network_times": self.negative_network}


@dataclass(frozen=True)
class Stitching:
    """What stitching found: pairs, unmatched requests per origin, clock offsets."""

    pairs: int = 0
    unmatched: dict[str, int] = field(default_factory=dict)
    clock_offsets: tuple[ClockOffset, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {"pairs": self.pairs, "unmatched": self.unmatched,
                "clock_offsets": [c.as_dict() for c in self.clock_offsets]}


def _bounds(u: pl.Series, lower: pl.Series) -> tuple[float, float]:
    """(θ, uncertainty) from upper bounds ``u`` and lower bounds ``lower``."""
    hi, lo = float(u.min()), float(lower.max())  # type: ignore[arg-type]
    if lo > hi and u.len() >= 20:
        hi, lo = float(u.quantile(0.01, interpolation="nearest")), float(lower.quantile(0.99, interpolation="nearest"))  # type: ignore[arg-type]
    return (hi + lo) / 2, abs(hi - lo) / 2


def stitch(requests: pl.DataFrame) -> tuple[pl.DataFrame, Stitching]:
    """The stitching stage: requests (at least the contract's ``_NEEDED`` columns) with ``PEER_SCHEMA``'s
    columns appended, and the summary."""
    out = requests
    empty = out.with_columns_seq(*(pl.lit(None, dtype=t).alias(c) for c, t in PEER_SCHEMA.items()))
    # (`select`, not `requests["origin"]`: indexing a constant column — the one origin — makes the frame keep a
    # full copy of it, 16 bytes a request to the end)
    if requests.select_seq(pl.col("origin").n_unique()).item() < 2:
        return empty, Stitching()
    r = requests.select_seq(_NEEDED).filter(
        pl.col("complete") & ~pl.col("internal") & pl.col("x_request_id").is_not_null())
    # Requests whose id appears in exactly one request per origin, in exactly two origins.
    single = r.filter(pl.len().over("origin", "x_request_id") == 1)
    shared = single.filter(pl.col("origin").n_unique().over("x_request_id") == 2)
    if shared.height == 0:
        return empty, Stitching(unmatched=_unmatched(r, shared))
    left = shared.sort("origin").group_by("x_request_id", maintain_order=True).agg(
        o1=pl.col("origin").first(), o2=pl.col("origin").last(),
        u1=pl.col("request_uid").first(), u2=pl.col("request_uid").last(),
        d1=(pl.col("ds_tx_end_us") - pl.col("ds_rx_beg_us")).first(),
        d2=(pl.col("ds_tx_end_us") - pl.col("ds_rx_beg_us")).last())
    # Per origin pair, the outbound side is the one whose requests last longer in most pairs.
    votes = left.group_by("o1", "o2").agg(first_outside=(pl.col("d1") >= pl.col("d2")).mean())
    left = left.join(votes, on=["o1", "o2"])
    outside = pl.col("first_outside") >= 0.5
    pairs = left.select_seq(
        "x_request_id",
        a_origin=pl.when(outside).then("o1").otherwise("o2"), b_origin=pl.when(outside).then("o2").otherwise("o1"),
        a_uid=pl.when(outside).then("u1").otherwise("u2"), b_uid=pl.when(outside).then("u2").otherwise("u1"))
    a_cols = r.select_seq(a_uid="request_uid", a_tx="us_tx_beg_us", a_rx="us_rx_beg_us")
    b_cols = r.select_seq(b_uid="request_uid", b_rx_beg="ds_rx_beg_us", b_tx_end="ds_tx_end_us")
    pairs = pairs.join(a_cols, on="a_uid").join(b_cols, on="b_uid").with_columns_seq(
        u=pl.col("b_rx_beg") - pl.col("a_tx"), lower=pl.col("b_tx_end") - pl.col("a_rx"))
    offsets: list[ClockOffset] = []
    corrected = []
    for (a_origin, b_origin), group in pairs.group_by("a_origin", "b_origin", maintain_order=True):
        usable = group.filter(pl.col("u").is_not_null() & pl.col("lower").is_not_null())
        theta, spread = _bounds(usable["u"], usable["lower"]) if usable.height else (0.0, 0.0)
        g = group.with_columns_seq(network_out_us=(pl.col("u") - theta).round().cast(pl.Int64),
                                   network_back_us=(theta - pl.col("lower")).round().cast(pl.Int64))
        negative = g.filter((pl.col("network_out_us") < -spread) | (pl.col("network_back_us") < -spread)).height
        offsets.append(ClockOffset(str(a_origin), str(b_origin), round(theta), round(spread), group.height, negative))
        corrected.append(g)
    linked = pl.concat(corrected)
    a_side = linked.select_seq(request_uid="a_uid", peer_origin="b_origin", peer_request_uid="b_uid",
                               network_out_us="network_out_us", network_back_us="network_back_us")
    b_side = linked.select_seq(request_uid="b_uid", peer_origin="a_origin", peer_request_uid="a_uid",
                               network_out_us=pl.lit(None, dtype=pl.Int64),
                               network_back_us=pl.lit(None, dtype=pl.Int64))
    peers = pl.concat([a_side, b_side]).cast({"request_uid": pl.String(), **PEER_SCHEMA})  # type: ignore[arg-type,dict-item]
    out = out.join(peers, on="request_uid", how="left")
    return out, Stitching(pairs=linked.height, unmatched=_unmatched(r, shared), clock_offsets=tuple(offsets))


def _unmatched(counted: pl.DataFrame, shared: pl.DataFrame) -> dict[str, int]:
    lonely = counted.join(shared.select_seq("request_uid"), on="request_uid", how="anti")
    return {str(o): int(n) for o, n in lonely.group_by("origin").len().sort("origin").iter_rows()}


def render_stitching(stitching: Stitching, requests: pl.DataFrame) -> list[str]:
    """Report lines: pairs, clock offsets and network percentiles (nothing when there is no pair)."""
    if stitching.pairs == 0:
        return []
    lines = [f"stitched across proxies: {stitching.pairs} request pairs by x-request-id"]
    for c in stitching.clock_offsets:
        lines.append(f"  {c.from_} → {c.to}: {c.pairs} pairs, clock offset "
                     f"{'+' if c.offset_us > 0 else ''}{format_us(c.offset_us)} ± {format_us(c.uncertainty_us)}")
    net = requests.select_seq("network_out_us", "network_back_us").drop_nulls()
    for column in ("network_out_us", "network_back_us"):
        s = net[column]
        lines.append(f"  {column.removesuffix('_us'):<13} p50 {format_us(percentile(s, 0.5))}"
                     f" · p90 {format_us(percentile(s, 0.9))} · max {format_us(s.max())}")  # type: ignore[arg-type]
    if stitching.unmatched:
        lines.append("  unmatched: " + ", ".join(f"{o}: {n}" for o, n in stitching.unmatched.items()))
    return lines
