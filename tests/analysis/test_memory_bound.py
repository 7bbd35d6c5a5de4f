"""Requests that never finish, connections by the million and many input files do not grow the streaming
analysis without bound (issue 33; docs/scale.md): structural checks of what a worker holds, not timings.
bench/memory_bound.py measures the peak RSS of the full-size cases."""
from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from truth import FIXTURES

from envoy_dissector.analysis import dissect
from envoy_dissector.analysis.engine.carry import carried
from envoy_dissector.analysis.engine.streaming import MARGIN_ROWS, StreamingAnalysis
from envoy_dissector.parser.pipeline import iter_parse
from envoy_dissector.parser.schema import EVENT_SCHEMA

#: five windows of one-line requests: an engine without the bounds holds up to N rows (it fails the first check)
N = 100_000
MAX_OPEN = 2_000
MAX_CARRIED = 3_000
WINDOW = 20_000
LINE = ('2026-11-22T01:{m:02d}:{s:02d}.{us:06d}Z\tdebug\tenvoy http source/common/http/conn_manager_impl.cc:506\t'
        '[Tags: "ConnectionId":"{conn}"] new stream\tthread={thread}\n')


def _one_line_requests(path: Path, n: int) -> Path:
    """``n`` `new stream` records, each on a connection of its own, 2 µs apart on two workers: none ends, none
    is idle for 5 s of log time."""
    path.write_text("".join(LINE.format(m=9 + (i * 2) // 60_000_000, s=((i * 2) // 1_000_000) % 60,
                                        us=(i * 2) % 1_000_000, conn=i + 1, thread=100 + (i & 1))
                            for i in range(n)))
    return path


def test_open_requests_are_given_up_as_cut_beyond_the_bound(tmp_path: Path) -> None:
    capture = _one_line_requests(tmp_path / "one-line.log", N)
    streaming = StreamingAnalysis(window_events=WINDOW, max_open=MAX_OPEN, max_carried=MAX_CARRIED, background=False)
    held_rows = held_connections = emitted_before_end = 0
    merged_facts: list[int] = []

    def count(requests: pl.DataFrame, phases: pl.DataFrame) -> None:
        nonlocal emitted_before_end
        emitted_before_end += requests.height

    streaming.on_finished = count
    run = iter_parse(str(capture), block_bytes=1 << 18)
    for chunk in run:
        streaming.add(chunk.events)
        for worker in streaming._workers.values():
            if worker.window is not None:
                held_rows = max(held_rows, worker.window.height)
            if worker.carry is not None:
                held_connections = max(held_connections, worker.carry["conn_id"].n_unique())
        if len(streaming._facts) == 1:  # just merged: the per-connection TLS facts
            merged_facts.append(streaming._facts[0].height)
    before_finish = emitted_before_end
    result = streaming.finish()
    # what a worker kept after each step: its open requests (one line each), the lines before them, the carry
    assert 0 < held_rows <= MAX_OPEN + MARGIN_ROWS
    assert 0 < held_connections <= MAX_CARRIED
    assert merged_facts and max(merged_facts) <= MAX_CARRIED  # no TLS here: only the connections seen last
    # the requests beyond the bound left while the capture was read, as cut requests; none was lost or doubled
    assert before_finish >= N - 2 * (WINDOW + MAX_OPEN + MARGIN_ROWS)
    assert result.requests.height == N == result.requests["request_uid"].n_unique()
    assert not result.requests["complete"].any()
    assert set(result.requests["outcome"].unique()) == {"cut by the capture"}
    note = [n for n in result.notes if "given up unfinished" in n]
    assert note and int(note[0].split()[0]) >= before_finish - 2 * WINDOW
    assert run.diagnostics.lines_read == N


def test_the_bound_leaves_ordinary_captures_alone() -> None:
    """Far below the bound nothing is given up: the streamed capture equals the whole-file one."""
    log = FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz"
    streamed = dissect(str(log), window_events=500, block_bytes=1 << 16)  # (13 blocks, windows of 500 events)
    assert not [n for n in streamed.notes if "given up" in n]
    whole = dissect(str(log))
    assert streamed.requests.sort("request_uid").equals(whole.requests.sort("request_uid"))


