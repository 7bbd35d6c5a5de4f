"""The requests table: AG Grid's infinite row model served from a polars frame.

The grid asks for rows ``startRow..endRow`` with its ``sortModel`` and ``filterModel``; filtering,
searching and sorting run in polars here, and only the requested block (100 rows) goes to the
browser, so a million requests page as fast as a hundred. The row positions a filter and sort select are
cached per (dataset, filter, sort, search) — 4 bytes a row, not a copy of the frame — so scrolling gathers a
block of rows.

>>> import polars as pl
>>> f = pl.DataFrame({"path": ["/a", "/b", "/ab"], "status": [200, 503, 200]})
>>> apply_filter_model(f, {"status": {"filterType": "number", "type": "equals", "filter": 200}})["path"].to_list()
['/a', '/ab']
>>> search_expr("C12") is not None
True
"""
from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any

import polars as pl

from envoy_dissector.analysis.schema import CONTRACT_COLUMNS, MILESTONE_COLUMNS, REQUEST_SCHEMA

BLOCK_ROWS = 100
#: columns shown by default (the rest of the contract can be shown from the column menu)
VISIBLE: tuple[str, ...] = (
    "method", "path", "status", "total_us", "envoy_duration_us", "loop_queue_us", "queue_before_read_us", "thread",
    "downstream_conn_id", "upstream_conn_id",
    "upstream_attempts", "complete", "internal", "authority", "protocol", "downstream_read_us", "header_parse_us",
    "filter_chain_us", "router_us", "upstream_connect_us", "upstream_send_us", "upstream_wait_us",
    "response_parse_us", "encode_us", "downstream_write_us", "x_request_id",
)
#: columns the quick search looks into (substring, case-insensitive)
SEARCHED: tuple[str, ...] = ("request_uid", "x_request_id", "method", "authority", "path", "protocol", "origin")
NUMERIC = (pl.Int64, pl.Int32, pl.UInt32, pl.Float64)
#: conditions one column's filter may hold (the grid's own filter UI offers 2); more is refused, not truncated
MAX_CONDITIONS = 10
#: characters of one filter value or of the quick search
MAX_FILTER_CHARS = 500
_CONN = re.compile(r"^\s*C(\d+)\s*$", re.IGNORECASE)
_STATUS = re.compile(r"^\s*(\d{3})\s*$")


def grid_frame(requests: pl.DataFrame) -> pl.DataFrame:
    """The output-contract columns the grid shows (the columns shared, not copied; the rows in capture order:
    ``positions`` puts client requests first)."""
    return requests.select(c for c in CONTRACT_COLUMNS if c in requests.columns)


#: a duration or count with thousands separators (ids, status codes and epoch milestones are written as they are)
GROUPED_NUMBER = {"function": "params.value == null ? '' : Number(params.value).toLocaleString('en-US')"}


def header_name(column: str) -> str:
    """A header that can wrap: words instead of underscores, the unit apart.

    >>> header_name("queue_before_read_us"), header_name("x_request_id")
    ('queue before read (µs)', 'x request id')
    """
    words = column.removesuffix("_us").replace("_", " ")
    return f"{words} (µs)" if column.endswith("_us") else words


def column_defs() -> list[dict[str, Any]]:
    """AG Grid column definitions for the contract columns (the column name itself in the header's tooltip)."""
    defs: list[dict[str, Any]] = []
    for name in CONTRACT_COLUMNS:
        dtype = REQUEST_SCHEMA[name]
        numeric = isinstance(dtype, pl.Int64) and name != "stream_id"
        d: dict[str, Any] = {
            "field": name, "headerName": header_name(name), "headerTooltip": name, "hide": name not in VISIBLE,
            "filter": "agNumberColumnFilter" if numeric else "agTextColumnFilter",
            "sortable": True,
        }
        if numeric:
            d["type"] = "numericColumn"
            if (name.endswith("_us") and name not in MILESTONE_COLUMNS) or name == "upstream_attempts":
                d["valueFormatter"] = GROUPED_NUMBER
            d["width"] = 150 if name in MILESTONE_COLUMNS else 125
        if name in ("path", "x_request_id", "authority"):
            d["width"] = 220
        if name in ("method", "status", "complete", "internal", "thread"):
            d["width"] = 100
        if name == "request_uid":
            d["width"] = 300
        defs.append(d)
    order = {c: i for i, c in enumerate(VISIBLE)}
    return sorted(defs, key=lambda d: order.get(d["field"], len(order)))


def _is_numeric(frame: pl.DataFrame, col: str) -> bool:
    return isinstance(frame.schema[col], NUMERIC)


class FilterRefused(ValueError):
    """A filter or search beyond the bounds above (a browser's grid never sends one)."""


def _bounded_text(value: Any, what: str) -> str:
    text = str(value)
    if len(text) > MAX_FILTER_CHARS:
        raise FilterRefused(f"{what} is {len(text):,} characters long; at most {MAX_FILTER_CHARS} are searched")
    return text


