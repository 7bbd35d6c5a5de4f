"""``StreamingAnalysis.settle`` (follow mode, the log gone quiet): the requests that have ended are emitted without
waiting for their worker's next line, and the final analysis is the one the same lines give without it."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

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


@pytest.mark.parametrize("window_events", [1, 1000, 200_000])
def test_settling_again_and_again_never_emits_a_request_twice(window_events: int) -> None:
    """A followed log that goes quiet many times (a settle after every burst): each request is emitted once,
    and the final requests are the same ones the lines give without settling (a window not yet cut once
    forgot what a settle had emitted, and emitted it again)."""
    events = parse(FIXTURES / "istio-thread" / "http2" / "envoy.log.gz").events
    counts: dict[str, int] = {}

    def on_finished(requests: pl.DataFrame, _phases: pl.DataFrame) -> None:
        for uid in requests["request_uid"].to_list():
            counts[uid] = counts.get(uid, 0) + 1

    streaming = StreamingAnalysis(window_events=window_events, on_finished=on_finished, background=False)
    cuts = [events.height * k // 7 for k in range(1, 7)] + [events.height]
    done = 0
    for cut in cuts:
        streaming.add(events.slice(done, cut - done))
        done = cut
        streaming.settle()
    settled = streaming.finish().requests
    plain = StreamingAnalysis(background=False)
    plain.add(events)
    expected = plain.finish().requests
    assert settled["request_uid"].is_unique().all()
    assert sorted(settled["request_uid"]) == sorted(expected["request_uid"])
    assert all(n == 1 for n in counts.values()) and len(counts) == expected.height
