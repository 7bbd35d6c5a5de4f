"""`envoy-dissect --version` says whether the compiled parser is on, and why not; without the build the first
run says once on stderr that parsing takes the polars path (the same results, more CPU)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from envoy_dissector.parser import extension

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TWO_LOGS = [str(FIXTURES / "istio-thread" / name / "envoy.log.gz") for name in ("keepalive", "lua-cpu")]

# The real CLI in a fresh interpreter where the compiled extension cannot be imported (as after an install
# without cargo): `import envoy_dissector.parser._native` raises ImportError.
_WITHOUT_BUILD = """
import sys
sys.modules["envoy_dissector.parser._native"] = None
from envoy_dissector.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _cli(*argv: str, built: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    code = ["-m", "envoy_dissector.cli"] if built else ["-c", _WITHOUT_BUILD]
    return subprocess.run([sys.executable, *code, *argv], capture_output=True, text=True, timeout=300, env=env)


def test_version_says_the_compiled_parser_is_on_when_built() -> None:
    proc = _cli("--version")
    expected = "on" if extension.available() else "off (not built: "
    assert proc.returncode == 0 and proc.stdout.splitlines()[1].startswith(f"compiled parser: {expected}"), proc


def test_version_says_off_and_why_without_the_build() -> None:
    proc = _cli("--version", built=False)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.splitlines()[1]
    assert line.startswith("compiled parser: off (not built: ") and "cargo" in line, line
    assert proc.stderr == ""  # --version parses nothing: no warning


def test_version_says_off_when_turned_off() -> None:
    import os

    proc = _cli("--version", env={**os.environ, "ENVOY_DISSECTOR_NATIVE": "0"})
    expected = "off (ENVOY_DISSECTOR_NATIVE=0)" if extension.available() else "off (not built: "
    assert proc.stdout.splitlines()[1].startswith(f"compiled parser: {expected}"), proc.stdout


def test_without_the_build_a_run_warns_once_and_gives_the_same_report() -> None:
    slow = _cli("analyze", *TWO_LOGS, "-q", built=False)
    assert slow.returncode == 0, slow.stderr
    warnings = [line for line in slow.stderr.splitlines() if "compiled parser off" in line]
    assert warnings == [warnings[0]] and warnings[0].startswith("envoy-dissector: warning: compiled parser off "
                                                                "(not built: "), slow.stderr
    assert "polars path" in warnings[0]
    fast = _cli("analyze", *TWO_LOGS, "-q")
    assert "compiled parser off" not in fast.stderr
    assert fast.stdout == slow.stdout


def test_turned_off_on_purpose_is_not_warned_about() -> None:
    import os

    proc = _cli("analyze", TWO_LOGS[0], "-q", built=False, env={**os.environ, "ENVOY_DISSECTOR_NATIVE": "0"})
    assert proc.returncode == 0 and "compiled parser" not in proc.stderr, proc.stderr
