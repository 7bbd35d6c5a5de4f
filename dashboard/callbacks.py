"""Dash callbacks: read inputs, call one function from ``datasets``/``grid``/``views``, return outputs.

Every callback finds its dataset through ``Registry.get(dataset_id, token)``, so a session only ever
reads shared datasets and its own uploads.
"""
from __future__ import annotations

from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, no_update

from envoy_dissector.analysis.outputs import figures
from envoy_dissector.dashboard import views
from envoy_dissector.dashboard.callback_input import checked
from envoy_dissector.dashboard.datasets import Dataset, Registry
from envoy_dissector.dashboard.grid import FilterRefused, Pager
from envoy_dissector.dashboard.memo import Memo

#: prefix of the ``jobs-seen`` entries for analyses whose provisional overview this browser has been shown
SHOWN = "shown:"
#: a provisional overview is redrawn every this many job polls (while new requests have finished); the first
#: requests to finish are drawn at the next poll
PROVISIONAL_EVERY = 4

LOOP_MARGIN_US = 2_000


def redraw_provisional(rows: int, shown_rows: int | None, polls: int | None) -> bool:
    """Whether a job poll redraws a running analysis' provisional overview (``shown_rows``: the requests it
    shows): when requests have finished since, the first ones at once, later ones every ``PROVISIONAL_EVERY``
    polls (a redraw builds its figures again)."""
    if rows == shown_rows:
        return False
    return not shown_rows or (polls or 0) % PROVISIONAL_EVERY == 0


def _token(session: dict[str, Any] | None) -> str | None:
    token = (session or {}).get("token")
    return token if isinstance(token, str) else None


def _text(value: Any) -> str | None:
    """A string from the browser, or None for anything else."""
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    """An integer from the browser (a float is truncated), or None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) < 2**62:  # NaN too
        return None
    return int(value)


def _uid(selected: dict[str, Any] | None, ds: Dataset) -> str | None:
    """The request chosen in this dataset (``selected-request`` store), else the slowest one."""
    if selected and selected.get("dataset") == ds.id and isinstance(selected.get("uid"), str):
        return str(selected["uid"])
    return slowest_request(ds)


def session_view(registry: Registry, token: str | None, current: str | None,
                 seen: list[str] | None = None) -> dict[str, Any]:
    """What the header shows for a session: dataset options and choice, job progress and messages;
    ``seen`` are the finished jobs already reported to this browser."""
    seen = [j for j in seen or () if isinstance(j, str)]
    pending, finished = registry.poll(token, set(seen))
    visible = registry.visible(token)
    running = [j for j in pending if j.state == "running"]
    options = [views.job_option(j) for j in running] + views.dataset_options(visible)
    ids = [o["value"] for o in options]
    new = [j.dataset_id for j in finished if j.state == "done" and j.dataset_id in ids]
    # an analysis that has just started is shown at once (its provisional overview), once per browser
    started = [j for j in running if SHOWN + j.id not in seen]
    value: str | None
    if new:
        value = new[-1]
    elif started:
        value = views.JOB_PREFIX + started[-1].id
    else:
        value = current if current in ids else next((i for i in ids if not i.startswith(views.JOB_PREFIX)),
                                                     ids[0] if ids else None)
    errors = [j.describe() for j in finished if j.state == "error"]
    done = [j.describe() for j in finished if j.state == "done"]
    if pending:
        message, kind = " · ".join(j.describe() for j in pending), "message"
    elif errors:
        message, kind = " · ".join(errors), "message error"
    elif done:
        message, kind = " · ".join(done), "message ok"
    else:
        message, kind = None, "message"
    progress = min((j.fraction for j in pending), default=1.0)
    return {"options": options, "value": value, "pending": bool(pending),
            "message": message, "message_class": kind, "progress": f"{100 * progress:.0f}",
            "seen": list(seen or ()) + [j.id for j in finished] + [SHOWN + j.id for j in started]}


def _highlight(state: dict[str, Any] | None, ds: Dataset) -> list[int] | None:
    """The highlighted connection ids of the event-loop state, when it is this dataset's."""
    if not state or state.get("dataset") != ds.id or not isinstance(state.get("highlight"), list):
        return None
    return [c for c in (_int(v) for v in state["highlight"][:100]) if c is not None] or None


