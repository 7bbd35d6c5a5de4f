"""``StreamingAnalysis.settle`` (follow mode, the log gone quiet): the requests that have ended are emitted without
waiting for their worker's next line, and the final analysis is the one the same lines give without it."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from envoy_dissector.analysis.engine.streaming import StreamingAnalysis
from envoy_dissector.parser.pipeline import parse

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KEEPALIVE = FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"


def _run(events: pl.DataFrame, cut: int, *, settle: bool) -> tuple[set[str], set[str], pl.DataFrame]:
    """Requests emitted after the first ``cut`` events, after settling (if asked), and the final requests."""
    emitted: set[str] = set()

    def on_finished(requests: pl.DataFrame, _phases: pl.DataFrame) -> None:
        emitted.update(requests["request_uid"].to_list())

    streaming = StreamingAnalysis(window_events=1, on_finished=on_finished, background=False)
    streaming.add(events.head(cut))
    before = set(emitted)
    if settle:
        streaming.settle()
    after = set(emitted)
    streaming.add(events.slice(cut))
    result = streaming.finish()
    return before, after, result.requests.sort("request_uid")


def test_settle_emits_the_ended_requests_and_changes_nothing_at_the_end() -> None:
    events = parse(KEEPALIVE).events
    cut = events.height // 2
    before, after, settled = _run(events, cut, settle=True)
    plain_before, plain_after, plain = _run(events, cut, settle=False)
    assert before == plain_before == plain_after
    newly = after - before
    assert newly, "settling emitted nothing"
    ended = settled.filter(pl.col("request_uid").is_in(list(newly)))
    assert ended.height == len(newly)
    assert ended["complete"].all()  # (only requests whose response ended; nothing given up)
    assert settled.equals(plain)
