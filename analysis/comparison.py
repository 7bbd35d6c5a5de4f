"""Compare two captures phase by phase: the same load with and without tracing, Wasm, a filter, a CPU limit…

What seed 000 did by hand (QPS with tracing on and off): here per phase, from each capture's counted
requests (complete client requests), with the percentiles every other output uses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from envoy_dissector.analysis.stats import QUANTILES, SUMMARY_COLUMNS, counted, percentiles
from envoy_dissector.analysis.units import column_unit, in_unit

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
    schema = {"phase": pl.String(), **{f"{side}_{s}": pl.Int64() for s in STATS for side in ("a", "b", "delta")}}
    out = pl.DataFrame(rows, schema=schema)
    return out.with_columns(a_requests=pl.lit(counted(a.requests).height),
                            b_requests=pl.lit(counted(b.requests).height))


def _cell(v: object, unit: str, signed: bool = False) -> str:
    """A number of a column whose unit is in the header (the project's one formatter, ``units.in_unit``)."""
    if v is None:
        return "–"
    text = in_unit(v, unit)  # type: ignore[arg-type]
    return ("+" + text) if signed and float(v) > 0 else text  # type: ignore[arg-type]


def render_comparison(table: pl.DataFrame, a_name: str, b_name: str) -> str:
    """The comparison as text (≤ 100 columns): per phase, p50/p90/p99 of A and B and B − A.

    Phases that are zero in both captures are left out, with a note.
    """
    n_a = table["a_requests"][0] if table.height else 0
    n_b = table["b_requests"][0] if table.height else 0
    shown = [row for row in table.iter_rows(named=True)
             if not all(row[f"{side}_{s}"] in (None, 0) for side in ("a", "b") for s in STATS)]
    hidden = [row["phase"] for row in table.iter_rows(named=True) if row not in shown]
    # One unit per quantile's three columns: ms once any of them reaches 10 ms.
    units = {q: column_unit(row[f"{side}_{q}"] for row in shown for side in ("a", "b", "delta")) for q in QUANTILES}
    lines = [f"A: {a_name} ({n_a} requests)", f"B: {b_name} ({n_b} requests)", "",
             f"{'':<17}" + "".join(f"{q + ' (' + units[q] + ')':^27}" for q in QUANTILES),
             f"{'phase':<17}" + "".join(f"{'A':>9}{'B':>9}{'B−A':>9}" for _ in QUANTILES)]
    for row in shown:
        cells = "".join(f"{_cell(row[f'a_{q}'], units[q]):>9}{_cell(row[f'b_{q}'], units[q]):>9}"
                        f"{_cell(row[f'delta_{q}'], units[q], True):>9}" for q in QUANTILES)
        lines.append(f"{row['phase']:<17}{cells}")
    if hidden:
        lines.append(f"(zero in both captures: {', '.join(hidden)})")
    return "\n".join(lines)
