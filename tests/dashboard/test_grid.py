"""grid: AG Grid filter/sort models and quick search applied in polars; paging never ships a whole capture."""
from __future__ import annotations

import polars as pl
import pytest

from envoy_dissector.analysis import CONTRACT_COLUMNS, dissect
from envoy_dissector.dashboard import grid


@pytest.fixture(scope="module")
def requests() -> pl.DataFrame:
    return dissect("fixtures/istio-thread/workers/envoy.log.gz").requests


def big(n: int = 1_000_000) -> pl.DataFrame:
    return pl.DataFrame({
        "request_uid": [f"u{i}" for i in range(n)], "path": ["/a", "/b", "/ready", "/api/x"] * (n // 4),
        "status": [200, 503, 200, 404] * (n // 4), "total_us": list(range(n)),
        "downstream_conn_id": [i % 100 for i in range(n)], "upstream_conn_id": [None] * n,
        "x_request_id": [None] * n, "method": ["GET"] * n, "authority": ["svc"] * n, "protocol": ["HTTP/1.1"] * n,
        "origin": ["o"] * n,
    })


def test_grid_frame_has_the_contract_columns_and_rows_text_stream_ids(requests):
    frame = grid.grid_frame(requests)
    assert tuple(frame.columns) == CONTRACT_COLUMNS
    rows = grid.Pager().rows("d", requests, {"startRow": 0, "endRow": 5})["rowData"]
    assert rows and all(isinstance(r["stream_id"], str) for r in rows)  # > 2^53: JavaScript numbers would round it


def test_column_defs_cover_the_contract():
    defs = grid.column_defs()
    assert {d["field"] for d in defs} == set(CONTRACT_COLUMNS)
    by = {d["field"]: d for d in defs}
    assert by["total_us"]["filter"] == "agNumberColumnFilter" and not by["total_us"]["hide"]
    assert by["path"]["filter"] == "agTextColumnFilter"
    assert by["stream_id"]["filter"] == "agTextColumnFilter"


def test_text_and_number_filters():
    f = big(400)
    assert grid.apply_filter_model(f, {"path": {"filterType": "text", "type": "contains", "filter": "A"}}).height == 300
    assert grid.apply_filter_model(f, {"path": {"filterType": "text", "type": "equals", "filter": "/b"}}).height == 100
    starts = {"path": {"filterType": "text", "type": "startsWith", "filter": "/api"}}
    assert grid.apply_filter_model(f, starts).height == 100
    not_contains = {"path": {"filterType": "text", "type": "notContains", "filter": "a"}}
    assert grid.apply_filter_model(f, not_contains).height == 100
    m = {"total_us": {"filterType": "number", "type": "inRange", "filter": 10, "filterTo": 19}}
    assert grid.apply_filter_model(f, m)["total_us"].to_list() == list(range(10, 20))
    m = {"status": {"filterType": "number", "operator": "OR", "conditions": [
        {"filterType": "number", "type": "equals", "filter": 503},
        {"filterType": "number", "type": "equals", "filter": 404}]}}
    assert set(grid.apply_filter_model(f, m)["status"].to_list()) == {503, 404}
    m = {"status": {"filterType": "number", "type": "greaterThan", "filter": 200},
         "path": {"filterType": "text", "type": "endsWith", "filter": "x"}}
    assert set(grid.apply_filter_model(f, m)["status"].to_list()) == {404}
    assert grid.apply_filter_model(f, {"upstream_conn_id": {"filterType": "number", "type": "blank"}}).height == 400
    # junk never raises: unknown columns and bad values are ignored
    junk = {"nope": {"type": "equals", "filter": 1},
            "status": {"filterType": "number", "type": "equals", "filter": "x"}}
    assert grid.apply_filter_model(f, junk).height == 400


def test_sort_model():
    f = big(400)
    out = grid.apply_sort_model(f, [{"colId": "status", "sort": "desc"}, {"colId": "total_us", "sort": "asc"}])
    assert out["status"][0] == 503 and out["total_us"][0] == 1


def test_quick_search(requests):
    frame = grid.grid_frame(requests)
    conn = int(frame.filter(pl.col("upstream_conn_id").is_not_null())["upstream_conn_id"][0])
    on_conn = grid.query(frame, search=f"C{conn}")
    assert on_conn.height >= 1
    assert all(d == conn or u == conn for d, u in on_conn.select("downstream_conn_id", "upstream_conn_id").iter_rows())
    assert grid.query(frame, search="/ready").height == 1
    assert grid.query(frame, search="200").height == frame.filter(pl.col("status") == 200).height
    xid = frame.filter(pl.col("x_request_id").is_not_null())["x_request_id"][0]
    assert grid.query(frame, search=xid.upper()).height == 1


def test_pager_serves_blocks_of_a_million_rows_from_one_query(monkeypatch):
    """The filter and sort run once per grid state; the next block is a slice of the cached result (how long
    that takes is bench/'s business)."""
    f = big()
    pager = grid.Pager()
    queries = []
    real_positions = grid.positions
    monkeypatch.setattr(grid, "positions", lambda *a, **kw: queries.append(kw) or real_positions(*a, **kw))
    req = {"startRow": 0, "endRow": 100, "sortModel": [{"colId": "total_us", "sort": "desc"}],
           "filterModel": {"path": {"filterType": "text", "type": "equals", "filter": "/b"}}}
    first = pager.rows("big", f, req)
    assert first["rowCount"] == 250_000 and len(first["rowData"]) == 100
    assert first["rowData"][0]["total_us"] == 999_997
    nxt = pager.rows("big", f, {**req, "startRow": 100, "endRow": 200})
    assert nxt["rowData"][0]["total_us"] == 999_997 - 400
    assert len(queries) == 1, "the next block is a slice of the cached result"
    pager.rows("big", f, {**req, "sortModel": [{"colId": "total_us", "sort": "asc"}]})
    assert len(queries) == 2  # another grid state is queried
    # a page is capped whatever the grid asks for
    assert len(pager.rows("big", f, {"startRow": 0, "endRow": 10**9})["rowData"]) == 1000


def _or_of(values: list[str]) -> dict:
    return {"path": {"filterType": "text", "operator": "OR", "conditions": [
        {"filterType": "text", "type": "equals", "filter": v} for v in values]}}


def test_or_conditions_up_to_the_bound_match_their_union():
    f = big(400)
    values = ["/a", "/b", "/nothing", "/api/x", "/x", "/y", "/z", "/q", "/r", "/s"][: grid.MAX_CONDITIONS]
    out = grid.apply_filter_model(f, _or_of(values))
    assert set(out["path"].to_list()) == {"/a", "/b", "/api/x"} and out.height == 300
    and_model = {"path": {**_or_of(["/a", "/b"])["path"], "operator": "AND"}}
    assert grid.apply_filter_model(f, and_model).height == 0


def test_more_conditions_or_longer_text_than_the_bounds_are_refused():
    f = big(40)
    with pytest.raises(grid.FilterRefused, match="conditions"):
        grid.apply_filter_model(f, _or_of([f"/p{i}" for i in range(grid.MAX_CONDITIONS + 1)]))
    long = "x" * (grid.MAX_FILTER_CHARS + 1)
    with pytest.raises(grid.FilterRefused, match="characters"):
        grid.apply_filter_model(f, {"path": {"filterType": "text", "type": "contains", "filter": long}})
    with pytest.raises(grid.FilterRefused, match="quick search"):
        grid.query(f, search=long)
    with pytest.raises(grid.FilterRefused):
        grid.Pager().rows("d", f, {"startRow": 0, "endRow": 10, "filterModel": _or_of(["/a"] * 2500)})


def test_a_sort_model_naming_a_column_many_times_sorts_by_it_once():
    f = big(40)
    out = grid.apply_sort_model(f, [{"colId": "total_us", "sort": "desc"}] * 5000 + [{"colId": "status"}])
    assert out["total_us"].to_list() == list(range(39, -1, -1))


def test_client_requests_come_first_by_default(requests):
    frame = grid.grid_frame(requests)
    assert grid.query(frame)["internal"].to_list() == requests["internal"].to_list()  # (no copy, no reorder)
    frame = pl.DataFrame(grid.Pager().rows("d", requests, {"startRow": 0, "endRow": 1000})["rowData"])
    internal = frame["internal"].to_list()
    assert any(internal) and not internal[0]
    assert internal == sorted(internal), "every client request before the first internal one"
    clients = requests.filter(~pl.col("internal"))["request_uid"].to_list()
    assert frame["request_uid"].to_list()[: len(clients)] == clients, "each group in capture order"


def test_a_page_is_the_querys_rows_and_the_cache_holds_positions_not_rows():
    f = big(5000)
    req = {"startRow": 100, "endRow": 300, "sortModel": [{"colId": "status", "sort": "desc"}, {"colId": "total_us"}],
           "filterModel": {"path": {"filterType": "text", "operator": "OR", "conditions": [
               {"filterType": "text", "type": "equals", "filter": "/a"},
               {"filterType": "text", "type": "startsWith", "filter": "/api"}]}}}
    pager = grid.Pager()
    page = pager.rows("d", f, req, search="svc")
    want = grid.query(grid.grid_frame(f), filter_model=req["filterModel"], sort_model=req["sortModel"], search="svc")
    assert page["rowCount"] == want.height > 300
    assert [r["total_us"] for r in page["rowData"]] == want["total_us"].slice(100, 200).to_list()
    (held,) = pager._cache.values()
    assert held is not None and held.len() == want.height and held.dtype.is_integer()  # positions, not a frame copy
