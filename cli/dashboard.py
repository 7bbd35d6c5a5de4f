"""`envoy-dissect dashboard`: the web UI on 127.0.0.1 (a bundled demo capture when none is given)."""
from __future__ import annotations

import argparse
import os
import signal

from envoy_dissector.parser.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dashboard", help="web UI: upload logs, browse requests, waterfalls, event loop, compare",
                       description=__doc__)
    p.add_argument("captures", nargs="*", metavar="CAPTURE",
                   help="logs to load at start, shown to every browser session (default: the bundled demo)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; anything else exposes uploaded logs to the network)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument("--max-upload-mb", type=float, default=2048, metavar="N",
                   help="refuse uploads larger than N MB (default 2048)")
    p.add_argument("--max-datasets", type=int, default=8, metavar="N",
                   help="uploaded datasets kept in memory, least recently used dropped first (default 8)")
    p.add_argument("--demo", action="store_true", help="load the bundled demo captures even with CAPTURE given")
    p.add_argument("--format", default="auto",
                   choices=["auto", "envoy", "istio", "istio-thread", "istio-json", "custom"],
                   help="envelope format of CAPTURE (default: detected)")
    p.add_argument("--log-format", metavar="STRING", help="the Envoy --log-format CAPTURE was written with")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secret header values of CAPTURE (uploads are always redacted)")
    p.add_argument("--debug", action="store_true", help="Dash debug mode (reloader, dev tools)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.max_upload_mb <= 0:
        raise UsageError("--max-upload-mb must be positive")
    from envoy_dissector.dashboard.app import create_app
    from envoy_dissector.dashboard.upload import remove_upload_dir
    from envoy_dissector.parser.sources import expand

    captures = [s.name for s in expand(args.captures)] if args.captures else []
    fmt = "custom" if args.log_format else args.format
    app = create_app(captures, demo=True if args.demo else None, max_upload_mb=args.max_upload_mb,
                     max_datasets=args.max_datasets,
                     dissect_kw={"format": fmt, "log_format": args.log_format, "redact": not args.no_redact})
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: binding {args.host}: anyone who can reach it can upload logs and see shared captures")
    upload_dir = app.server.config["DISSECTOR_UPLOAD_DIR"]

    def stop(signum: int, _frame: object) -> None:
        # SIGTERM skips atexit: remove uploads in flight now, then leave without waiting for analyses
        remove_upload_dir(upload_dir)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    print(f"envoy-dissector dashboard on http://{args.host}:{args.port}/ (Ctrl-C to stop)")
    try:
        app.run(host=args.host, port=args.port, debug=args.debug)
    finally:
        remove_upload_dir(upload_dir)
    return 0
