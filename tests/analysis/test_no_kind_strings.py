"""The analysis names kinds by ``EventKind`` member, never by string: a misspelt string compared with the
``kind`` column matches nothing, silently, where a misspelt member fails at once."""
from __future__ import annotations

import ast
from pathlib import Path

from envoy_dissector.parser.kinds import EventKind

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
#: working columns of the requests frame named like the kind they count (``pl.col("pool_ready").sum()``)
COLUMNS_NAMED_LIKE_KINDS = {"pool_ready", "stream_reset", "upstream_reset", "local_reply"}


def kind_strings(source: str) -> list[tuple[int, str]]:
    kinds = {k.value for k in EventKind} - COLUMNS_NAMED_LIKE_KINDS
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds]


def test_the_scan_sees_a_kind_string() -> None:
    assert kind_strings('x = pl.col("kind") == "new_stream"\n') == [(1, "new_stream")]
    assert kind_strings('x = pl.col("kind") == EventKind.NEW_STREAM\n') == []


def test_no_module_of_the_analysis_names_a_kind_by_string() -> None:
    found = {str(p.relative_to(ANALYSIS.parent)): hits for p in sorted(ANALYSIS.rglob("*.py"))
             if (hits := kind_strings(p.read_text(encoding="utf-8")))}
    assert found == {}, "use EventKind members (envoy_dissector.parser.kinds) instead"
