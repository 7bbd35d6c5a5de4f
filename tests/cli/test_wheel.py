"""A wheel built where cargo is (``pip wheel .``) carries the compiled parser, and an install of it on a machine
without cargo runs the compiled path: the user who installs the wheel does not silently get the slow one."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "istio-thread" / "keepalive" / "envoy.log.gz"
# what a wheel is built from: the source without its history, tests, captures or earlier builds
_NOT_SOURCE = shutil.ignore_patterns(".git", "build", "target", "*.egg-info", "__pycache__", "test-artifacts",
                                     "fixtures", "tests", "bench", "*.so")


def _run(*argv: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=1500, env=env, cwd=cwd)
    assert proc.returncode == 0, f"{argv}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip wheel`` of a copy of the source (cargo found; its build cache is the one the install used:
    ``$CARGO_TARGET_DIR`` (.ci/run's, outside the clone), else the repository's native/target)."""
    tmp = tmp_path_factory.mktemp("wheel")
    shutil.copytree(REPO, tmp / "src", ignore=_NOT_SOURCE)
    env = {**os.environ, "CARGO_TARGET_DIR": os.environ.get("CARGO_TARGET_DIR") or str(REPO / "native" / "target")}
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", tmp / "src", env=env)
    (built,) = (tmp / "dist").glob("envoy_dissector-*.whl")
    return built


def test_the_wheel_carries_the_compiled_parser(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("envoy_dissector/parser/_native") and n.endswith(".so")], names


def test_installed_without_cargo_the_compiled_path_runs(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel)
    # The dependencies come from this interpreter's site-packages as a plain path: a folder named in a .pth
    # file is searched, but its own .pth files (this checkout's editable install) are not run.
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    path = f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None

    where = _run(python, "-c", "import envoy_dissector.parser.extension as e; print(e.__file__, e.enabled())",
                 env=env, cwd=tmp_path)
    assert where.startswith(str(venv)) and where.split()[-1] == "True", where
    assert _run(venv / "bin" / "envoy-dissect", "--version", env=env, cwd=tmp_path).splitlines()[1] == (
        "compiled parser: on")

    proc = subprocess.run([str(venv / "bin" / "envoy-dissect"), "analyze", str(FIXTURE), "-q"], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "compiled parser" not in proc.stderr, proc.stderr
    # the same install with the compiled parser turned off: the same report
    polars_path = _run(venv / "bin" / "envoy-dissect", "analyze", FIXTURE, "-q", env={**env, "ENVOY_DISSECTOR_NATIVE": "0"},
                       cwd=tmp_path)
    assert proc.stdout == polars_path
