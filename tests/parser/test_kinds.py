"""``EventKind`` is the grammar's kinds as an enum: in sync with EnvoyLog.g4, usable against the ``kind`` column,
and a misspelt member fails loudly where a misspelt string matched nothing."""
from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest

from envoy_dissector.parser import regenerate
from envoy_dissector.parser.grammar import ALL_KINDS
from envoy_dissector.parser.kinds import EventKind
from envoy_dissector.parser.pipeline import parse
from envoy_dissector.parser.schema import KIND


def test_kinds_py_is_generated_from_the_grammar() -> None:
    assert regenerate.KINDS.read_text(encoding="utf-8") == regenerate.kinds_source(), (
        "parser/kinds.py is stale: python -m envoy_dissector.parser.regenerate --kinds")
    assert tuple(EventKind) == ALL_KINDS
    assert list(KIND.categories) == [k.value for k in EventKind]


def test_grammar_names_py_is_generated_from_the_parser() -> None:
    assert regenerate.NAMES.read_text(encoding="utf-8") == regenerate.names_source(), (
        "parser/grammar_names.py is stale: python -m envoy_dissector.parser.regenerate --kinds")


def test_the_parser_package_imports_without_the_antlr_parser() -> None:
    """Kinds, schema and the fast path need only the names; the ANTLR classes (whose import deserializes their
    ATNs, ~0.35 s) load on the first grammar parse, or in the background when a parse run starts."""
    code = ("import sys, envoy_dissector.parser.pipeline, envoy_dissector.analysis; "
            "print(any(m.startswith('envoy_dissector.parser.generated') for m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.strip() == "False"


def test_a_misspelt_kind_is_an_error_not_an_empty_match() -> None:
    with pytest.raises(AttributeError):
        EventKind.NEW_STREM  # type: ignore[attr-defined]  # noqa: B018
    frame = pl.DataFrame({"kind": ["new_stream", "unknown"]}, schema={"kind": KIND})
    assert frame.filter(pl.col("kind") == "new_strem").height == 0  # what the enum protects against: silence
    assert frame.filter(pl.col("kind") == EventKind.NEW_STREAM).height == 1


def test_members_compare_with_the_kind_column(fixtures_dir) -> None:
    events = parse(fixtures_dir / "istio-thread" / "keepalive" / "envoy.log.gz").events
    by_member = events.filter(pl.col("kind") == EventKind.NEW_STREAM)
    by_text = events.filter(pl.col("kind").cast(pl.String) == "new_stream")
    assert by_member.height == by_text.height > 0
    many = events.filter(pl.col("kind").is_in([EventKind.READ_READY, EventKind.WRITE_READY]))
    assert many.height == events.filter(pl.col("kind").cast(pl.String).is_in(["read_ready", "write_ready"])).height > 0