def test_carry_keeps_the_connections_seen_last() -> None:
    rows = 50
    columns = ("origin", "conn_id", "thread", "kind", "events", "event", "logger")
    dropped = pl.DataFrame({"origin": ["p"] * rows, "conn_id": list(range(rows)), "thread": [1] * rows,
                            "kind": ["new_stream"] * rows, "events": [None] * rows, "event": [None] * rows,
                            "logger": ["http"] * rows}, schema={c: EVENT_SCHEMA[c] for c in columns})
    kept = carried(dropped, max_connections=10)
    assert kept["conn_id"].to_list() == list(range(40, 50))
    assert carried(dropped, max_connections=100).height == rows


@pytest.fixture
def small_files(tmp_path: Path) -> list[Path]:
    lines = gzip.decompress((FIXTURES / "istio-thread" / "keepalive" / "envoy.log.gz").read_bytes()).splitlines(
        keepends=True)
    files = []
    for i in range(12):
        path = tmp_path / f"proxy-{i:02d}.log"
        path.write_bytes(b"".join(lines[i * 150:(i + 2) * 150]))
        files.append(path)
    return files


def test_many_inputs_are_analysed_one_after_another(small_files: list[Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A source's workers are finished when the next source begins: at no time do the workers of two files
    wait side by side; and the result is the one of the default blocks."""
    live: list[int] = []
    add = StreamingAnalysis.add

    def watched(self: StreamingAnalysis, events: pl.DataFrame) -> None:
        add(self, events)
        live.append(len({origin for origin, _ in self._workers}))

    monkeypatch.setattr(StreamingAnalysis, "add", watched)
    streamed = dissect([str(p) for p in small_files], block_bytes=1 << 14)  # (each file of ~40-63 KB in 3-4 blocks)
    assert len(live) > len(small_files) and max(live) == 1
    whole = dissect([str(p) for p in small_files])
    columns = sorted(whole.requests.columns)
    assert streamed.requests.select(columns).sort("request_uid").equals(
        whole.requests.select(columns).sort("request_uid"))


@pytest.mark.parametrize("rel", ["istio-thread/workers", "istio-thread/lua-cpu", "istio-thread/http2"])
def test_event_loop_queueing_is_the_same_in_blocks_of_any_size(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The event-loop model looks its wait points up a block of rows at a time (memory bounded by a block): any
    block size gives the same queues, windows and phase rows, in the same order."""
    from envoy_dissector.analysis.stages import loop

    log = FIXTURES / rel / "envoy.log.gz"
    whole = dissect(str(log))
    monkeypatch.setattr(loop, "QUEUE_ROWS", 7)
    blocks = dissect(str(log))
    assert whole.queueing.height > 7, "the fixture must have queueing windows in more than one block"
    assert_frame_equal(blocks.requests, whole.requests)
    assert_frame_equal(blocks.queueing, whole.queueing)
    assert_frame_equal(blocks.phases, whole.phases)


def test_conclude_gives_the_same_frames_for_a_requests_frame_of_many_chunks() -> None:
    """``conclude`` owns its requests frame and makes it one chunk per column a column at a time: a frame of many
    parts (as the spill gives back) concludes to the same frames as one of one chunk."""
    from envoy_dissector.analysis.engine.pipeline import conclude, split_restarts, stage
    from envoy_dissector.analysis.stages.tls import handshakes

    events = pl.concat([c.events for c in iter_parse(str(FIXTURES / "istio-thread" / "workers" / "envoy.log.gz"))])
    events, _ = split_restarts(events.filter(pl.col("ts_us").is_not_null()).cast(EVENT_SCHEMA))  # type: ignore[arg-type]
    staged = stage(events, [])
    shakes = handshakes(staged.events)
    n = staged.requests.height
    parts = pl.concat([staged.requests.slice(at, 5) for at in range(0, n, 5)], rechunk=False)
    assert parts["request_uid"].n_chunks() > 1
    one = conclude(staged.requests.rechunk(), staged.phases, staged.loop, shakes, ())
    many = conclude(parts, staged.phases, staged.loop, shakes, ())
    assert all(many.requests[c].n_chunks() == 1 for c in many.requests.columns)
    assert_frame_equal(many.requests, one.requests)
    assert_frame_equal(many.queueing, one.queueing)
    assert_frame_equal(many.phases, one.phases)


def _streamed(log: Path, spill_budget: int) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    streaming = StreamingAnalysis(window_events=WINDOW, max_open=MAX_OPEN, spill_budget=spill_budget, background=False)
    for chunk in iter_parse(str(log), block_bytes=1 << 18):
        streaming.add(chunk.events)
    result = streaming.finish()
    return result.requests, result.phases, result.queueing


def test_columns_of_one_value_stay_one_value_to_the_end(tmp_path: Path) -> None:
    """A one-line request leaves most of its columns null: spilled and concluded, each such column is one value
    (spill.constant_columns), not one a row, and the frames are those of the capture kept in memory."""
    log = _one_line_requests(tmp_path / "one-line.log", 20_000)
    spilled = _streamed(log, spill_budget=0)
    held = _streamed(log, spill_budget=1 << 40)
    for ours, theirs in zip(spilled, held, strict=True):
        assert_frame_equal(ours, theirs)
    requests = spilled[0]
    # (counted by an expression: ``requests[c]`` would materialise a constant column, and keep it)
    nulls = [c for c, n in requests.null_count().row(0, named=True).items() if n == requests.height]
    assert len(nulls) >= 30
    assert [c for c in nulls if requests.select(c).estimated_size() >= 1024] == []
    assert requests.select("b0").estimated_size() >= 8 * requests.height  # (a column of many values: one a row)


def _integer_bytes_held(frame: pl.DataFrame) -> int:
    """Bytes of the distinct Arrow buffers under ``frame``'s integer columns of more than one value (a buffer two
    columns share is counted once; a column of one value holds no buffer of its rows, spill.constant_columns)."""
    from envoy_dissector.analysis.engine.spill import constant_columns

    fixed = constant_columns(frame)
    buffers = {buffer.address: buffer.size
               for name, dtype in frame.schema.items() if dtype.is_integer() and name not in fixed
               for buffer in frame[name].to_arrow().buffers() if buffer is not None}
    return sum(buffers.values())


@pytest.mark.parametrize("spill_budget", [0, 1 << 40])
def test_columns_of_equal_values_share_one_buffer_to_the_end(tmp_path: Path, spill_budget: int) -> None:
    """A one-line request's 14 time columns hold one timestamp and its connection id its line number: read back
    from the spill and put in order by ``conclude``, they are one buffer each (spill.sharing_equal_columns), so a
    request holds the three integers it has (thread, connection, time), not 17 (≈ 1.1 GiB at 10 M)."""
    log = _one_line_requests(tmp_path / "one-line.log", 20_000)
    requests = _streamed(log, spill_budget=spill_budget)[0]
    times = ["ds_rx_beg_us", "first_ts", "last_ts", "life_start_us", *(f"b{i}" for i in range(10))]
    assert requests.select(pl.all_horizontal(pl.col(c) == pl.col("first_ts") for c in times).all()).item()
    assert _integer_bytes_held(requests) <= 3 * 8 * requests.height


@pytest.mark.parametrize("origins", [["one.log"], ["a.log", "b.log"]])
def test_worker_stats_group_by_the_keys_that_vary(origins: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers' table groups the requests by origin and thread; the one origin of a capture of one file is
    not a key (hashing its name a row at a time and the connections' distinct count per key: 0.9 GiB at 10 M
    one-line requests), and the table is the one of the plain group_by."""
    from envoy_dissector.analysis.stages.loop import worker_stats

    n = 600
    requests = pl.DataFrame({
        "origin": [origins[i % len(origins)] for i in range(n)], "thread": [100 + i % 3 for i in range(n)],
        "internal": [i % 50 == 0 for i in range(n)], "complete": [i % 4 != 0 for i in range(n)],
        "downstream_conn_id": [i // 2 for i in range(n)], "life_start_us": [i * 10 for i in range(n)],
        "life_end_us": [i * 10 + 7 for i in range(n)], "queue_before_read_us": [(i * 37) % 2_000 for i in range(n)],
        "loop_queue_us": [None if i % 5 else i for i in range(n)]})
    loop = pl.DataFrame({"origin": [o for o in origins for _ in range(3)], "thread": [100, 101, 102] * len(origins),
                         "start_us": [0, 5, 9] * len(origins), "end_us": [3_000, 4_000, 6_500] * len(origins)})
    keys: list[list[str]] = []
    group_by = pl.DataFrame.group_by

    def spy(frame: pl.DataFrame, *by: object, **options: object):  # type: ignore[no-untyped-def]
        if frame.height > 100:  # (the requests', not the few loop slices')
            keys.append([str(k) for k in (by[0] if len(by) == 1 and isinstance(by[0], list) else by)])
        return group_by(frame, *by, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(pl.DataFrame, "group_by", spy)
    table = worker_stats(loop, requests)
    assert keys and all(("origin" in k) == (len(origins) > 1) for k in keys)
    monkeypatch.setattr(pl.DataFrame, "group_by", group_by)
    client = requests.filter(~pl.col("internal"))
    work = client.group_by("origin", "thread").agg(requests=pl.len(),
                                                    connections=pl.col("downstream_conn_id").n_unique())
    expected = work.sort("origin", "thread").select("origin", "thread", "requests", "connections")
    assert_frame_equal(table.select(expected.columns), expected, check_dtypes=False)
    window = client.group_by("origin").agg(w=pl.col("life_end_us").max() - pl.col("life_start_us").min())
    assert table.join(window, on="origin").select((pl.col("window_us") == pl.col("w")).all()).item()


def test_the_previous_request_on_a_connection_is_its_neighbour(monkeypatch: pytest.MonkeyPatch) -> None:
    """The event-loop model sorts the requests by origin and connection first and reads a request's predecessor
    on its connection from the row before (no window over the connections: hashing 10 M of them, one request
    each, took 28 s and 200 MiB for 5 M); the queues are those of the fixture (test_event_loop_* above)."""
    from envoy_dissector.analysis.stages import loop

    partitions: list[object] = []
    over = pl.Expr.over

    def spy(expr: pl.Expr, *by: object, **options: object) -> pl.Expr:
        partitions.append(by)
        return over(expr, *by, **options)  # type: ignore[arg-type]

    from envoy_dissector.analysis.engine.pipeline import split_restarts, stage
    from envoy_dissector.analysis.stages.tls import downstream_waits, handshakes

    events = pl.concat([c.events for c in iter_parse(str(FIXTURES / "istio-thread" / "workers" / "envoy.log.gz"))])
    events, _ = split_restarts(events.filter(pl.col("ts_us").is_not_null()).cast(EVENT_SCHEMA))  # type: ignore[arg-type]
    staged = stage(events, [])
    phased = downstream_waits(staged.requests, handshakes(staged.events))[0]
    monkeypatch.setattr(pl.Expr, "over", spy)
    requests, queueing = loop.loop_queue(phased, staged.loop)
    assert partitions and not [by for by in partitions if "downstream_conn_id" in str(by)]
    assert queueing.height > 0 and requests["queue_before_read_us"].sum() > 0


def _order_frame(origins: list[str]) -> pl.DataFrame:
    """Rows of ``REQUEST_ORDER``'s columns with ties on every key but the uid (and nulls), in scrambled order."""
    n = 400
    return pl.DataFrame({
        "origin": [origins[i % len(origins)] for i in range(n)],
        "ds_rx_beg_us": [None if i % 7 == 0 else (i * 37) % 11 for i in range(n)],
        "life_start_us": [(i * 13) % 5 for i in range(n)],
        "first_line_no": [(i * 29) % 3 for i in range(n)],
        "request_uid": [f"u{(i * 71) % n:04d}" for i in range(n)],
    })


@pytest.mark.parametrize("origins", [["one.log"], ["a.log", "b.log"]])
@pytest.mark.parametrize("unique", [None, "life_start_us", "ds_rx_beg_us"])
def test_requests_are_ordered_on_the_columns_that_vary(origins: list[str], unique: str | None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``conclude`` sorts the requests on ``REQUEST_ORDER``'s columns that vary, on the first alone while it has
    no ties (a flood of one-line requests: one sort of one column), the uid only where rows tie on the others
    (text keys are encoded into every row of a sort: ~50 bytes a request each, at the peak), and the order is
    the one of every column: with ties on every key but the uid, and without."""
    from envoy_dissector.analysis.engine.pipeline import REQUEST_ORDER, request_order
    from envoy_dissector.analysis.engine.spill import constant_columns

    frame = _order_frame(origins)
    if unique:
        frame = frame.with_columns(pl.int_range(pl.len()).reverse().alias(unique) * 3)
    fixed = constant_columns(frame)
    assert ("origin" in fixed) == (len(origins) == 1)
    every_column = frame.select(pl.arg_sort_by(REQUEST_ORDER, nulls_last=True)).to_series()
    sorted_on: list[list[str]] = []
    arg_sort_by = pl.arg_sort_by

    def spy(keys: list[str], **options: bool) -> pl.Expr:
        sorted_on.append(list(keys))
        return arg_sort_by(keys, **options)

    monkeypatch.setattr(pl, "arg_sort_by", spy)
    assert request_order(frame, fixed).to_list() == every_column.to_list()
    varying = [k for k in REQUEST_ORDER if k not in fixed]
    first_unique = unique == varying[0]
    expected = [varying[:1]] if first_unique else [varying[:1], varying[:-1]] if unique else [
        varying[:1], varying[:-1], varying]
    assert sorted_on == expected


def test_a_request_without_its_read_event_has_no_queueing_at_all(tmp_path: Path) -> None:
    """Its queueing is unmeasured (null, docs/output.md): no windows, no loop_queue phase rows either (they held
    a window per wait point a request: the flood's largest frame after the requests)."""
    cap = dissect(_one_line_requests(tmp_path / "one-line.log", 2_000))
    assert cap.requests.height == 2_000
    assert cap.requests["unmeasured_phases"].str.contains("downstream_read").all()
    assert cap.requests["loop_queue_us"].null_count() == cap.requests.height
    assert cap.queueing.height == 0
    assert cap.phases.filter(pl.col("phase") == "loop_queue").height == 0


def test_the_waits_of_a_request_without_its_read_event_are_not_looked_up(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its queueing is unmeasured whatever the lookups find, so the event-loop model does not look its five wait
    points up (five lookup rows a request and their queues: 1.5 GiB at 10 M one-line requests); a capture that
    mixes such requests with measured ones is the fixtures' (tests/analysis/test_loop.py)."""
    from envoy_dissector.analysis.stages import loop

    looked_up: list[int] = []
    queued_at = loop._queued_at

    def spy(block: pl.DataFrame, runs: pl.DataFrame, slices: pl.DataFrame) -> pl.DataFrame:
        looked_up.append(block.height)
        return queued_at(block, runs, slices)

    monkeypatch.setattr(loop, "_queued_at", spy)
    cap = dissect(_one_line_requests(tmp_path / "one-line.log", 2_000))
    assert cap.requests.height == 2_000 and cap.queueing.height == 0
    assert looked_up and sum(looked_up) == 0
    assert cap.requests.select(pl.col("loop_queue_us", "queue_before_read_us").null_count()).row(0) == (2_000, 2_000)


@pytest.mark.parametrize("uid_rows", [1 << 20, 3_000])
def test_the_uid_is_made_once_the_requests_are_in_order(tmp_path: Path, uid_rows: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's uid is ~70 bytes of text (the origin's path, the connection, the stream): the requests are read
    back from the spill without it and ``conclude``'s copies and sorts run without it; it is made from the columns
    it is made of once they are in order (a block of ``UID_ROWS`` at a time, one chunk), the same text the
    requests stage made (the fixtures' outputs: tests/analysis/test_streaming.py)."""
    from envoy_dissector.analysis.engine import pipeline
    from envoy_dissector.analysis.engine.spill import Spill

    read_back: list[str] = []
    gathered: list[str] = []
    take, in_order_of = Spill.take, pipeline.in_order_of

    def spy_take(spill: Spill, kind: str, leave_out: tuple[str, ...] = ()) -> pl.DataFrame:
        out = take(spill, kind, leave_out)
        read_back.extend(out.columns if kind == "requests" else [])
        return out

    def spy_order(columns: list[pl.Series], order: pl.Series) -> list[pl.Series]:
        gathered.extend(column.name for column in columns)
        return in_order_of(columns, order)

    monkeypatch.setattr(Spill, "take", spy_take)
    monkeypatch.setattr(pipeline, "in_order_of", spy_order)
    monkeypatch.setattr(pipeline, "UID_ROWS", uid_rows)
    log = _one_line_requests(tmp_path / "one-line.log", 10_000)
    requests = _streamed(log, spill_budget=0)[0]
    assert "thread" in read_back and "request_uid" not in read_back
    assert "life_start_us" in gathered and "request_uid" not in gathered
    assert requests["request_uid"].to_list() == [f"{log}:C{i}:S?{i}" for i in range(1, 10_001)]
    assert requests["request_uid"].n_chunks() == 1


def test_the_sidecar_share_joins_the_uid_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``sidecar_added_us`` takes each request's queueing inside its upstream wait by its uid: the uid alone is
    joined (a join of the wide frame copies every column of millions of rows), and nothing when no window of
    upstream wait was found; the values are those of the wide frame's join."""
    from envoy_dissector.analysis.stages import cost

    cap = dissect(FIXTURES / "istio-thread" / "workers" / "envoy.log.gz")
    requests = cap.requests.drop("sidecar_added_us")
    assert cap.queueing.filter(pl.col("where") == cost.UPSTREAM_WAIT_QUEUE).height > 0
    widths: list[int] = []
    join = pl.DataFrame.join

    def spy(frame: pl.DataFrame, *args: object, **kwargs: object) -> pl.DataFrame:
        widths.append(frame.width)
        return join(frame, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pl.DataFrame, "join", spy)
    added = cost.with_sidecar_added(requests, cap.queueing)
    assert widths == [1]
    assert_frame_equal(added, cap.requests.select(added.columns))
    assert added["sidecar_added_us"].null_count() < added.height
    widths.clear()
    none = cost.with_sidecar_added(requests, cap.queueing.filter(pl.col("where") != cost.UPSTREAM_WAIT_QUEUE))
    assert widths == []
    back = cap.queueing.filter(pl.col("where") == cost.UPSTREAM_WAIT_QUEUE).select("request_uid").unique()
    unchanged = ~pl.col("request_uid").is_in(back["request_uid"].implode())
    assert_frame_equal(none.filter(unchanged), added.filter(unchanged))


def test_a_flood_of_cut_requests_has_its_uids_made_where_they_are_read(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The uids' text (the origin's path on every row: 0.8 GiB for 10 M one-line requests) is not made whole for
    the ``-o`` writers, the report or the summary: the writers stream the rows out and make it a slice at a time,
    the report and the summary read other columns (and the uids of the few requests they list); the capture
    makes it on first access of ``Capture.requests``, the same text and columns as before. The files hold the
    bytes the whole frame's writers give."""
    from envoy_dissector.analysis.engine.uids import UidsToMake
    from envoy_dissector.analysis.outputs.export import summary_json, write
    from envoy_dissector.analysis.outputs.report import render
    from envoy_dissector.analysis.schema import REQUEST_FRAME_SCHEMA

    made: list[int] = []
    make = UidsToMake.made

    def spy(pending: UidsToMake) -> pl.DataFrame:
        made.append(pending.rows.height)
        return make(pending)

    monkeypatch.setattr(UidsToMake, "made", spy)
    n = 3_000
    log = _one_line_requests(tmp_path / "one-line.log", n)
    cap = dissect(str(log))
    outs = {suffix: tmp_path / f"requests{suffix}" for suffix in (".parquet", ".csv", ".jsonl")}
    for out in outs.values():
        write(cap, str(out), columns="all")
    report, summary = render(cap), summary_json(cap)
    assert made == []
    assert "partial requests (first 20)" in report and summary["partial_requests"][0]["request_uid"] == f"{log}:C1:S?1"
    uids = [f"{log}:C{i}:S?{i}" for i in range(1, n + 1)]
    requests = cap.requests
    assert made == [n]
    assert requests.schema == pl.Schema(REQUEST_FRAME_SCHEMA)
    assert requests["request_uid"].to_list() == uids and requests["request_uid"].n_chunks() == 1
    assert cap.requests is requests  # (made once, kept)
    assert pl.read_parquet(outs[".parquet"])["request_uid"].to_list() == uids
    whole = tmp_path / "whole"
    requests.write_parquet(whole)
    assert outs[".parquet"].read_bytes() == whole.read_bytes()
    requests.write_csv(whole)
    assert outs[".csv"].read_bytes() == whole.read_bytes()
    requests.write_ndjson(whole)
    assert outs[".jsonl"].read_bytes() == whole.read_bytes()
    made_first = dataclasses.replace(cap, requests=requests, _cache={})  # (every reader given the made uids)
    assert render(made_first) == report and summary_json(made_first) == summary
