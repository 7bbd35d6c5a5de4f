"""`envoy-dissect dashboard`: the web UI on 127.0.0.1 (a bundled demo capture when none is given),
served by waitress. Any other --host needs an access token (generated and printed unless given)."""
from __future__ import annotations

import argparse
import os
import signal
import socket
from collections.abc import Callable

from envoy_dissector.cli.argtypes import port, positive_number
from envoy_dissector.parser.errors import ExitCode, UsageError
from envoy_dissector.parser.formats import FORMAT_IDS

TOKEN_ENV = "ENVOY_DISSECTOR_TOKEN"
MIN_TOKEN_CHARS = 16
#: Bounds of the numeric options (a value past them, ``nan`` or ``inf`` is a usage error): 1 TiB, a year, an hour.
MAX_UPLOAD_MB = 1024 * 1024
MAX_IDLE_MINUTES = 365 * 24 * 60
MAX_PREAUTH_S = 3600


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dashboard", help="web UI: upload logs, browse requests, waterfalls, event loop, compare",
                       description=__doc__)
    p.add_argument("captures", nargs="*", metavar="CAPTURE",
                   help="logs to load at start, shown to every browser session (default: the bundled demo)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; anything else serves the network and requires an "
                        "access token)")
    p.add_argument("--port", type=port, default=8050, help="port (default 8050)")
    p.add_argument("--token", metavar="TOKEN",
                   help=f"access token every request must carry (?token= once, then a cookie); default: "
                        f"${TOKEN_ENV}, else generated and printed when --host is not loopback")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a name browsers reach the server by (Host header), besides the bind address, this "
                        "machine's names and localhost; repeatable; '*' turns the check off")
    p.add_argument("--max-upload-mb", type=positive_number(at_most=MAX_UPLOAD_MB), default=2048, metavar="N",
                   help="refuse uploads holding more than N MB of log text, decompressed (default 2048)")
    p.add_argument("--max-datasets", type=int, default=4, metavar="N",
                   help="uploaded datasets kept per browser session, its least recently used dropped first "
                        "(default 4)")
    p.add_argument("--max-sessions", type=int, default=16, metavar="N",
                   help="browser sessions holding uploads at once; more are refused until one is idle (default 16)")
    p.add_argument("--session-idle-minutes", type=positive_number(at_most=MAX_IDLE_MINUTES), default=60, metavar="M",
                   help="a session unused this long gives its room (and its uploads) to a new one (default 60)")
    p.add_argument("--preauth-timeout", type=positive_number(at_most=MAX_PREAUTH_S), metavar="SECONDS",
                   help="close a connection that has not sent an admitted request's headers this long after "
                        "opening (default 10)")
    p.add_argument("--follow", metavar="FILE|pod/NAME",
                   help="also follow this growing log (rotation handled), or a pod's sidecar log through the "
                        "Kubernetes API (trace on while the server runs, restored when it stops): every browser "
                        "sees its requests as they finish (docs/follow.md)")
    p.add_argument("--demo", action="store_true", help="load the bundled demo captures even with CAPTURE given")
    p.add_argument("--format", default="auto", choices=["auto", *FORMAT_IDS], metavar="FORMAT",
                   help=f"envelope format of CAPTURE: {', '.join(['auto', *FORMAT_IDS])} (default: auto, detected)")
    p.add_argument("--log-format", metavar="STRING", help="the Envoy --log-format CAPTURE was written with")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secret header values of CAPTURE (uploads are always redacted; loopback only)")
    p.add_argument("--debug", action="store_true",
                   help="Dash debug mode on Flask's development server (reloader, dev tools; loopback only)")
    from envoy_dissector.cli.kube import add_cluster_options

    add_cluster_options(p.add_argument_group("the pod of --follow pod/NAME"))
    p.set_defaults(run=run)


def access_token(args: argparse.Namespace, loopback: bool) -> str | None:
    """The token to require: given (option or environment), else generated off loopback, else none."""
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is not None and (len(token) < MIN_TOKEN_CHARS or not token.isprintable() or " " in token):
        raise UsageError(f"--token must be at least {MIN_TOKEN_CHARS} printable characters without spaces")
    if token is None and not loopback:
        from envoy_dissector.dashboard.access import new_token

        token = new_token()
    return token


