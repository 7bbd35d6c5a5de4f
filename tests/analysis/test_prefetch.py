"""``stream_capture.prefetched``: the parse run ahead on a thread of its own (``dissect(prefetch=N)``; the default
reads on the analysis' thread, ``PREFETCH``)."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine.stream_capture import prefetched

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures/istio-thread/ext-authz/envoy.log.gz"


def test_every_item_arrives_in_order() -> None:
    assert list(prefetched(iter(range(50)), 2)) == list(range(50))


def test_the_producers_error_is_raised_to_the_consumer_after_what_came_before() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("bad block")

    got: list[int] = []
    with pytest.raises(ValueError, match="bad block"):
        for item in prefetched(failing(), 1):
            got.append(item)
    assert got == [1, 2]


def test_a_consumer_that_stops_early_stops_the_producer() -> None:
    made: list[int] = []

    def endless() -> Iterator[int]:
        n = 0
        while True:
            made.append(n)
            yield n
            n += 1

    before = set(threading.enumerate())
    items = prefetched(endless(), 1)
    assert next(items) == 0
    (producer,) = [t for t in set(threading.enumerate()) - before if t.name == "envoy-dissect-parse"]
    items.close()  # (the consumer's finally: the producer stops at its next put)
    producer.join(timeout=10)
    assert not producer.is_alive()
    assert len(made) <= 4  # (the queue holds one item: the producer made at most a few before it stopped)


def test_a_capture_read_ahead_is_the_capture_read_in_line() -> None:
    ahead, in_line = dissect(str(FIXTURE), prefetch=2), dissect(str(FIXTURE), prefetch=0)
    assert ahead.contract_requests.equals(in_line.contract_requests)
    assert ahead.summary() == in_line.summary()
