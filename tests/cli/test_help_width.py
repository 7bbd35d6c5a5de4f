"""Every command's --help fits an 80-column terminal, and a wider COLUMNS is used (argparse follows it)."""
from __future__ import annotations

import argparse

import pytest

from envoy_dissector.cli.main import build_parser


def _helps() -> dict[str, str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"envoy-dissect": parser.format_help()} | {name: p.format_help() for name, p in sub.choices.items()}


@pytest.mark.parametrize("columns", [80, 100])
def test_every_help_fits_columns(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    helps = _helps()
    assert {"analyze", "compare", "fleet", "lab", "fetch", "capture", "dashboard", "parse"} <= set(helps)
    too_wide = {name: [line for line in text.splitlines() if len(line) > columns] for name, text in helps.items()}
    assert not {name: lines for name, lines in too_wide.items() if lines}


def test_wider_columns_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    narrow = _helps()["analyze"]
    monkeypatch.setenv("COLUMNS", "140")
    wide = _helps()["analyze"]
    assert max(map(len, wide.splitlines())) > max(map(len, narrow.splitlines()))