def _condition(frame: pl.DataFrame, col: str, cond: dict[str, Any]) -> pl.Expr | None:
    kind = cond.get("type")
    c = pl.col(col)
    if kind == "blank":
        return c.is_null() | (c.cast(pl.String) == "")
    if kind == "notBlank":
        return c.is_not_null() & (c.cast(pl.String) != "")
    value = cond.get("filter")
    if value is None:
        return None
    if _is_numeric(frame, col):
        try:
            v = float(value)
        except (TypeError, ValueError):
            return None
        try:
            to = float(cond["filterTo"]) if cond.get("filterTo") is not None else None
        except (TypeError, ValueError):
            to = None
        ops = {
            "equals": c == v, "notEqual": c != v, "lessThan": c < v, "lessThanOrEqual": c <= v,
            "greaterThan": c > v, "greaterThanOrEqual": c >= v,
            "inRange": (c >= v) & (c <= to) if to is not None else c >= v,
        }
        return ops.get(str(kind))
    s = c.cast(pl.String).str.to_lowercase()
    text = _bounded_text(value, f"the filter of {col}").lower()
    ops = {
        "contains": s.str.contains(text, literal=True), "notContains": ~s.str.contains(text, literal=True),
        "equals": s == text, "notEqual": s != text,
        "startsWith": s.str.starts_with(text), "endsWith": s.str.ends_with(text),
    }
    expr = ops.get(str(kind))
    if expr is not None and kind in ("notContains", "notEqual"):
        expr = expr.fill_null(True)
    return expr


def filter_expr(frame: pl.DataFrame, filter_model: dict[str, Any] | None) -> pl.Expr | None:
    """A polars predicate for AG Grid's ``filterModel`` (text and number filters, AND/OR conditions).
    Raises :class:`FilterRefused` for more than ``MAX_CONDITIONS`` conditions on a column or a longer text."""
    exprs: list[pl.Expr] = []
    for col, model in (filter_model if isinstance(filter_model, dict) else {}).items():
        if col not in frame.columns or not isinstance(model, dict):
            continue
        if "conditions" in model:
            conditions = model["conditions"] if isinstance(model["conditions"], list) else []
            if len(conditions) > MAX_CONDITIONS:
                raise FilterRefused(f"the filter of {col} has {len(conditions):,} conditions; at most "
                                    f"{MAX_CONDITIONS} are taken")
            parts = [e for e in (_condition(frame, col, m) for m in conditions if isinstance(m, dict))
                     if e is not None]
            if not parts:
                continue
            # one flat any/all, not a chain of | or &: a chain nests one level per condition
            exprs.append(pl.any_horizontal(parts) if model.get("operator") == "OR" else pl.all_horizontal(parts))
        else:
            e = _condition(frame, col, model)
            if e is not None:
                exprs.append(e)
    return pl.all_horizontal(exprs) if exprs else None


def apply_filter_model(frame: pl.DataFrame, filter_model: dict[str, Any] | None) -> pl.DataFrame:
    expr = filter_expr(frame, filter_model)
    return frame if expr is None else frame.filter(expr.fill_null(False))


def search_expr(text: str | None) -> pl.Expr | None:
    """Quick search: ``C12`` = requests on connection 12 (downstream or upstream), ``503`` = that status,
    anything else = a case-insensitive substring of uid, x-request-id, method, authority, path, protocol."""
    if not text or not text.strip():
        return None
    _bounded_text(text, "the quick search")
    if m := _CONN.match(text):
        conn = int(m.group(1))
        return (pl.col("downstream_conn_id") == conn) | (pl.col("upstream_conn_id") == conn)
    needle = text.strip().lower()
    expr = pl.any_horizontal([pl.col(c).cast(pl.String).str.to_lowercase().str.contains(needle, literal=True)
                              for c in SEARCHED])
    if _STATUS.match(text):
        expr = expr | (pl.col("status") == int(text))
    return expr


def _sort_keys(frame: pl.DataFrame, sort_model: list[dict[str, Any]] | None) -> dict[str, bool]:
    """``{column: descending}``, one key per column (its first mention): a model naming a column twice adds no
    work."""
    keys: dict[str, bool] = {}
    for m in (sort_model if isinstance(sort_model, list) else [])[: 4 * len(frame.columns)]:
        if isinstance(m, dict) and isinstance(m.get("colId"), str) and m["colId"] in frame.columns:
            keys.setdefault(m["colId"], m.get("sort") == "desc")
    return keys


def apply_sort_model(frame: pl.DataFrame, sort_model: list[dict[str, Any]] | None) -> pl.DataFrame:
    keys = _sort_keys(frame, sort_model)
    if not keys:
        return frame
    return frame.sort(list(keys), descending=list(keys.values()), nulls_last=True)


