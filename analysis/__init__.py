"""Analysis stage and public API: per-request timelines, phase attribution, event-loop model.

>>> import envoy_dissector.analysis as ed
>>> cap = ed.dissect("fixtures/istio-thread/keepalive/envoy.log.gz")
>>> sorted(cap.summary()["phases"])[:3]
['downstream_read', 'downstream_write', 'encode']
"""
from __future__ import annotations

from envoy_dissector.analysis.capture import Capture, dissect
from envoy_dissector.analysis.compare import compare
from envoy_dissector.analysis.findings import Finding
from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, PARTITION_PHASES, PHASE_COLUMNS, Milestone, Phase
from envoy_dissector.parser.kinds import EventKind

__all__ = ["CONTRACT_COLUMNS", "PARTITION_PHASES", "PHASE_COLUMNS", "Capture", "EventKind", "Finding", "Milestone",
           "Phase", "compare", "dissect"]
