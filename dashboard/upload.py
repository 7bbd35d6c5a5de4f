"""Streaming upload route: the browser POSTs the raw file as the request body (no base64, no form
encoding); the server writes its log text, redacted line by line, to a private temporary file in chunks
and starts its analysis.

``dcc.Upload`` would read the whole file into the browser as a base64 data URL and push it through
a callback: fine for kilobytes, wrong for the hundreds of megabytes trace logs reach. Here the body
streams from ``request.stream`` to disk in 1 MiB chunks, so memory stays flat whatever the size.

What the file holds decides, never its name (``.jsonl``, a rotated ``.log.1``, no extension are all
fine): :class:`~envoy_dissector.dashboard.content.ContentMeter` checks the bytes as they stream in,
decompressing gzip as a stream with the cap counting the **decompressed** bytes, so a gzip bomb is
refused after one chunk of work.

Protocol (``assets/upload.js`` speaks it)::

    POST <prefix>_dissector/upload?name=<file name>[&log_format=<Envoy --log-format, custom formats only>]
    X-Dissector-Session: <session token>
    Content-Type: application/octet-stream
    <file bytes>

    200 {"job": ID, "bytes": N}            analysis started; poll the registry for its progress
    400 {"error": TEXT}                    no session, empty body, corrupt or truncated gzip
    413 {"error": TEXT}                    more log text (decompressed) than the configured cap
    415 {"error": TEXT}                    not a text log (binary, an archive, another compression)
    429 {"error": TEXT}                    this session already has the most analyses waiting
    503 {"error": TEXT}                    the server holds the most sessions it may
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
from werkzeug.exceptions import RequestEntityTooLarge

from envoy_dissector.dashboard.content import ContentMeter, ContentRefused, too_large_message
from envoy_dissector.dashboard.datasets import Registry, RegistryFull, valid_token
from envoy_dissector.parser.redact_lines import RedactingWriter

ROUTE = "/_dissector/upload"
CHUNK_BYTES = 1024 * 1024
SESSION_HEADER = "X-Dissector-Session"
MAX_LOG_FORMAT = 2000
#: raw body allowed beyond the cap on log text (gzip framing of an incompressible file)
BODY_SLACK_BYTES = 1024 * 1024


def safe_name(name: str | None) -> str:
    """A display name from an untrusted file name: base name only, printable, at most 120 characters."""
    base = re.split(r"[\\/]", name or "")[-1]
    base = re.sub(r"[^\w.\- ()+@=,]", "_", base).strip(" .") or "upload.log"
    return base[-120:]


def save_stream(stream: IO[bytes], directory: Path, max_bytes: int,
                chunk_bytes: int = CHUNK_BYTES) -> tuple[Path, ContentMeter]:
    """Copy the log text of ``stream`` (decompressed, when gzip), redacted line by line, into a new private
    file in ``directory`` while a :class:`ContentMeter` checks it; the upload as sent is never written. On
    :class:`ContentRefused` (or any error) the partial file is removed. Returns the path (``.log``) and the
    meter (kind, raw and text byte counts)."""
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".part", dir=directory)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out, RedactingWriter(out) as redacted:
            meter = ContentMeter(max_bytes, sink=redacted.write)
            while True:
                data = stream.read(chunk_bytes)
                if not data:
                    break
                meter.feed(data)
            meter.finish()
        final = path.with_suffix(".log")
        path.rename(final)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return final, meter


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
        try:
            registry.admit(token)
        except RegistryFull as exc:
            return jsonify(error=f"{name}: {exc}"), exc.status
        length = request.content_length
        if length is not None and length > max_bytes:
            return jsonify(error=f"{name}: {too_large_message(max_bytes)}"), 413
        # Flask's MAX_CONTENT_LENGTH is sized for callbacks; here the meter caps the log text
        request.max_content_length = max_bytes + BODY_SLACK_BYTES
        try:
            path, meter = save_stream(request.stream, directory, max_bytes)
        except ContentRefused as exc:
            return jsonify(error=f"{name}: {exc}"), exc.status
        except RequestEntityTooLarge:
            return jsonify(error=f"{name}: {too_large_message(max_bytes)}"), 413
        log_format = (request.args.get("log_format") or "").strip()[:MAX_LOG_FORMAT] or None
        try:
            job = registry.submit(path, name=name, owner=token, delete=True, log_format=log_format,
                                  total_bytes=meter.text_bytes)
        except RegistryFull as exc:
            path.unlink(missing_ok=True)
            return jsonify(error=f"{name}: {exc}"), exc.status
        return jsonify(job=job.id, bytes=meter.raw_bytes)

    server.add_url_rule(route, endpoint="dissector_upload", view_func=upload, methods=["POST"])
