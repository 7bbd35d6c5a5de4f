"""Build the lab's proxy-wasm stats-like filter from its WebAssembly text (``wat2wasm`` from Debian's ``wabt``).

The source (``lab/wasm/stats_burn.wat``) is kept in the repository; the binary is built at run time into
the capture directory, so nothing compiled is committed.
"""
from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path
from typing import Final

from envoy_dissector.lab.envoy import LabError

#: The filter's root id and VM id, as Istio names its inbound stats filter.
ROOT_ID: Final = "stats_inbound"
#: Counters the module defines (Envoy prefixes them with ``wasmcustom.``).
SELF_NS_COUNTER: Final = "wasmcustom.lab_self_ns"
CALLS_COUNTER: Final = "wasmcustom.lab_calls"
#: Filter state the module sets in ``proxy_on_request_headers`` (ns it spent there, for the access log).
REQUEST_NS_STATE: Final = "wasm.burn_req_ns"


def wat_source() -> str:
    """The module's WebAssembly text."""
    return resources.files("envoy_dissector.lab").joinpath("wasm/stats_burn.wat").read_text(encoding="utf-8")


def build_module(dest: Path) -> Path:
    """Assemble the module into ``dest`` (a ``.wasm`` path) and return it.

    Raises:
        LabError: ``wat2wasm`` is missing or rejects the source.
    """
    tool = shutil.which("wat2wasm")
    if tool is None:
        raise LabError("the wasm-stats scenario needs wat2wasm: install Debian's wabt package (apt-get install wabt)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = dest.with_suffix(".wat")
    source.write_text(wat_source(), encoding="utf-8")
    done = subprocess.run([tool, str(source), "-o", str(dest)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LabError(f"wat2wasm failed on {source}: {done.stderr.strip()}")
    return dest