def query(frame: pl.DataFrame, *, filter_model: dict[str, Any] | None = None,
          sort_model: list[dict[str, Any]] | None = None, search: str | None = None) -> pl.DataFrame:
    """Filter, search and sort the grid frame."""
    out = apply_filter_model(frame, filter_model)
    s = search_expr(search)
    if s is not None:
        out = out.filter(s.fill_null(False))
    return apply_sort_model(out, sort_model)


def positions(frame: pl.DataFrame, *, filter_model: dict[str, Any] | None = None,
              sort_model: list[dict[str, Any]] | None = None, search: str | None = None) -> pl.Series | None:
    """The row positions of ``query``'s answer (``None``: every row, in the frame's order), client requests
    before the proxy's own ``/ready`` probes and stats scrapes where the sort leaves a tie (by default: each
    group in capture order). Only the columns the filter and sort read are materialised."""
    expr, found, keys = filter_expr(frame, filter_model), search_expr(search), _sort_keys(frame, sort_model)
    if "internal" in frame.columns and "internal" not in keys and not frame["internal"].is_sorted(nulls_last=True):
        keys["internal"] = False
    if expr is None and found is None and not keys:
        return None
    rows = frame.lazy().with_row_index("__row")
    for e in (expr, found):
        if e is not None:
            rows = rows.filter(e.fill_null(False))
    if keys:
        rows = rows.sort(list(keys), descending=list(keys.values()), nulls_last=True, maintain_order=True)
    return rows.select("__row").collect()["__row"]


def to_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows (``stream_id`` as text: it exceeds 2^53, where JavaScript numbers round)."""
    if "stream_id" in frame.columns and frame.schema["stream_id"] != pl.String:
        frame = frame.with_columns(pl.col("stream_id").cast(pl.String))
    return frame.to_dicts()


def _row_index(value: Any, default: int) -> int:
    """A row index from the browser (garbage: ``default``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= 2**53:  # NaN too
        return default
    return int(value)


class Pager:
    """Caches the row positions of filtered/sorted grid states (LRU) and serves blocks of rows for the
    infinite row model."""

    def __init__(self, max_entries: int = 12) -> None:
        self._cache: OrderedDict[tuple[Any, ...], pl.Series | None] = OrderedDict()
        self._frames: OrderedDict[str, pl.DataFrame] = OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def _base(self, dataset_id: str, requests: pl.DataFrame) -> pl.DataFrame:
        with self._lock:
            if dataset_id in self._frames:
                self._frames.move_to_end(dataset_id)
                return self._frames[dataset_id]
        frame = grid_frame(requests)
        with self._lock:
            self._frames[dataset_id] = frame
            while len(self._frames) > max(4, self.max_entries // 4):
                self._frames.popitem(last=False)
        return frame

    def rows(self, dataset_id: str, requests: pl.DataFrame, request: dict[str, Any] | None,
             search: str | None = None) -> dict[str, Any]:
        """``getRowsResponse`` for a ``getRowsRequest``: ``{"rowData": [...], "rowCount": N}``."""
        request = request if isinstance(request, dict) else {}
        start = max(0, _row_index(request.get("startRow"), 0))
        end = max(start, _row_index(request.get("endRow"), start + BLOCK_ROWS))
        end = min(end, start + 1000)  # a page, never the whole capture
        key = (dataset_id, json.dumps(request.get("filterModel") or {}, sort_keys=True, default=str),
               json.dumps(request.get("sortModel") or [], sort_keys=True, default=str), (search or "").strip())
        base = self._base(dataset_id, requests)
        with self._lock:
            known = key in self._cache
            order = self._cache.get(key)
            if known:
                self._cache.move_to_end(key)
        if not known:
            order = positions(base, filter_model=request.get("filterModel"), sort_model=request.get("sortModel"),
                              search=search)
            with self._lock:
                self._cache[key] = order
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        if order is None:
            return {"rowData": to_rows(base.slice(start, end - start)), "rowCount": base.height}
        return {"rowData": to_rows(base[order.slice(start, end - start)]), "rowCount": order.len()}

    def prune(self, keep: set[str]) -> None:
        """Drop cached frames of datasets that are gone (evicted from the registry)."""
        with self._lock:
            for key in [k for k in self._cache if k[0] not in keep]:
                del self._cache[key]
            for frame_key in [k for k in self._frames if k not in keep]:
                del self._frames[frame_key]

    def forget(self, dataset_id: str) -> None:
        """Drop the cached frames of one dataset (it was evicted)."""
        with self._lock:
            for key in [k for k in self._cache if k[0] == dataset_id]:
                del self._cache[key]
            self._frames.pop(dataset_id, None)

    def count(self, dataset_id: str, requests: pl.DataFrame, search: str | None,
              filter_model: dict[str, Any] | None = None) -> int:
        return self.rows(dataset_id, requests, {"startRow": 0, "endRow": 0, "filterModel": filter_model},
                         search)["rowCount"]
