"""A tiny YAML writer for Envoy bootstraps (dicts, lists, scalars; multi-line strings as blocks).

Strings are written JSON-quoted (valid YAML double-quoted scalars), so no
value can be misread as a number, bool or anchor.

>>> print(to_yaml({"a": [1, {"b": "x"}], "c": True}), end="")
"a":
  - 1
  - "b": "x"
"c": true
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

YamlValue = Mapping[str, "YamlValue"] | Sequence["YamlValue"] | str | int | float | bool | None


def _scalar(value: YamlValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise TypeError(f"not a YAML scalar: {type(value).__name__}")


def _emit(value: YamlValue, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            out[-1] += " {}"
            return
        for key, item in value.items():
            out.append(f"{pad}{json.dumps(str(key))}:")
            _emit_child(item, indent, out)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            out[-1] += " []"
            return
        for item in value:
            if isinstance(item, Mapping) and item:
                sub: list[str] = [""]
                _emit(item, indent + 2, sub)
                first = sub[1]
                out.append(f"{pad}- {first.lstrip()}")
                out.extend(sub[2:])
            else:
                out.append(f"{pad}-")
                _emit_child(item, indent, out)
    else:
        out[-1] += " " + _scalar(value)


def _emit_child(item: YamlValue, indent: int, out: list[str]) -> None:
    if isinstance(item, str) and "\n" in item:
        out[-1] += " |"
        for line in item.rstrip("\n").split("\n"):
            out.append(" " * (indent + 2) + line if line else "")
    elif isinstance(item, (Mapping, list, tuple)) and item:
        _emit(item, indent + 2, out)
    else:
        _emit(item, indent + 2, out)


def to_yaml(value: Mapping[str, YamlValue]) -> str:
    """Render a mapping as block YAML text ending in a newline."""
    out: list[str] = [""]
    _emit(value, 0, out)
    return "\n".join(out[1:]) + "\n"
