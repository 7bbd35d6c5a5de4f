"""`envoy-dissect --version` answers from the extension's status without importing polars or numpy (their import
is most of its start-up cost); the status it prints is the one a parsing run would take."""
from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
from envoy_dissector.cli.main import version_text
print(version_text())
print(sorted(name for name in ("polars", "numpy") if name in sys.modules))
"""


def test_version_text_imports_neither_polars_nor_numpy() -> None:
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    assert lines[1].startswith("compiled parser: ")
    assert lines[-1] == "[]"


def test_the_lazy_imports_still_give_every_compiled_step() -> None:
    import polars as pl

    from envoy_dissector.parser import extension

    found = extension.distinct(pl.Series(["a", "b", "a", None]))
    assert found.index.to_list() == [0, 1, 0, 2]
