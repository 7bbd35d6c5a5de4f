"""Streaming upload route: the browser POSTs the raw file as the request body (no base64, no form
encoding); the server writes it to a private temporary file in chunks and starts its analysis.

``dcc.Upload`` would read the whole file into the browser as a base64 data URL and push it through
a callback: fine for kilobytes, wrong for the hundreds of megabytes trace logs reach. Here the body
streams from ``request.stream`` to disk in 1 MiB chunks, so memory stays flat whatever the size.

Protocol (``assets/upload.js`` speaks it)::

    POST <prefix>_dissector/upload?name=<file name>[&log_format=<Envoy --log-format, custom formats only>]
    X-Dissector-Session: <session token>
    Content-Type: application/octet-stream
    <file bytes>

    200 {"job": ID, "bytes": N}            analysis started; poll the registry for its progress
    400 {"error": TEXT}                    no session, empty body, ...
    413 {"error": TEXT}                    larger than the configured cap
    415 {"error": TEXT}                    not a .log, .txt or .gz file
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import IO

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from envoy_dissector.dashboard.datasets import Registry, valid_token

ROUTE = "/_dissector/upload"
ALLOWED_SUFFIXES: tuple[str, ...] = (".log", ".txt", ".gz")
CHUNK_BYTES = 1024 * 1024
SESSION_HEADER = "X-Dissector-Session"
MAX_LOG_FORMAT = 2000


class UploadTooLarge(Exception):
    """The body exceeds the configured cap."""


def too_large_message(max_bytes: int) -> str:
    return (f"file is larger than this server's upload limit of {max_bytes / 1e6:.0f} MB "
            f"(start it with --max-upload-mb to raise it, or analyse the file with `envoy-dissect analyze`)")


def safe_name(name: str | None) -> str:
    """A display name from an untrusted file name: base name only, printable, at most 120 characters."""
    base = re.split(r"[\\/]", name or "")[-1]
    base = re.sub(r"[^\w.\- ()+@=,]", "_", base).strip(" .") or "upload.log"
    return base[-120:]


def allowed(name: str) -> bool:
    return name.lower().endswith(ALLOWED_SUFFIXES)


def save_stream(stream: IO[bytes], directory: Path, suffix: str, max_bytes: int,
                chunk_bytes: int = CHUNK_BYTES) -> tuple[Path, int]:
    """Copy ``stream`` into a new private file in ``directory``; raise UploadTooLarge past ``max_bytes``
    (the partial file is removed). Returns the path and the byte count."""
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=suffix, dir=directory)
    path = Path(name)
    written = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while True:
                data = stream.read(chunk_bytes)
                if not data:
                    break
                written += len(data)
                if written > max_bytes:
                    raise UploadTooLarge(written)
                out.write(data)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, written


def make_upload_dir() -> Path:
    """A private (0700) directory for uploads in progress."""
    return Path(tempfile.mkdtemp(prefix="envoy-dissector-uploads-"))


def remove_upload_dir(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)


def register_upload_route(server: Flask, registry: Registry, *, max_bytes: int, directory: Path,
                          route: str = ROUTE) -> None:
    """Add the upload endpoint to the Dash app's Flask server."""

    def upload() -> ResponseReturnValue:
        token = request.headers.get(SESSION_HEADER, "")
        if not valid_token(token):
            return jsonify(error="upload without a browser session: reload the page"), 400
        name = safe_name(request.args.get("name"))
        if not allowed(name):
            return jsonify(error=f"{name}: choose an Envoy / istio-proxy log file (.log, .txt or .gz)"), 415
        length = request.content_length
        if length is not None and length > max_bytes:
            return jsonify(error=f"{name}: {too_large_message(max_bytes)}"), 413
        suffix = ".gz" if name.lower().endswith(".gz") else ".log"
        try:
            path, size = save_stream(request.stream, directory, suffix, max_bytes)
        except UploadTooLarge:
            return jsonify(error=f"{name}: {too_large_message(max_bytes)}"), 413
        if size == 0:
            path.unlink(missing_ok=True)
            return jsonify(error=f"{name}: the file is empty"), 400
        log_format = (request.args.get("log_format") or "").strip()[:MAX_LOG_FORMAT] or None
        job = registry.submit(path, name=name, owner=token, delete=True, log_format=log_format)
        return jsonify(job=job.id, bytes=size)

    server.add_url_rule(route, endpoint="dissector_upload", view_func=upload, methods=["POST"])
