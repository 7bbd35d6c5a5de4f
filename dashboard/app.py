"""``create_app``: the Dash app, its dataset registry, the streaming upload route and the guards
(access token and Host allow-list, callback request checks) on its Flask server.

>>> app = create_app(demo=False)
>>> app.title
'envoy-dissector'
"""
from __future__ import annotations

import atexit
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dash import Dash

from envoy_dissector.dashboard import access, callback_input
from envoy_dissector.dashboard.callbacks import register_callbacks
from envoy_dissector.dashboard.datasets import Registry, load_demo, load_shared
from envoy_dissector.dashboard.grid import Pager
from envoy_dissector.dashboard.layout import build_layout
from envoy_dissector.dashboard.upload import ROUTE, make_upload_dir, register_upload_route, remove_upload_dir

DEFAULT_MAX_UPLOAD_MB = 2048
ASSETS = Path(__file__).parent / "assets"


def create_app(captures: Sequence[str | Path] = (), *, demo: bool | None = None,
               max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB, max_datasets: int = 4, max_sessions: int = 16,
               max_pending: int = 4, session_idle_s: float = 3600.0, workers: int = 2,
               policy: access.AccessPolicy | None = None, registry: Registry | None = None,
               dissect_kw: dict[str, Any] | None = None) -> Dash:
    """Build the dashboard.

    Args:
        captures: logs analysed now and shown to every session (read-only).
        demo: also load the bundled demo captures; default: only when no capture is given.
        max_upload_mb: uploads holding more log text than this (decompressed) are refused (HTTP 413).
        max_datasets: uploaded datasets kept per browser session (its least recently used dropped first).
        max_sessions: browser sessions holding uploads at once (more are refused with 503).
        max_pending: analyses one session may have waiting or running.
        session_idle_s: a session unused this long gives its room to a new one.
        workers: uploads analysed at once.
        policy: access token and Host allow-list (default: loopback names, no token).
        registry: an existing registry (tests).
        dissect_kw: ``format``/``log_format``/``redact`` for ``captures``.
    """
    registry = registry or Registry(max_datasets=max_datasets, max_sessions=max_sessions, max_pending=max_pending,
                                    session_idle_s=session_idle_s, workers=workers)
    if demo is None:
        demo = not captures
    if demo:
        load_demo(registry)
    if captures:
        load_shared(registry, [(str(c), Path(str(c)).name) for c in captures], **(dissect_kw or {}))

    app = Dash(__name__, title="envoy-dissector", assets_folder=str(ASSETS), suppress_callback_exceptions=True,
               update_title=None)  # type: ignore[arg-type]  # None: keep the title while updating
    policy = policy or access.AccessPolicy.for_bind("127.0.0.1")
    access.install(app.server, policy)
    callback_input.install(app.server, lambda: [k for k, v in app.callback_map.items() if "callback" in v])
    max_bytes = int(max_upload_mb * 1024 * 1024)
    upload_dir = make_upload_dir()
    atexit.register(remove_upload_dir, upload_dir)
    register_upload_route(app.server, registry, max_bytes=max_bytes, directory=upload_dir)
    upload_url = app.get_relative_path(ROUTE)
    app.layout = lambda: build_layout(upload_url, max_bytes)
    register_callbacks(app, registry, Pager())
    app.server.config["DISSECTOR_REGISTRY"] = registry
    app.server.config["DISSECTOR_UPLOAD_DIR"] = upload_dir
    app.server.config["DISSECTOR_POLICY"] = policy  # (the server's guard checks it before a body is read)
    return app
