"""The committed generated parser matches parser/EnvoyLog.g4, and the grammar's rules are the kind contract."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from envoy_dissector.parser import grammar
from envoy_dissector.parser.generated.EnvoyLogParser import EnvoyLogParser
from envoy_dissector.parser.schema import FIELD_SCHEMA, KIND, PREFIX_FIELDS

G4 = Path(grammar.__file__).with_name("EnvoyLog.g4")


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _rules(text: str) -> dict[str, str]:
    """Parser rule name -> body, read from the .g4 text (not from the generated code)."""
    body = _strip_comments(text)
    return {m["name"]: m["body"] for m in re.finditer(r"(?m)^(?P<name>[a-z]\w*)\s*:(?P<body>.*?);\s*$", body, re.S)}


def _alternatives(body: str) -> list[str]:
    return [alt.strip() for alt in re.split(r"\|", body) if alt.strip()]


def test_generated_code_is_in_sync_with_the_grammar():
    if shutil.which("antlr4") is None or shutil.which("java") is None:
        pytest.skip("antlr4 (pip install antlr4-tools) and Java are needed to regenerate; CI installs both")
    run = subprocess.run([sys.executable, "-m", "envoy_dissector.parser.regenerate", "--check"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "in sync" in run.stdout


def test_grammar_file_is_the_packaged_one():
    packaged = resources.files("envoy_dissector.parser").joinpath("EnvoyLog.g4")
    assert packaged.read_text() == G4.read_text()
    generated = Path(sys.modules[EnvoyLogParser.__module__].__file__).read_text()
    assert "EnvoyLog.g4" in generated.splitlines()[0]
    assert "/" not in generated.splitlines()[0].split("EnvoyLog.g4")[0].split()[-1]  # no machine path


def test_listed_rules_are_exactly_the_kinds():
    rules = _rules(G4.read_text())
    listed = {
        group: list(_alternatives(rules[group])) for group in ("lifecycle", "noise")
    }
    for group, names in listed.items():
        for name in names:
            assert re.fullmatch(r"[a-z]\w*", name), f"{group}: {name!r} is not a plain rule reference"
            assert name in rules, f"{group} lists {name}, which the grammar does not define"
    lifecycle = tuple(grammar.snake_case(n) for n in listed["lifecycle"])
    noise = tuple(grammar.snake_case(n) for n in listed["noise"])
    assert set(lifecycle) == set(grammar.LIFECYCLE_KINDS)
    assert set(noise) | {"background"} == set(grammar.NOISE_KINDS)
    assert set(grammar.ALL_KINDS) == set(lifecycle) | set(noise) | {"background", grammar.UNKNOWN}
    assert len(grammar.ALL_KINDS) == len(set(grammar.ALL_KINDS))
    assert list(KIND.categories) == list(grammar.ALL_KINDS)


def test_every_label_is_a_typed_column():
    rules = _rules(G4.read_text())
    columns = set(FIELD_SCHEMA) | set(PREFIX_FIELDS)
    for name in ("prefix", *_alternatives(rules["lifecycle"]), *_alternatives(rules["noise"])):
        code = re.sub(r"'(?:\\.|[^'\\])*'", "''", rules[name])  # labels only, not text inside literals
        for label in re.findall(r"\b([a-z_][a-z0-9_]*)\s*=", code):
            assert label in columns, f"rule {name}: label {label} has no column in parser/schema.py"


def test_each_kind_parses_from_an_example():
    """One real-looking message per lifecycle kind found in the fixtures parses to that kind."""
    seen = {
        "read_returns": "connection\t[C1] read returns: 5",
        "route_match": "router\t[C1][S2] cluster 'a' match for URL '/b'",
        "attached_upstream_connection": "router\tAttached upstream connection [C3] to downstream connection [C1]",
        "h2_sent_frame": "http2\t[C1] sent frame type=1, stream_id=1, length=20",
        "timer_noise": "main\tenableTimer called on 0x55d2 for 3600000ms, min is 3600000ms",
    }
    for kind, text in seen.items():
        assert grammar.parse_message(text).kind == kind
