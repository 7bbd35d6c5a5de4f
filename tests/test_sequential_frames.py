"""The parser and the analysis evaluate a frame's expressions on the calling thread (``select_seq``,
``with_columns_seq``), never through polars' ``select`` / ``with_columns``.

Those two hand each evaluation to polars' thread pool and wait for it: on a frame of a few thousand rows the
hand-off is most of the call (61 µs against 12 for the same ``select`` on the calling thread, on the 2-core
machine of bench/README.md), and the parser's workers and the analysis' window steps already keep the cores busy.
docs/scale.md gives the numbers. The results are the same; only where the work runs differs.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("parser", "analysis")
POOLED = {"select", "with_columns"}
#: receivers whose ``select`` is something else: polars' top-level function (a frame of literals, no input)
#: and the standard library's ``select.select``
OTHER_SELECTS = {"pl", "select"}


def pooled_calls(source: str) -> list[tuple[int, str]]:
    """(line, method) of each ``x.select(...)`` / ``x.with_columns(...)`` call on a frame."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in POOLED:
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and receiver.id in OTHER_SELECTS:
                continue
            found.append((node.lineno, node.func.attr))
    return found


def test_the_scan_sees_a_pooled_call() -> None:
    assert pooled_calls("out = frame.filter(x).select('a')\n") == [(1, "select")]
    assert pooled_calls("out = frame.with_columns(b=1)\n") == [(1, "with_columns")]
    assert pooled_calls("out = frame.select_seq('a').with_columns_seq(b=1)\n") == []
    assert pooled_calls("out = pl.select(pl.repeat(0, 3))\nready = select.select([fd], [], [], 0)\n") == []


def test_no_frame_of_the_parser_or_the_analysis_goes_through_the_pool() -> None:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "generated" in path.parts:
                continue
            if hits := pooled_calls(path.read_text(encoding="utf-8")):
                found[str(path.relative_to(REPO))] = hits
    assert found == {}, "use select_seq / with_columns_seq (see this module's docstring)"
