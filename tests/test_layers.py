"""Layers point one way: parser -> analysis -> {dashboard, fleet, cli}; kube and lab sit beside analysis on the parser.

Each package is imported in a fresh interpreter, and every ``envoy_dissector`` module that import pulled in
(the whole import graph) is checked against what the layer may use; the sources of every module are also
scanned, so an import inside a function or a module named in a string cannot cross a layer either.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: package -> the envoy_dissector packages its import may load (besides itself)
ALLOWED: dict[str, set[str]] = {
    "parser": set(),
    "analysis": {"parser"},
    "kube": {"parser"},
    "lab": {"parser"},
    "fleet": {"parser", "analysis"},
    "dashboard": {"parser", "analysis"},
    "cli": {"parser", "analysis", "kube", "lab", "fleet", "dashboard"},
}

REPO = Path(__file__).resolve().parents[1]

_LOADED = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.startswith("envoy_dissector."))))
"""


def _loaded_by(module: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _LOADED, module], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    return list(json.loads(out))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below(package: str) -> None:
    loaded = _loaded_by(f"envoy_dissector.{package}")
    layers = {m.split(".")[1] for m in loaded}
    assert layers - {package} <= ALLOWED[package], loaded


def test_the_notebook_api_pulls_in_no_front_end() -> None:
    import envoy_dissector.analysis as ed

    loaded = _loaded_by("envoy_dissector.analysis")
    for name in ed.__all__:  # the public API as a notebook uses it, figures included
        assert getattr(ed, name) is not None
    assert not [m for m in loaded if m.split(".")[1] in ("dashboard", "cli")]


def imported_layers(source: str) -> set[str]:
    """The ``envoy_dissector`` packages a module's source names: imports anywhere (also inside functions) and
    module names given as strings (``importlib.import_module("envoy_dissector....")``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names += re.findall(r"\benvoy_dissector\.\w+", node.value)
    return {n.split(".")[1] for n in names if n.startswith("envoy_dissector.")}


def test_the_source_scan_sees_lazy_and_string_imports() -> None:
    lazy = "def figure():\n    from envoy_dissector.dashboard import figures\n"
    by_name = 'MODULES = ("envoy_dissector.cli.main",)\n'
    assert imported_layers(lazy) == {"dashboard"} and imported_layers(by_name) == {"cli"}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_every_module_of_a_layer_names_only_the_layers_below(package: str) -> None:
    wrong = {}
    for path in sorted((REPO / package).rglob("*.py")):
        if "generated" in path.parts:
            continue
        extra = imported_layers(path.read_text(encoding="utf-8")) - ALLOWED[package] - {package}
        if extra:
            wrong[str(path.relative_to(REPO))] = sorted(extra)
    assert wrong == {}
