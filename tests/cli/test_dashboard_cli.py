"""`envoy-dissect dashboard` (cli/dashboard.py): arguments, defaults (127.0.0.1), the app it builds.

Named test_dashboard_cli.py so it cannot clash with a test_cli.py elsewhere.
"""
from __future__ import annotations

import pytest

from envoy_dissector.cli.main import build_parser, main


def test_dashboard_subcommand_defaults():
    args = build_parser().parse_args(["dashboard"])
    assert args.host == "127.0.0.1" and args.port == 8050 and args.max_upload_mb == 2048
    assert args.captures == []
    args = build_parser().parse_args(["dashboard", "a.log", "--port", "9000", "--max-upload-mb", "10"])
    assert args.captures == ["a.log"] and args.port == 9000 and args.max_upload_mb == 10


def test_dashboard_runs_the_app(monkeypatch):
    from dash import Dash

    seen = {}

    def fake_run(self, host, port, debug):
        seen.update(host=host, port=port, app=self)

    monkeypatch.setattr(Dash, "run", fake_run)
    assert main(["dashboard", "fixtures/istio-thread/keepalive/envoy.log.gz", "--port", "8123"]) == 0
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8123
    reg = seen["app"].server.config["DISSECTOR_REGISTRY"]
    assert [d.name for d in reg.visible(None)] == ["envoy.log.gz"]  # the given capture, no demo


def test_missing_capture_is_an_input_error(capsys):
    assert main(["dashboard", "/nonexistent.log"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1"])
def test_bad_upload_cap(value):
    assert main(["dashboard", "--max-upload-mb", value]) == 64


def test_sigterm_removes_the_upload_directory():
    import glob
    import signal
    import socket
    import subprocess
    import sys
    import tempfile
    import time

    pattern = f"{tempfile.gettempdir()}/envoy-dissector-uploads-*"
    before = set(glob.glob(pattern))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.cli.main", "dashboard", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        mine = set(glob.glob(pattern)) - before
        assert len(mine) == 1
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        assert not (set(glob.glob(pattern)) & mine)
    finally:
        if proc.poll() is None:
            proc.kill()
