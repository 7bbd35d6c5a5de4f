"""The one way µs are written for people: the report, findings, the dashboard and notebooks all use it."""
from __future__ import annotations

from collections.abc import Iterable

MS_FROM_US = 10_000  # values from 10 ms up are written in ms


def format_us(value: float | int | None, tick_us: int = 1) -> str:
    """A duration with its unit: ``"950 µs"``, ``"1,414 µs"``, ``"12.35 ms"``; ``"–"`` when unknown.

    ``tick_us`` is the capture's timestamp tick: a capture that ticks in whole ms gets whole ms.

    >>> format_us(1414), format_us(12345), format_us(None), format_us(3000, tick_us=1000)
    ('1,414 µs', '12.35 ms', '–', '3 ms')
    """
    if value is None:
        return "–"
    if tick_us >= 1000:
        return f"{value / 1000:,.0f} ms"
    if abs(value) >= MS_FROM_US:
        return f"{value / 1000:,.2f} ms"
    return f"{round(value):,} µs"


#: A table stays in µs (whole numbers, up to ``99,999``) while its largest value is below this.
TABLE_MS_FROM_US = 100_000


def table_unit(values: Iterable[float | int | None], tick_us: int = 1) -> tuple[str, int]:
    """One unit for a whole table, chosen by the magnitude of its largest value, and the decimals of ms cells:
    µs below 100 ms (every cell an integer), else ms with 1 decimal; whole ms for a capture whose timestamps
    tick in ms (every figure is ±1 ms: no false precision).

    >>> table_unit([14, 950, 18_530]), table_unit([14, 250_000]), table_unit([14, 950], tick_us=1000)
    (('µs', 0), ('ms', 1), ('ms', 0))
    """
    if tick_us >= 1000:
        return "ms", 0
    top = max((abs(v) for v in values if v is not None), default=0)
    return ("ms", 1) if top >= TABLE_MS_FROM_US else ("µs", 0)


def in_unit(value: float | int | None, unit: str, decimals: int = 2) -> str:
    """A number for a column whose header carries ``unit`` (``"µs"``: integer; ``"ms"``: ``decimals`` decimals,
    0 for captures whose timestamps tick in whole ms).

    >>> in_unit(1414, "µs"), in_unit(1414, "ms"), in_unit(-3, "ms"), in_unit(None, "ms")
    ('1,414', '1.41', '0.00', '–')
    """
    if value is None:
        return "–"
    text = f"{round(value):,}" if unit == "µs" else f"{value / 1000:,.{decimals}f}"
    return text.removeprefix("-") if text.strip("-0.,") == "" else text  # no "-0.00"
