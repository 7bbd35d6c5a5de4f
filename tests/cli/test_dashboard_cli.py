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


@pytest.fixture
def served(monkeypatch):
    """What the CLI hands to waitress (nothing is bound)."""
    from envoy_dissector.dashboard import server

    seen = {}

    def fake_serve(app, host, port, *, max_body_bytes, threads=8):
        seen.update(host=host, port=port, app=app, max_body_bytes=max_body_bytes)

    monkeypatch.setattr(server, "serve", fake_serve)
    monkeypatch.delenv("ENVOY_DISSECTOR_TOKEN", raising=False)
    return seen


def test_dashboard_runs_the_app_on_waitress(served, capsys):
    assert main(["dashboard", "fixtures/istio-thread/keepalive/envoy.log.gz", "--port", "8123"]) == 0
    assert served["host"] == "127.0.0.1" and served["port"] == 8123
    assert served["max_body_bytes"] == 2048 * 1024 * 1024
    reg = served["app"].server.config["DISSECTOR_REGISTRY"]
    assert [d.name for d in reg.visible(None)] == ["envoy.log.gz"]  # the given capture, no demo
    assert reg.max_datasets == 4 and reg.max_sessions == 16
    assert "http://127.0.0.1:8123/ " in capsys.readouterr().out  # loopback: no token


def test_a_network_bind_generates_and_prints_a_token(served, capsys):
    assert main(["dashboard", "--host", "0.0.0.0", "--port", "8124", "--allowed-host", "dissector.example"]) == 0
    out = capsys.readouterr().out
    assert "?token=" in out and "warning: binding 0.0.0.0" in out
    token = out.split("?token=")[1].split()[0]
    assert len(token) >= 32
    client = served["app"].server.test_client()
    assert client.get("/", headers={"Host": "dissector.example:8124"}).status_code == 401
    r = client.get(f"/?token={token}", headers={"Host": "dissector.example:8124"})
    assert r.status_code == 303 and "token" not in r.headers["Location"]
    assert client.get("/", headers={"Host": "dissector.example:8124"}).status_code == 200  # the cookie
    assert client.get("/", headers={"Host": "evil.example:8124"}).status_code == 403


def test_a_given_token_is_used(served, capsys, monkeypatch):
    monkeypatch.setenv("ENVOY_DISSECTOR_TOKEN", "from-the-environment-0123")
    assert main(["dashboard", "--host", "0.0.0.0"]) == 0
    assert "?token=from-the-environment-0123" in capsys.readouterr().out
    assert main(["dashboard", "--token", "given-on-the-command-line", "--port", "8125"]) == 0
    assert "http://127.0.0.1:8125/?token=given-on-the-command-line" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--host", "0.0.0.0", "--debug"], ["--host", "10.1.2.3", "--no-redact"],
                                  ["--token", "short"], ["--max-datasets", "0"], ["--max-sessions", "-1"]])
def test_refused_combinations(served, argv):
    assert main(["dashboard", *argv]) == 64
    assert not served


def test_missing_capture_is_an_input_error(capsys):
    assert main(["dashboard", "/nonexistent.log"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_bad_upload_cap(value):
    with pytest.raises(SystemExit) as refused:  # argparse's usage error
        main(["dashboard", "--max-upload-mb", value])
    assert refused.value.code == 64


def test_sigterm_removes_the_upload_directory(tmp_path):
    import glob
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    # its own temporary folder: a dashboard started by another test at the same time (pytest -n) has its own
    pattern = f"{tmp_path}/envoy-dissector-dashboard-*/envoy-dissector-uploads-*"  # (in the server's private dir)
    before = set(glob.glob(pattern))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.cli.main", "dashboard", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp_path)})
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