def check_limits(args: argparse.Namespace, loopback: bool) -> None:
    if args.max_upload_mb <= 0:
        raise UsageError("--max-upload-mb must be positive")
    for name in ("max_datasets", "max_sessions", "session_idle_minutes"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if not loopback and args.debug:
        raise UsageError("--debug runs Flask's development server with its debugger: loopback only")
    if not loopback and args.no_redact:
        raise UsageError("--no-redact would show secrets to everyone who can reach the server: loopback only")


def browse_url(host: str, port: int, token: str | None) -> str:
    shown = socket.getfqdn() if host in ("0.0.0.0", "::", "") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def run(args: argparse.Namespace) -> int:
    from envoy_dissector.dashboard import private_tmp
    from envoy_dissector.dashboard.access import is_loopback

    loopback = is_loopback(args.host)
    check_limits(args, loopback)
    token = access_token(args, loopback)
    # every temporary file of the server (uploads, decompressed copies, spills, body buffers) in one private
    # directory, removed at the end, on SIGTERM/SIGINT, or by the next server when this one is killed outright
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with private_tmp.private_tempdir() as tmp_root:

            on_stop: list[Callable[[], None]] = []  # (a followed pod's levels restored)

            def stop(signum: int, _frame: object) -> None:
                # skips atexit and the analysis threads: end the follow and remove the files now, then leave
                for end in on_stop:
                    end()
                private_tmp.remove(tmp_root)
                os._exit(ExitCode.TERMINATED if signum == signal.SIGTERM else ExitCode.INTERRUPTED)

            for sig in handlers:
                signal.signal(sig, stop)
            try:
                serve_dashboard(args, loopback, token, on_stop)
            finally:
                for end in on_stop:
                    end()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 0


def serve_dashboard(args: argparse.Namespace, loopback: bool, token: str | None,
                    on_stop: list[Callable[[], None]]) -> None:
    """Build the app and serve it until interrupted (``on_stop`` gets what ends a ``--follow``)."""
    from envoy_dissector.dashboard.access import AccessPolicy
    from envoy_dissector.dashboard.app import create_app
    from envoy_dissector.dashboard.server import serve
    from envoy_dissector.parser.sources import expand

    captures = [s.argument for s in expand(args.captures)] if args.captures else []
    fmt = "custom" if args.log_format else args.format
    policy = AccessPolicy.for_bind(args.host, token=token, extra_hosts=args.allowed_host)
    dissect_kw = {"format": fmt, "log_format": args.log_format, "redact": not args.no_redact}
    registry = None
    if getattr(args, "follow", None):
        from envoy_dissector.cli.follow_dashboard import follow_into
        from envoy_dissector.dashboard.datasets import Registry

        registry = Registry(max_datasets=args.max_datasets, max_sessions=args.max_sessions,
                            session_idle_s=args.session_idle_minutes * 60)
        on_stop.append(follow_into(registry, args.follow, dissect_kw, args).stop)
    demo = True if args.demo else (False if registry is not None and not captures else None)
    app = create_app(captures, demo=demo, max_upload_mb=args.max_upload_mb,
                     max_datasets=args.max_datasets, max_sessions=args.max_sessions,
                     session_idle_s=args.session_idle_minutes * 60, policy=policy, registry=registry,
                     dissect_kw=dissect_kw)
    if not loopback:
        print(f"warning: binding {args.host}: everyone with the address below (token included) can upload logs "
              "and see the shared captures; plain HTTP, so run it behind TLS on untrusted networks")
    print(f"envoy-dissector dashboard on {browse_url(args.host, args.port, token)} (Ctrl-C to stop)", flush=True)
    if args.debug:
        app.run(host=args.host, port=args.port, debug=True)
    else:
        preauth = {} if args.preauth_timeout is None else {"preauth_timeout_s": args.preauth_timeout}
        serve(app, args.host, args.port, max_body_bytes=int(args.max_upload_mb * 1024 * 1024), **preauth)
