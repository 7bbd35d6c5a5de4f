"""A parse cache shared by the parser tests, and one test per fixture capture.

Every trace log under ``fixtures/`` (``*.log`` / ``*.log.gz``) is a ``FixtureLog`` (tests/builders.py);
tests that take a ``fixture_log`` argument run once per log. The expected
format id comes from the capture's top folder (as fixtures/README.md lays them
out) and is cross-checked against ``meta.json`` where one exists.
"""
from __future__ import annotations

from collections.abc import Callable

import pytest

from envoy_dissector.parser.pipeline import Parsed, parse
from tests.builders import FIXTURE_LOGS, FixtureLog, by_rel


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


@pytest.fixture(scope="session")
def fixture_by_rel() -> Callable[[str], FixtureLog]:
    return by_rel
