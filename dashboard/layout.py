"""The page: header (dataset picker, upload), then tabs Overview, Requests, Waterfall, Event loop, Compare.

``build_layout`` runs on every page load (Dash calls it), so each new browser tab gets a fresh random
session token in a ``sessionStorage``-backed store; a reload keeps the token (and so its datasets).
"""
from __future__ import annotations

from typing import Any

import dash_ag_grid as dag
from dash import dcc, html

from envoy_dissector.dashboard.datasets import new_id
from envoy_dissector.dashboard.grid import BLOCK_ROWS, column_defs

TABS = (("overview", "Overview"), ("requests", "Requests"), ("waterfall", "Waterfall"),
        ("loop", "Event loop"), ("compare", "Compare"))
GRAPH_CONFIG: Any = {"displaylogo": False}


def header(upload_url: str, max_bytes: int) -> html.Div:
    return html.Div([
        html.Div([html.Span("envoy-dissector", className="brand"),
                  html.Span("where did the time go inside the sidecar?", className="tagline")], className="title"),
        html.Div([
            html.Label("Dataset", htmlFor="dataset"),
            dcc.Dropdown(id="dataset", clearable=False, placeholder="loading…", className="dataset-dropdown"),
        ], className="picker"),
        html.Div([
            html.Div(["Drop an Envoy / istio-proxy trace log here (plain text or gzip, any name) or choose one: "],
                     className="drop-text"),
            # assets/upload.js puts <input type=file id=upload-file> here and streams the file to upload_url
            html.Span(id="upload-input-slot"),
            html.Details([
                html.Summary("custom log format"),
                dcc.Input(id="upload-log-format", type="text", className="log-format", debounce=True,
                          placeholder="Envoy --log-format of the next upload, e.g. [%Y-%m-%d %T.%f][%t][%l][%n] %v "
                                      "(leave empty: detected)"),
            ], className="options"),
        ], id="upload-drop", className="drop-zone",
            **{"data-url": upload_url, "data-max-bytes": str(max_bytes)}),  # type: ignore[arg-type]
        html.Div([
            html.Progress(id="upload-progress", value="0", max="100", className="progress", hidden=True),
            html.Div(id="upload-message", className="message"),
            html.Progress(id="analysis-progress", value="0", max="100", className="progress", hidden=True),
            html.Div(id="job-message", className="message"),
        ], className="status"),
    ], className="header")


def overview_tab() -> html.Div:
    return html.Div(dcc.Loading(html.Div(id="overview")), className="tab-body")


def requests_tab() -> html.Div:
    return html.Div([
        html.Div([
            dcc.Input(id="search", type="search", debounce=True, className="search",
                      placeholder="Quick search: path, authority, x-request-id, status (503), connection (C12)…"),
            html.Span(id="requests-count", className="count"),
        ], className="toolbar"),
        dag.AgGrid(
            id="requests-grid",
            rowModelType="infinite",
            columnDefs=column_defs(),
            defaultColDef={"resizable": True, "sortable": True, "floatingFilter": True,
                           "wrapHeaderText": True, "autoHeaderHeight": True,
                           "filterParams": {"maxNumConditions": 2, "buttons": ["reset"]}},
            getRowId="params.data.request_uid",
            dashGridOptions={"cacheBlockSize": BLOCK_ROWS, "maxBlocksInCache": 20, "rowBuffer": 10,
                             "rowSelection": {"mode": "singleRow", "checkboxes": False, "enableClickSelection": True},
                             "animateRows": False, "tooltipShowDelay": 300, "suppressColumnVirtualisation": True},
            style={"height": "62vh", "width": "100%"},
            className="ag-theme-alpine",
        ),
        html.Div("Click a row to open its waterfall.", className="hint"),
    ], className="tab-body")


def waterfall_tab() -> html.Div:
    return html.Div([
        html.Div(id="waterfall-hint", className="hint"),
        html.Div([
            html.Div(dcc.Loading(dcc.Graph(id="waterfall-graph", config=GRAPH_CONFIG)), className="col wide"),
            html.Div(id="waterfall-side", className="col side"),
        ], className="row"),
        html.Button("Show this request's log lines", id="show-lines", className="button"),
        dcc.Loading(html.Div(id="log-lines")),
    ], className="tab-body")


def loop_tab() -> html.Div:
    return html.Div([
        html.Div([
            html.Label("Worker", htmlFor="loop-thread"),
            dcc.Dropdown(id="loop-thread", placeholder="all workers", className="thread-dropdown"),
            html.Button("Whole capture", id="loop-reset", className="button"),
            html.Span(id="loop-info", className="hint"),
        ], className="toolbar"),
        dcc.Loading(dcc.Graph(id="loop-graph", config=GRAPH_CONFIG)),
        html.Div("Zoom or pan: the window is re-queried on the server (slices when few enough, busy fraction "
                 "otherwise).", className="hint"),
        html.Div([
            html.Div(dcc.Graph(id="utilisation-graph", config=GRAPH_CONFIG), className="col wide"),
            html.Div([html.H4("Workers"), html.Div(id="workers-panel")], className="col side"),
        ], className="row"),
    ], className="tab-body")


def compare_tab() -> html.Div:
    return html.Div([
        html.Div([
            html.Label("A", htmlFor="compare-a"), dcc.Dropdown(id="compare-a", className="compare-dropdown"),
            html.Label("B", htmlFor="compare-b"), dcc.Dropdown(id="compare-b", className="compare-dropdown"),
        ], className="toolbar"),
        html.Div(id="compare-table-div"),
        dcc.Graph(id="compare-graph", config=GRAPH_CONFIG),
    ], className="tab-body")


def build_layout(upload_url: str, max_bytes: int) -> Any:
    """The whole page (a fresh session token each time it is built)."""
    bodies = {"overview": overview_tab, "requests": requests_tab, "waterfall": waterfall_tab,
              "loop": loop_tab, "compare": compare_tab}
    return html.Div([
        dcc.Store(id="session", storage_type="session", data={"token": new_id()}),
        dcc.Store(id="overview-rows"),         # requests shown by the provisional overview of a running analysis
        dcc.Store(id="upload-job"),            # set by assets/upload.js while an upload runs and when it is accepted
        dcc.Store(id="selected-request"),      # {"dataset": id, "uid": request_uid}
        dcc.Store(id="loop-state"),            # {"dataset", "start", "end", "highlight"}
        dcc.Store(id="grid-refresh"),
        dcc.Store(id="jobs-seen", data=[]),    # finished analysis jobs already reported to this tab
        dcc.Interval(id="job-poll", interval=500, disabled=False),
        header(upload_url, max_bytes),
        html.Div(id="quality-banner"),         # what the chosen capture's level cannot measure (views.quality_banner)
        dcc.Tabs(id="tabs", value="overview", children=[
            dcc.Tab(label=label, value=value, id=f"tab-{value}", children=bodies[value]())
            for value, label in TABS
        ]),
    ], className="page")
