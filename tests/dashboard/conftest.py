"""Dashboard tests: a real headless Chromium through dash[testing]'s ``dash_duo``/``dash_br`` fixtures.

Plain ``pytest`` from the repository root runs them headless (no ``--headless`` needed): the Chrome
options below carry ``--headless=new`` plus what Chromium needs as root in a container. Tests marked
``needs_browser`` are skipped when Chromium or chromedriver is missing (``apt-get install chromium
chromium-driver``), and fail instead when ``CI`` is set: CI must not go green without them.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

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


class DashboardProcess:
    """``envoy-dissect dashboard`` in a subprocess (waitress, 127.0.0.1), with its own TMPDIR so its
    upload directory can be inspected; ``url`` is the address it printed (token included if any)."""

    def __init__(self, args: list[str], tmp: Path) -> None:
        import socket
        import subprocess
        import sys

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.log = (tmp / "server.out").open("w+")
        env = {**os.environ, "TMPDIR": str(tmp)}
        env.pop("ENVOY_DISSECTOR_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "envoy_dissector.cli", "dashboard", "--port", str(self.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self._wait_for_url()

    def _wait_for_url(self, timeout: float = 120) -> str:
        import time

        import requests

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dashboard exited: {self.output()}")
            for line in self.output().splitlines():
                if " dashboard on http" in line:
                    try:
                        requests.get(self.base + "/_dash-layout", timeout=5)
                        return line.split(" dashboard on ")[1].split()[0]
                    except requests.ConnectionError:
                        pass
            time.sleep(0.3)
        raise AssertionError(f"dashboard did not start: {self.output()}")

    def output(self) -> str:
        self.log.flush()
        return (self.tmp / "server.out").read_text()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def upload_dirs(self) -> list[Path]:
        """Upload directories (inside the server's private temporary directory)."""
        return sorted([*self.tmp.glob("envoy-dissector-uploads-*"), *self.tmp.glob("*/envoy-dissector-uploads-*")])

    def private_dirs(self) -> list[Path]:
        """The server's private temporary directories (one while it runs)."""
        return sorted(self.tmp.glob("envoy-dissector-dashboard-*"))

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except Exception:
                self.proc.kill()
        self.log.close()


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


class RssSampler:
    """Peak resident memory of a process, sampled every ``interval`` s in a thread (psutil)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        import threading

        import psutil

        self.proc = psutil.Process(pid)
        self.interval = interval
        self.baseline = self.proc.memory_info().rss
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except Exception:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.last = self.proc.memory_info().rss