def slowest_request(ds: Dataset) -> str | None:
    """The slowest complete client request (else the slowest request): chosen once, when the dataset was held."""
    return ds.slowest_uid


def register_callbacks(app: Dash, registry: Registry, pager: Pager | None = None) -> None:
    pager = pager or Pager()
    registry.on_evict(pager.forget)
    lines = Memo()
    registry.on_evict(lines.forget)
    # views of a whole dataset, the same for every session and read on every visit: computed once per dataset
    whole = Memo()
    registry.on_evict(whole.forget)

    def callback(*deps: Any, **kw: Any) -> Any:
        """``app.callback`` with the arguments checked against the function's annotations."""
        return lambda func: app.callback(*deps, **kw)(checked(func))

    def dataset(dataset_id: str | None, session: dict[str, Any] | None) -> Dataset | None:
        return registry.get(dataset_id, _token(session))

    @callback(
        Output("dataset", "options"), Output("dataset", "value"),
        Output("compare-a", "options"), Output("compare-b", "options"),
        Output("analysis-progress", "value"), Output("analysis-progress", "hidden"),
        Output("job-message", "children"), Output("job-message", "className"),
        Output("job-poll", "disabled"), Output("jobs-seen", "data"),
        Input("job-poll", "n_intervals"), Input("upload-job", "data"),
        State("session", "data"), State("dataset", "value"), State("jobs-seen", "data"),
        State("dataset", "options"),
    )
    def poll_jobs(_n: int | None, _job: Any, session: dict[str, Any] | None, current: str | None,
                  seen: list[str] | None, options: list[dict[str, str]] | None) -> tuple[Any, ...]:
        v = session_view(registry, _token(session), current, seen)
        # unchanged outputs are not sent: they would re-render every view twice a second
        same = v["options"] == options
        opts = no_update if same else v["options"]
        finished = no_update if same else [o for o in v["options"] if not o["value"].startswith(views.JOB_PREFIX)]
        message = v["message"] if v["message"] is not None else no_update
        cls = v["message_class"] if v["message"] is not None else no_update
        return (opts, no_update if v["value"] == current else v["value"], finished, finished, v["progress"],
                not v["pending"], message, cls, not v["pending"],
                v["seen"] if v["seen"] != (seen or []) else no_update)

    @callback(Output("compare-a", "value"), Output("compare-b", "value"),
                  Input("compare-a", "options"), State("compare-a", "value"), State("compare-b", "value"))
    def compare_defaults(options: list[dict[str, str]] | None, a: str | None, b: str | None) -> tuple[Any, Any]:
        ids = [o.get("value") for o in options or []]
        if len(ids) < 2:
            return no_update, no_update
        if ids[0] not in (a, b):  # a new upload (listed first) becomes B; the previous B becomes A
            return (b if b in ids else ids[1]), ids[0]
        return (a if a in ids else ids[1]), (b if b in ids else ids[0])

    @callback(Output("overview", "children"), Output("overview-rows", "data"),
              Input("dataset", "value"), Input("job-poll", "n_intervals"),
              State("session", "data"), State("overview-rows", "data"))
    def show_overview(dataset_id: str | None, polls: int | None, session: dict[str, Any] | None,
                      shown_rows: int | None) -> tuple[Any, Any]:
        polled = ctx.triggered_id == "job-poll" and "dataset.value" not in ctx.triggered_prop_ids
        if isinstance(dataset_id, str) and dataset_id.startswith(views.JOB_PREFIX):
            job = registry.job(dataset_id.removeprefix(views.JOB_PREFIX), _token(session))
            if job is None or job.state != "running":
                return (no_update, no_update) if polled else ("The analysis has ended.", None)
            rows = job.partial_rows
            if polled and not redraw_provisional(rows, shown_rows, polls):
                return no_update, no_update
            return views.provisional_overview(job), rows
        if polled:
            return no_update, no_update
        ds = dataset(dataset_id, session)
        if ds is None:
            return "Choose a dataset, or upload a log.", None
        return whole.get((ds.id, "overview"), lambda: views.overview(ds)), None

    @callback(Output("quality-banner", "children"), Input("dataset", "value"), State("session", "data"))
    def show_quality_banner(dataset_id: str | None, session: dict[str, Any] | None) -> Any:
        ds = dataset(dataset_id, session)
        return views.quality_banner(ds.summary()) if ds else None

    # -- requests ------------------------------------------------------------------------------------
    app.clientside_callback(
        """function(search, dataset) {
            try { const api = dash_ag_grid.getApi('requests-grid');
                  if (api) { api.purgeInfiniteCache(); api.ensureIndexVisible(0, 'top'); } } catch (e) {}
            return Date.now();
        }""",
        Output("grid-refresh", "data"), Input("search", "value"), Input("dataset", "value"),
        prevent_initial_call=True,
    )

    @callback(Output("requests-grid", "getRowsResponse"), Output("requests-count", "children"),
                  Input("requests-grid", "getRowsRequest"),
                  State("dataset", "value"), State("search", "value"), State("session", "data"))
    def grid_rows(request: dict[str, Any] | None, dataset_id: str | None, search: str | None,
                  session: dict[str, Any] | None) -> tuple[Any, Any]:
        ds = dataset(dataset_id, session)
        if ds is None or request is None:
            return {"rowData": [], "rowCount": 0}, ""
        pager.prune(registry.ids())
        total = ds.capture.requests.height
        try:
            page = pager.rows(ds.id, ds.capture.requests, request, search)
        except FilterRefused as exc:
            return {"rowData": [], "rowCount": 0}, f"Not filtered: {exc}."
        return page, f"{page['rowCount']:,} of {total:,} requests (incl. internal ones) match"

    @callback(Output("selected-request", "data"), Output("tabs", "value", allow_duplicate=True),
                  Input("requests-grid", "cellClicked"), State("dataset", "value"), prevent_initial_call=True)
    def open_request(cell: dict[str, Any] | None, dataset_id: str | None) -> tuple[Any, Any]:
        if not cell or not _text(cell.get("rowId")):
            return no_update, no_update
        return {"dataset": _text(dataset_id), "uid": cell["rowId"]}, "waterfall"

    # -- waterfall -----------------------------------------------------------------------------------
    @callback(Output("waterfall-graph", "figure"), Output("waterfall-side", "children"),
                  Output("waterfall-hint", "children"), Output("log-lines", "children", allow_duplicate=True),
                  Input("selected-request", "data"), Input("dataset", "value"), State("session", "data"),
                  prevent_initial_call="initial_duplicate")
    def show_waterfall(selected: dict[str, Any] | None, dataset_id: str | None,
                       session: dict[str, Any] | None) -> tuple[Any, ...]:
        ds = dataset(dataset_id, session)
        if ds is None:
            return {}, None, "Choose a dataset.", None
        uid = _uid(selected, ds)
        if uid is None:
            return {}, None, "This capture has no requests.", None
        try:
            fig, side = views.waterfall_view(ds, uid)
        except KeyError:
            return {}, None, f"Request {uid} is not in this dataset.", None
        hint = ("Click a row in Requests to open another request." if selected and selected.get("uid") == uid
                else "The slowest complete request; click a row in Requests to open another.")
        return fig, side, hint, None

    @callback(Output("log-lines", "children"), Input("show-lines", "n_clicks"),
                  State("selected-request", "data"), State("dataset", "value"), State("session", "data"),
                  prevent_initial_call=True)
    def show_lines(_n: int | None, selected: dict[str, Any] | None, dataset_id: str | None,
                   session: dict[str, Any] | None) -> Any:
        ds = dataset(dataset_id, session)
        if ds is None:
            return None
        uid = _uid(selected, ds)
        if uid is None:
            return None
        try:
            return lines.get((ds.id, uid), lambda: views.log_lines(ds, uid))
        except KeyError:
            return f"Request {uid} is not in this dataset."

    @callback(Output("loop-state", "data", allow_duplicate=True), Output("tabs", "value", allow_duplicate=True),
                  Output("loop-thread", "value", allow_duplicate=True),
                  Input({"type": "conn-loop", "conn": ALL, "wait": ALL}, "n_clicks"),
                  State("selected-request", "data"), State("dataset", "value"), State("session", "data"),
                  prevent_initial_call=True)
    def jump_to_loop(clicks: list[int | None], selected: dict[str, Any] | None, dataset_id: str | None,
                     session: dict[str, Any] | None) -> tuple[Any, ...]:
        ds = dataset(dataset_id, session)
        if ds is None or not any(clicks) or not isinstance(ctx.triggered_id, dict):
            return no_update, no_update, no_update
        uid, wait, conn = _uid(selected, ds), _int(ctx.triggered_id.get("wait")), _int(ctx.triggered_id.get("conn"))
        if uid is None or wait is None or conn is None:
            return no_update, no_update, no_update
        try:
            start, end, thread = views.wait_window(ds, uid, wait, LOOP_MARGIN_US)
        except KeyError:
            return no_update, no_update, no_update
        return {"dataset": ds.id, "start": start, "end": end, "highlight": [conn]}, "loop", thread

    @callback(Output("search", "value"), Output("tabs", "value", allow_duplicate=True),
                  Input({"type": "conn-requests", "conn": ALL, "wait": ALL}, "n_clicks"), prevent_initial_call=True)
    def jump_to_requests(clicks: list[int | None]) -> tuple[Any, Any]:
        if not any(clicks) or not isinstance(ctx.triggered_id, dict):
            return no_update, no_update
        conn = _int(ctx.triggered_id.get("conn"))
        return (f"C{conn}", "requests") if conn is not None else (no_update, no_update)

    # -- event loop ----------------------------------------------------------------------------------
    @callback(Output("loop-state", "data", allow_duplicate=True),
                  Input("loop-graph", "relayoutData"), Input("loop-reset", "n_clicks"),
                  State("loop-state", "data"), State("dataset", "value"), State("session", "data"),
                  prevent_initial_call=True)
    def zoom_loop(relayout: dict[str, Any] | None, _reset: int | None, state: dict[str, Any] | None,
                  dataset_id: str | None, session: dict[str, Any] | None) -> Any:
        ds = dataset(dataset_id, session)
        if ds is None:
            return no_update
        keep = _highlight(state, ds)
        if ctx.triggered_id == "loop-reset":
            return {"dataset": ds.id, "start": None, "end": None, "highlight": keep}
        zero, _, _ = views.loop_window(ds.capture, None, None)
        window = views.window_from_relayout(relayout, zero)
        if window is None:
            return no_update
        return {"dataset": ds.id, "start": window[0], "end": window[1], "highlight": keep}

    @callback(Output("loop-graph", "figure"), Output("loop-info", "children"),
                  Input("loop-state", "data"), Input("loop-thread", "value"), Input("dataset", "value"),
                  State("session", "data"))
    def show_loop(state: dict[str, Any] | None, thread: int | None, dataset_id: str | None,
                  session: dict[str, Any] | None) -> tuple[Any, Any]:
        ds = dataset(dataset_id, session)
        if ds is None:
            return {}, ""
        st = state if state and state.get("dataset") == ds.id else {}
        start_us, end_us, highlight = _int(st.get("start")), _int(st.get("end")), _highlight(state, ds)
        fig = views.event_loop_figure(ds.capture, thread=_int(thread), start_us=start_us, end_us=end_us,
                                      highlight=highlight)
        zero, start, end = views.loop_window(ds.capture, start_us, end_us)
        marked = ", ".join(f"C{c}" for c in highlight or [])
        info = (f"window +{(start - zero) / 1000:,.3f}..+{(end - zero) / 1000:,.3f} ms since the capture's start"
                + (f" · highlighted {marked}" if marked else ""))
        return fig, info

    @callback(Output("utilisation-graph", "figure"), Output("workers-panel", "children"),
                  Output("loop-thread", "options"), Input("dataset", "value"), State("session", "data"))
    def show_workers(dataset_id: str | None, session: dict[str, Any] | None) -> tuple[Any, ...]:
        ds = dataset(dataset_id, session)
        if ds is None:
            return {}, None, []
        return whole.get((ds.id, "workers"), lambda: (figures.utilisation(ds.capture.loop),
                                                       views.workers_panel(ds.capture.workers()),
                                                       views.thread_options(ds.capture)))

    # -- compare -------------------------------------------------------------------------------------
    @callback(Output("compare-table-div", "children"), Output("compare-graph", "figure"),
                  Input("compare-a", "value"), Input("compare-b", "value"), State("session", "data"))
    def show_compare(a_id: str | None, b_id: str | None, session: dict[str, Any] | None) -> tuple[Any, Any]:
        a, b = dataset(a_id, session), dataset(b_id, session)
        if a is None or b is None:
            return "Choose two datasets (upload a second capture, or use the two demo captures).", {}
        table, fig = views.compare_view(a, b)
        return table, fig


__all__ = ["register_callbacks", "session_view", "slowest_request"]
