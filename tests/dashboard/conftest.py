"""Dashboard tests: a real headless Chromium through dash[testing]'s ``dash_duo``/``dash_br`` fixtures.

Plain ``pytest`` from the repository root runs them headless (no ``--headless`` needed): the Chrome
options below carry ``--headless=new`` plus what Chromium needs as root in a container. Tests marked
``needs_browser`` are skipped when Chromium or chromedriver is missing (``apt-get install chromium
chromium-driver``), and fail instead when ``CI`` is set: CI must not go green without them.
"""
from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from envoy_dissector.dashboard.app import create_app
from tests.builders import DashboardProcess

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("DASH_TEST_CHROMEPATH") or shutil.which("chromium") or shutil.which("chromium-browser")
HAVE_BROWSER = bool(CHROMIUM and shutil.which("chromedriver"))

if CHROMIUM:
    os.environ.setdefault("DASH_TEST_CHROMEPATH", CHROMIUM)

BROWSER_REQUIRED = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
MISSING_BROWSER = "needs chromium and chromedriver on PATH (apt-get install chromium chromium-driver)"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_browser: runs a real headless Chromium (skipped without one, "
                                       "failed without one when CI is set)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_browser") is None or HAVE_BROWSER:
        return
    if BROWSER_REQUIRED:
        pytest.fail(f"CI is set but the browser test cannot run: {MISSING_BROWSER}", pytrace=False)
    pytest.skip(MISSING_BROWSER)


def _selenium3_with_urllib3_2() -> None:
    """dash[testing] allows selenium <= 4.2.0, and selenium 4.0-4.2 pin urllib3 1.26, which the kubernetes
    client (urllib3 >= 2) rules out, so pip resolves ``.[test]`` to selenium 3.141. Its remote connection
    passes ``socket._GLOBAL_DEFAULT_TIMEOUT`` to urllib3, which urllib3 2 rejects: give it a number."""
    try:
        import selenium
        from selenium.webdriver.remote.remote_connection import RemoteConnection
    except ImportError:
        return
    if selenium.__version__.startswith("3.") and hasattr(RemoteConnection, "set_timeout"):
        RemoteConnection.set_timeout(120)


_selenium3_with_urllib3_2()


def _prompt_waits() -> None:
    """dash[testing]'s ``wait_for_*`` poll through selenium's WebDriverWait, every 0.5 s by default: a condition met
    just after a poll held the test up to half a second longer, at each of the browser tests' hundred-odd waits.
    They poll every 0.1 s here (dash's own ``wait.until`` does too); each wait keeps its timeout."""
    try:
        from dash.testing import browser
        from selenium.webdriver.support.wait import WebDriverWait
    except ImportError:
        return
    if getattr(browser, "WebDriverWait", None) is not WebDriverWait:
        return

    class PromptWait(WebDriverWait):
        def __init__(self, driver, timeout, poll_frequency=0.1, ignored_exceptions=None):
            super().__init__(driver, timeout, poll_frequency, ignored_exceptions)

    browser.WebDriverWait = PromptWait


_prompt_waits()

# dash[testing] numbers its servers' ports from 58050 in every process. Two xdist workers each started a server on
# 58050: the second's failed ("Address already in use") while its runner, finding the first's answering, went on,
# and its browser drove the other test's app until that one stopped. Each worker takes a range of its own.
PORTS_PER_WORKER = 200


def _first_free_port(start: int, offset: int) -> int:
    """The first port free on 127.0.0.1 from ``start + offset`` on, round this worker's range."""
    for step in range(PORTS_PER_WORKER):
        port = start + (offset + step) % PORTS_PER_WORKER
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port for a dash test server in {start}-{start + PORTS_PER_WORKER - 1}")


@pytest.fixture(autouse=True)
def _dash_port_of_this_worker():
    """The next dash test server's port: the first one free in this xdist worker's own range."""
    from dash.testing.application_runners import BaseDashRunner

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = 58050 + PORTS_PER_WORKER * (int(worker) if worker.isdigit() else 0)
    BaseDashRunner._next_port = _first_free_port(start, (BaseDashRunner._next_port - start) % PORTS_PER_WORKER)
    yield


def pytest_setup_options():  # dash[testing] hook: options for every webdriver it starts
    from selenium.webdriver.chrome.options import Options

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--window-size=1440,1000"):
        options.add_argument(arg)
    return options


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def dashboard_process(tmp_path):
    """Start ``envoy-dissect dashboard ARGS...``; stopped (SIGTERM) at the end of the test."""
    started: list[DashboardProcess] = []

    def start(*args: str) -> DashboardProcess:
        started.append(DashboardProcess(list(args), tmp_path / f"server-{len(started)}"))
        return started[-1]
    yield start
    for s in started:
        s.stop()


@pytest.fixture
def make_app():
    """create_app, and its analysis threads stopped before dash's runner kills every thread it did not
    start (it raises SystemExit in them, which a pool worker reports as 'Exception in worker')."""
    apps = []

    def make(**kw):
        apps.append(create_app(**kw))
        return apps[-1]
    yield make
    for a in apps:
        a.server.config["DISSECTOR_REGISTRY"].shutdown(wait=True)


@pytest.fixture
def named(tmp_path):
    """Fixtures copied under telling names (all fixtures are called envoy.log.gz)."""
    def copy(src: Path, name: str) -> Path:
        dst = tmp_path / name
        shutil.copyfile(src, dst)
        return dst
    return copy
