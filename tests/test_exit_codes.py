"""Every exit code has one meaning, is numbered in one place (``ExitCode``) and is listed in docs/output.md."""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from envoy_dissector.parser.errors import DissectorError, ExitCode

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("parser", "analysis", "kube", "lab", "fleet", "dashboard", "cli")


def _error_classes() -> list[type[DissectorError]]:
    for name in PACKAGES:
        package = importlib.import_module(f"envoy_dissector.{name}")
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if ".generated" not in module.name and not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    found, todo = [], [DissectorError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [c for c in found if c.__module__.startswith("envoy_dissector.")]


ERRORS = _error_classes()


@pytest.mark.parametrize("error", ERRORS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_carries_a_numbered_code(error: type[DissectorError]) -> None:
    assert isinstance(error.exit_code, ExitCode), f"{error.__qualname__}.exit_code is not an ExitCode member"


def test_two_errors_share_a_code_only_as_kinds_of_one_error() -> None:
    """Where a class sets a code, it gives it a meaning: a subclass may set its base's code again (KubeConfigError
    is a KubeError), or inherit it; two unrelated classes may not set the same one."""
    setters = [c for c in ERRORS if "exit_code" in c.__dict__]
    for a in setters:
        for b in setters:
            if a is not b and a.exit_code == b.exit_code:
                assert issubclass(a, b) or issubclass(b, a), (
                    f"{a.__module__}.{a.__qualname__} and {b.__module__}.{b.__qualname__} both exit "
                    f"{int(a.exit_code)}")


def test_output_md_lists_exactly_the_numbered_codes() -> None:
    text = (REPO / "docs" / "output.md").read_text(encoding="utf-8")
    table = text.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    documented = [int(m) for m in re.findall(r"(?m)^\| (\d+) \|", table)]
    assert documented == sorted(documented), "the table is in code order"
    assert documented == sorted(int(c) for c in ExitCode)


def test_the_cli_returns_the_numbered_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from envoy_dissector.cli.main import main

    assert main(["parse", str(tmp_path / "missing.log")]) == ExitCode.INPUT
    with pytest.raises(SystemExit) as usage:
        main(["analyze", "--bogus", "x"])
    assert usage.value.code == ExitCode.USAGE
