"""Fixture-capture discovery and a parse cache shared by the parser tests.

Every trace log under ``fixtures/`` (``*.log`` / ``*.log.gz``) is a ``FixtureLog``;
tests that take a ``fixture_log`` argument run once per log. The expected
format id comes from the capture's top folder (as fixtures/README.md lays them
out) and is cross-checked against ``meta.json`` where one exists.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envoy_dissector.parser.pipeline import Parsed, parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

#: fixtures/<top>/... -> format id the detector must report.
EXPECTED_FORMAT = {
    "envoy": "envoy", "envoy-us": "envoy",
    "istio": "istio", "old-format": "istio",
    "istio-thread": "istio-thread", "kubectl": "istio-thread",
    "istio-json": "istio-json", "istio-json-old": "istio-json",
    "custom": "custom",
    "legacy-1.19": "istio",
}
#: Folders of captures made at another log level, holding one folder per format.
LEVEL_DIRS = frozenset({"debug-level", "info-level"})
#: Top folders whose format has millisecond timestamps / no thread id.
MILLISECOND_DIRS = frozenset({"envoy"})
NO_THREAD_DIRS = frozenset({"istio", "old-format", "istio-json-old", "legacy-1.19"})


@dataclass(frozen=True)
class FixtureLog:
    path: Path
    rel: str
    top: str
    expected_format: str
    meta: dict[str, Any] | None
    #: the --log-format to pass (custom captures only; the others are auto-detected)
    log_format: str | None

    @property
    def pattern(self) -> str | None:
        return self.meta["log_format"]["pattern"] if self.meta else None


def _meta_for(path: Path) -> dict[str, Any] | None:
    """The capture's meta.json; for a multi-pod log, the first pod's (all pods share format and start)."""
    for d in (path.parent, *path.parents):
        if (d / "meta.json").exists():
            return json.loads((d / "meta.json").read_text())
        if d == FIXTURES:
            break
    pods = sorted(path.parent.glob("*/meta.json"))
    return json.loads(pods[0].read_text()) if pods else None


def fixture_logs() -> list[FixtureLog]:
    paths = sorted({*FIXTURES.glob("**/*.log"), *FIXTURES.glob("**/*.log.gz")})
    logs = []
    for path in paths:
        rel = path.relative_to(FIXTURES).as_posix()
        top = rel.split("/")[0]
        if top in LEVEL_DIRS:  # debug-level/<format>/..., info-level/<format>/...: the format is one level down
            top = rel.split("/")[1]
        if top == "real":  # excerpts written by other people: checked by tests/real against their manifest
            continue
        meta = _meta_for(path)
        log_format = meta["log_format"]["pattern"] if top == "custom" and meta else None
        logs.append(FixtureLog(path, rel, top, EXPECTED_FORMAT[top], meta, log_format))
    return logs


FIXTURE_LOGS = fixture_logs()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fixture_log" in metafunc.fixturenames:
        metafunc.parametrize("fixture_log", FIXTURE_LOGS, ids=[f.rel for f in FIXTURE_LOGS])


_CACHE: dict[tuple[str, bool], Parsed] = {}


@pytest.fixture(scope="session")
def parsed_fixture() -> Callable[..., Parsed]:
    """``parsed_fixture(fixture_log, fast=True)``: the capture parsed once per session and path."""
    def get(fx: FixtureLog, *, fast: bool = True) -> Parsed:
        key = (fx.rel, fast)
        if key not in _CACHE:
            _CACHE[key] = parse(fx.path, log_format=fx.log_format, fast=fast)
        return _CACHE[key]
    return get


def by_rel(rel: str) -> FixtureLog:
    return next(f for f in FIXTURE_LOGS if f.rel == rel)


@pytest.fixture(scope="session")
def fixture_by_rel() -> Callable[[str], FixtureLog]:
    return by_rel
