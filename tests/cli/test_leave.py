"""The console script leaves without the interpreter's teardown (cli/main.py ``leave``), and the command's modules
are kept out of the cyclic collector (``gc.freeze`` after the subcommands' imports)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "fixtures/istio-thread/retries-503/envoy.log.gz"


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_leave_runs_the_exit_handlers_flushes_the_streams_and_keeps_the_code(tmp_path: Path) -> None:
    done = _python(
        "import atexit, sys, pathlib\n"
        "from envoy_dissector.cli.main import leave\n"
        "atexit.register(lambda: pathlib.Path('handler-ran').write_text('yes'))\n"
        "sys.stdout.write('buffered, not flushed'); sys.stderr.write('err, not flushed')\n"
        "leave(3)\n", tmp_path)
    assert done.returncode == 3
    assert done.stdout == "buffered, not flushed" and done.stderr == "err, not flushed"
    assert (tmp_path / "handler-ran").read_text() == "yes"


def test_leave_waits_for_a_thread_that_is_not_a_daemon(tmp_path: Path) -> None:
    done = _python(
        "import threading, time, pathlib\n"
        "from envoy_dissector.cli.main import leave\n"
        "def late():\n"
        "    time.sleep(0.5); pathlib.Path('late').write_text('written')\n"
        "threading.Thread(target=late).start()\n"
        "leave(0)\n", tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "late").read_text() == "written"


def test_the_console_script_writes_its_outputs_and_report_and_freezes_the_modules(tmp_path: Path) -> None:
    out = tmp_path / "requests.csv"
    done = _python(
        "import gc, sys\n"
        "from envoy_dissector.cli import main as cli\n"
        "real_leave = cli.leave\n"
        "def leave(code):\n"
        "    print('frozen', gc.get_freeze_count(), file=sys.stderr)\n"
        "    real_leave(code)\n"
        "cli.leave = leave\n"
        f"sys.argv = ['envoy-dissect', 'analyze', {str(CAPTURE)!r}, '-o', {str(out)!r}]\n"
        "cli.entry()\n", tmp_path)
    assert done.returncode == 0, done.stderr
    frozen = int(done.stderr.split("frozen ")[1].split()[0])
    assert frozen > 10_000  # (polars', the grammar's and the analysis' objects: ~10^5)
    assert out.read_text().count("\n") > 1 and "slowest" in done.stdout


def test_the_installed_command_exits_with_the_documented_code(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("envoy-dissect")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "envoy_dissector.cli"]
    done = subprocess.run([*argv, "analyze", str(tmp_path / "missing.log")], capture_output=True, text=True,
                          timeout=60)
    ok = subprocess.run([*argv, "analyze", str(CAPTURE), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode not in (0, 1) and "missing.log" in done.stderr
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("}")
