"""Compare two captures phase by phase: the same load with and without tracing, Wasm, a filter, a CPU limit…

What seed 000 did by hand (QPS with tracing on and off): here per phase, from each capture's counted
requests (complete client requests), with the percentiles every other output uses.
"""
from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

import polars as pl

from envoy_dissector.analysis.stats import QUANTILES, SUMMARY_COLUMNS, counted, percentiles
from envoy_dissector.analysis.units import in_unit, table_unit

if TYPE_CHECKING:
    from envoy_dissector.analysis.capture import Capture

STATS = (*QUANTILES, "max")


def compare(a: Capture, b: Capture) -> pl.DataFrame:
    """One row per phase: ``phase``, then for each statistic ``a_<s>``, ``b_<s>``, ``delta_<s>`` (µs, b − a).

    Also ``a_requests``/``b_requests`` (counted requests) as columns repeated on every row.
    """
    pa, pb = percentiles(a.requests), percentiles(b.requests)
    rows = []
    for column in SUMMARY_COLUMNS:
        phase = column.removesuffix("_us")
        row: dict[str, object] = {"phase": phase}
        for stat in STATS:
            va, vb = pa.get(phase, {}).get(stat), pb.get(phase, {}).get(stat)
            row[f"a_{stat}"], row[f"b_{stat}"] = va, vb
            row[f"delta_{stat}"] = vb - va if va is not None and vb is not None else None
        rows.append(row)
    rows += _cost_rows(a, b)
    schema = {"phase": pl.String(), **{f"{side}_{s}": pl.Int64() for s in STATS for side in ("a", "b", "delta")}}
    out = pl.DataFrame(rows, schema=schema)
    return out.with_columns_seq(a_requests=pl.lit(counted(a.requests).height),
                                b_requests=pl.lit(counted(b.requests).height),
                                a_ceiling_rps=pl.lit(_ceiling(a), dtype=pl.Float64),
                                b_ceiling_rps=pl.lit(_ceiling(b), dtype=pl.Float64))


#: What the sidecar costs (docs/cost.md) as rows of the comparison: ``Cost`` attribute per row name.
COST_ROWS = (("sidecar_added", "sidecar_added_us"),
             ("  w/o observer", "sidecar_added_without_observer_us"),
             ("cpu_per_request", "cpu_us_per_request"))


def _single_cost(capture: Capture) -> Any:
    """The capture's one ``Cost`` (None with several origins or none: compare one proxy with one proxy)."""
    costs = capture.cost()
    return costs[0] if len(costs) == 1 else None


def _cost_rows(a: Capture, b: Capture) -> list[dict[str, object]]:
    ca, cb = _single_cost(a), _single_cost(b)
    rows: list[dict[str, object]] = []
    for name, attr in COST_ROWS:
        row: dict[str, object] = {"phase": name}
        for stat in STATS:
            va = getattr(ca, attr).get(stat) if ca is not None else None
            vb = getattr(cb, attr).get(stat) if cb is not None else None
            row[f"a_{stat}"], row[f"b_{stat}"] = va, vb
            row[f"delta_{stat}"] = vb - va if va is not None and vb is not None else None
        rows.append(row)
    return rows


def _ceiling(capture: Capture) -> float | None:
    cost = _single_cost(capture)
    return None if cost is None or cost.ceiling is None else float(cost.ceiling.pod)


def _cell(v: object, unit: str, decimals: int = 2, signed: bool = False) -> str:
    """A number of a column whose unit is in the header (the project's one formatter, ``units.in_unit``)."""
    if v is None:
        return "–"
    text = in_unit(v, unit, decimals)  # type: ignore[arg-type]
    return ("+" + text) if signed and float(v) > 0 and text.strip("0.,") else text  # type: ignore[arg-type]


def render_comparison(table: pl.DataFrame, a_name: str, b_name: str, width: int = 100, tick_us: int = 1) -> str:
    """The comparison as text (at most ``width`` columns, 80 reads well): per phase, p50/p90/p99 of A and B and
    B − A, in one unit for the whole table chosen by its largest value.

    Phases that are zero in both captures are left out, with a note.
    """
    n_a = table["a_requests"][0] if table.height else 0
    n_b = table["b_requests"][0] if table.height else 0
    shown = [row for row in table.iter_rows(named=True)
             if not all(row[f"{side}_{s}"] in (None, 0) for side in ("a", "b") for s in STATS)]
    hidden = [row["phase"] for row in table.iter_rows(named=True) if row not in shown]
    values = [row[f"{side}_{q}"] for row in shown for side in ("a", "b", "delta") for q in QUANTILES]
    label_w, cell = 17, (9 if width >= 17 + 9 * 3 * len(QUANTILES) else 7)
    unit, decimals = table_unit(values, tick_us) if cell == 9 else _narrow_unit(values, tick_us)
    group = 3 * cell
    lines = [_fit(f"A: {a_name} ({n_a} requests)", width), _fit(f"B: {b_name} ({n_b} requests)", width), "",
             f"{'(' + unit + ')':<{label_w}}" + "".join(f"{q:^{group}}" for q in QUANTILES),
             f"{'phase':<{label_w}}" + "".join(f"{'A':>{cell}}{'B':>{cell}}{'B−A':>{cell}}" for _ in QUANTILES)]
    for row in shown:
        cells = "".join(f"{_cell(row[f'a_{q}'], unit, decimals):>{cell}}{_cell(row[f'b_{q}'], unit, decimals):>{cell}}"
                        f"{_cell(row[f'delta_{q}'], unit, decimals, True):>{cell}}" for q in QUANTILES)
        lines.append(f"{row['phase']:<{label_w}}{cells}")
    ceilings = [table[f"{side}_ceiling_rps"][0] if table.height and f"{side}_ceiling_rps" in table.columns else None
                for side in ("a", "b")]
    if any(c is not None for c in ceilings):
        ca, cb = (f"{c:,.0f}" if c is not None else "–" for c in ceilings)
        ratio = f" (B/A ×{ceilings[1] / ceilings[0]:.2f})" if None not in ceilings and ceilings[0] else ""
        lines.append(f"{'ceiling (req/s)':<{label_w}}A {ca} · B {cb}{ratio}")
    if hidden:
        lines += textwrap.wrap(f"(zero in both captures: {', '.join(hidden)})", width=width, subsequent_indent=" ",
                               break_long_words=False, break_on_hyphens=False)
    return "\n".join(line.rstrip() for line in lines)


def _narrow_unit(values: list[int | None], tick_us: int) -> tuple[str, int]:
    """The one unit of a table whose cells hold 6 characters (80 columns): µs below 10 ms, else ms with as many
    decimals as fit the largest value (``-10.62``, ``-123.4``)."""
    if tick_us >= 1000:
        return "ms", 0
    top = max((abs(v) for v in values if v is not None), default=0)
    if top < 10_000:
        return "µs", 0
    return "ms", 2 if top < 100_000 else 1 if top < 1_000_000 else 0


def _fit(line: str, width: int) -> str:
    """A capture's line: a long file name keeps its end (the file), its start elided."""
    if len(line) <= width:
        return line
    head, rest = line[:3], line[3:]
    return head + "…" + rest[len(rest) - (width - 4):]
