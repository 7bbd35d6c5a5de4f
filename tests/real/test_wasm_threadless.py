"""Wasm VM calls on a layout without thread ids (Istio <= 1.16 text), two workers (issue 27 §5): a lab capture
with thread ids (tests/real/data/README.md) rewritten here into the old layout, its Wasm time per request set
against the placement by thread id, which is exact. Two workers' calls interleave in the rewritten log; a return
line names no context, so the context id of the call that follows a return tells which call it closes."""
from __future__ import annotations

import gzip
import re
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.capture import Capture
from envoy_dissector.analysis.stages.wasm import vm_calls

DATA = Path(__file__).resolve().parent / "data" / "wasm-stats-2-workers.istio-thread.log.gz"
KEY = ["downstream_conn_id", "stream_id"]
_THREAD_LAYOUT = re.compile(r"^(\S+\t\S+\tenvoy \S+) \S+\t(.*)\tthread=\d+$")


def _old_layout(text: str) -> str:
    """``TS<tab>LEVEL<tab>envoy LOGGER CALLER<tab>MSG<tab>thread=N`` -> ``TS<tab>LEVEL<tab>envoy LOGGER<tab>MSG``."""
    return "\n".join(_THREAD_LAYOUT.sub(r"\1\t\2", line) for line in text.splitlines()) + "\n"


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> tuple[Capture, Capture]:
    """The capture with thread ids, and the same rewritten into the old layout."""
    text = gzip.decompress(DATA.read_bytes()).decode("utf-8")
    old = tmp_path_factory.mktemp("wasm") / "old-layout.log"
    old.write_text(_old_layout(text), encoding="utf-8")
    return dissect(str(DATA)), dissect(str(old))


def test_the_rewrite_is_the_old_layout_of_two_workers(captures: tuple[Capture, Capture]) -> None:
    threaded, old = captures
    assert (threaded.format, old.format) == ("istio-thread", "istio")
    clients = threaded.requests.filter(~pl.col("internal"))
    assert clients["thread"].n_unique() == 2 and clients.height == 60
    assert old.requests.filter(~pl.col("internal")).height == 60


def test_vm_calls_of_two_workers_are_found_without_thread_ids(captures: tuple[Capture, Capture]) -> None:
    """Calls of the two workers that overlap in the log are both counted (a stream callback is never nested)."""
    threaded, old = captures
    ours, truth = vm_calls(old.events), vm_calls(threaded.events)
    assert ours.height >= 0.98 * truth.height, (ours.height, truth.height)
    assert ours.height <= truth.height


def test_wasm_time_per_request_as_placed_by_thread_id(captures: tuple[Capture, Capture]) -> None:
    threaded, old = captures
    truth = threaded.requests.filter(~pl.col("internal")).select(*KEY, truth="wasm_us")
    ours = old.requests.filter(~pl.col("internal")).select(*KEY, ours="wasm_us")
    both = truth.join(ours, on=KEY)
    assert both.height == 60
    close = (pl.col("ours") - pl.col("truth")).abs() <= pl.max_horizontal(pl.lit(20), 0.1 * pl.col("truth"))
    # (line order alone: 47 of 60, 39 ms off in all; with the context of the next call: 53, 12 ms)
    assert both.filter(close).height >= 52, both.filter(~close)
    assert both.select((pl.col("ours") - pl.col("truth")).abs().sum()).item() <= 0.2 * both["truth"].sum()
