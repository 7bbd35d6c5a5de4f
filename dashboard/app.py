"""``create_app``: the Dash app, its dataset registry and the streaming upload route.

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

from envoy_dissector.dashboard.callbacks import register_callbacks
from envoy_dissector.dashboard.datasets import Registry, demo_sources, load_shared
from envoy_dissector.dashboard.grid import Pager
from envoy_dissector.dashboard.layout import build_layout
from envoy_dissector.dashboard.upload import ROUTE, make_upload_dir, register_upload_route, remove_upload_dir

DEFAULT_MAX_UPLOAD_MB = 2048
ASSETS = Path(__file__).parent / "assets"


def create_app(captures: Sequence[str | Path] = (), *, demo: bool | None = None,
               max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB, max_datasets: int = 8, workers: int = 2,
               registry: Registry | None = None, dissect_kw: dict[str, Any] | None = None) -> Dash:
    """Build the dashboard.

    Args:
        captures: logs analysed now and shown to every session (read-only).
        demo: also load the bundled demo captures; default: only when no capture is given.
        max_upload_mb: uploads larger than this are refused (HTTP 413).
        max_datasets: uploaded datasets kept in memory (least recently used dropped first).
        workers: uploads analysed at once.
        registry: an existing registry (tests).
        dissect_kw: ``format``/``log_format``/``redact`` for ``captures``.
    """
    registry = registry or Registry(max_datasets=max_datasets, workers=workers)
    if demo is None:
        demo = not captures
    if demo:
        load_shared(registry, demo_sources())
    if captures:
        load_shared(registry, [(str(c), Path(str(c)).name) for c in captures], **(dissect_kw or {}))

    app = Dash(__name__, title="envoy-dissector", assets_folder=str(ASSETS), suppress_callback_exceptions=True,
               update_title=None)  # type: ignore[arg-type]  # None: keep the title while updating
    max_bytes = int(max_upload_mb * 1024 * 1024)
    upload_dir = make_upload_dir()
    atexit.register(remove_upload_dir, upload_dir)
    register_upload_route(app.server, registry, max_bytes=max_bytes, directory=upload_dir)
    upload_url = app.get_relative_path(ROUTE)
    app.layout = lambda: build_layout(upload_url, max_bytes)
    register_callbacks(app, registry, Pager())
    app.server.config["DISSECTOR_REGISTRY"] = registry
    app.server.config["DISSECTOR_UPLOAD_DIR"] = upload_dir
    return app
