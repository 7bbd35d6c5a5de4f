"""Analysis stage and public API: per-request timelines, phase attribution, event-loop model.

>>> import envoy_dissector.analysis as ed
>>> cap = ed.dissect("fixtures/istio-thread/keepalive/envoy.log.gz")
>>> sorted(cap.summary()["phases"])[:3]
['downstream_read', 'downstream_write', 'encode']
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envoy_dissector.analysis.capture import Capture, dissect
    from envoy_dissector.analysis.findings import Finding
    from envoy_dissector.analysis.outputs.comparison import compare
    from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, PARTITION_PHASES, PHASE_COLUMNS, Milestone, Phase
    from envoy_dissector.parser.kinds import EventKind

__all__ = ["CONTRACT_COLUMNS", "PARTITION_PHASES", "PHASE_COLUMNS", "Capture", "EventKind", "Finding", "Milestone",
           "Phase", "compare", "dissect"]
#: imported on first use, so ``envoy-dissect`` (cli/) starts without polars and can handle
#: Ctrl-C during its own imports
_HOME = {"Capture": "analysis.capture", "dissect": "analysis.capture", "compare": "analysis.outputs.comparison",
         "Finding": "analysis.findings", "CONTRACT_COLUMNS": "analysis.schema", "PHASE_COLUMNS": "analysis.schema",
         "PARTITION_PHASES": "analysis.schema", "Milestone": "analysis.schema", "Phase": "analysis.schema",
         "EventKind": "parser.kinds"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"envoy_dissector.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
