"""Streaming upload route: the browser POSTs the raw file as the request body (no base64, no form
encoding); the server writes its log text, redacted line by line, to a private temporary file in chunks
and analyses it as it arrives.

``dcc.Upload`` would read the whole file into the browser as a base64 data URL and push it through
a callback: fine for kilobytes, wrong for the hundreds of megabytes trace logs reach. Here the body
streams from ``request.stream`` to disk in 1 MiB chunks, so memory stays flat whatever the size.

What the file holds decides, never its name (``.jsonl``, a rotated ``.log.1``, no extension are all
fine): :class:`~envoy_dissector.dashboard.content.ContentMeter` checks the bytes as they stream in,
decompressing gzip as a stream with the cap counting the **decompressed** bytes, so a gzip bomb is
refused after one chunk of work.

The analysis of plain text (of a declared length, within the cap) does not wait for the whole file: once the
first chunk has shown the content is a text log, the job is submitted and reads the file as it grows
(``parser/growing.py``), a block once the block is written; the browser polls the session's jobs while it
uploads, so the first requests are on screen before the last bytes are saved. An upload cut off later withdraws
its job (never shown, never a dataset) and removes the file. A gzip body is analysed once saved.

Protocol (``assets/upload.js`` speaks it)::

    POST <prefix>_dissector/upload?name=<file name>[&log_format=<Envoy --log-format, custom formats only>]
    X-Dissector-Session: <session token>
    Content-Type: application/octet-stream
    <file bytes>

    200 {"job": ID, "bytes": N}            the whole file arrived (its analysis began with its first chunk)
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
from collections.abc import Callable
from pathlib import Path
from typing import IO

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue
from werkzeug.exceptions import RequestEntityTooLarge

from envoy_dissector.dashboard.content import ContentMeter, ContentRefused, too_large_message
from envoy_dissector.dashboard.datasets import Registry, RegistryFull, valid_token
from envoy_dissector.parser.growing import GrowingFile
from envoy_dissector.parser.redact_lines import BATCH_BYTES, RedactingWriter

ROUTE = "/_dissector/upload"
CHUNK_BYTES = 1024 * 1024
#: log text redacted at once before it is written (``RedactingWriter``): the analysis reads the file as it grows
#: by so much at a time at least
REDACT_BATCH_BYTES = BATCH_BYTES
SESSION_HEADER = "X-Dissector-Session"
MAX_LOG_FORMAT = 2000
#: raw body allowed beyond the cap on log text (gzip framing of an incompressible file)
BODY_SLACK_BYTES = 1024 * 1024


def safe_name(name: str | None) -> str:
    """A display name from an untrusted file name: base name only, printable, at most 120 characters."""
    base = re.split(r"[\\/]", name or "")[-1]
    base = re.sub(r"[^\w.\- ()+@=,]", "_", base).strip(" .") or "upload.log"
    return base[-120:]


def new_upload_file(directory: Path) -> Path:
    """A new private (0600) file in ``directory`` for an upload's log text."""
    fd, name = tempfile.mkstemp(prefix="upload-", suffix=".log", dir=directory)
    os.close(fd)
    return Path(name)


class _Announced:
    """The upload file as the redacting writer writes it: each batch is flushed, then counted on ``growing``, so
    the analysis reading the file as it grows only reads what is there."""

    def __init__(self, out: IO[bytes], growing: GrowingFile | None) -> None:
        self.out, self.growing = out, growing

    def write(self, data: bytes) -> int:
        written = self.out.write(data)
        if self.growing is not None:
            self.out.flush()
            self.growing.wrote(len(data))
        return written


def write_upload(stream: IO[bytes], path: Path, max_bytes: int, chunk_bytes: int = CHUNK_BYTES, *,
                 growing: GrowingFile | None = None,
                 judged: Callable[[ContentMeter], bool] | None = None) -> ContentMeter:
    """Copy the log text of ``stream`` (decompressed, when gzip), redacted line by line, into ``path`` while a
    :class:`ContentMeter` checks it; the upload as sent is never written. ``growing`` is told of every batch
    written and of the end (a reader may be analysing the file as it grows); ``judged(meter)`` is called once,
    as soon as the meter has seen enough to accept the content (text or gzip, not binary), or at the end, and
    says whether an analysis now reads the file as it grows (the rest is then redacted on one thread). On
    :class:`ContentRefused` (or any error) ``growing`` fails and the raise goes on; the caller removes the file."""
    told = False
    try:
        with path.open("wb") as out, \
                RedactingWriter(_Announced(out, growing), batch_bytes=REDACT_BATCH_BYTES) as redacted:  # type: ignore[arg-type]
            meter = ContentMeter(max_bytes, sink=redacted.write)
            while True:
                data = stream.read(chunk_bytes)
                if not data:
                    break
                meter.feed(data)
                if not told and meter.judged:
                    told = True
                    if judged is not None and judged(meter):
                        redacted.use_one_thread()
            meter.finish()
        if not told and judged is not None:
            judged(meter)
    except BaseException as exc:
        if growing is not None:
            growing.fail(f"the upload was refused or cut off ({exc or type(exc).__name__})")
        raise
    if growing is not None:
        growing.end()
    return meter


def save_stream(stream: IO[bytes], directory: Path, max_bytes: int,
                chunk_bytes: int = CHUNK_BYTES) -> tuple[Path, ContentMeter]:
    """``write_upload`` into a new private file in ``directory``, removed on :class:`ContentRefused` (or any
    error). Returns the path (``.log``) and the meter (kind, raw and text byte counts)."""
    path = new_upload_file(directory)
    try:
        meter = write_upload(stream, path, max_bytes, chunk_bytes)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, meter


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
        log_format = (request.args.get("log_format") or "").strip()[:MAX_LOG_FORMAT] or None
        path, growing, started = new_upload_file(directory), GrowingFile(), []

        def start(meter: ContentMeter) -> bool:
            # plain text of a declared length within the cap: its analysis begins now and reads the file as the
            # rest arrives (a gzip body's text may still pass the cap: it is analysed once saved, as the cap
            # would otherwise let a bomb's 2 GiB be analysed while they are refused)
            if meter.kind == "text" and length is not None:
                started.append(registry.submit(path, name=name, owner=token, delete=True, log_format=log_format,
                                               total_bytes=length, growing=growing))
            return bool(started)

        try:
            meter = write_upload(request.stream, path, max_bytes, CHUNK_BYTES, growing=growing, judged=start)
            job = started[0] if started else registry.submit(path, name=name, owner=token, delete=True,
                                                              log_format=log_format, total_bytes=meter.text_bytes)
        except BaseException as exc:
            for job in started:
                registry.withdraw(job)
            path.unlink(missing_ok=True)
            if isinstance(exc, ContentRefused):
                return jsonify(error=f"{name}: {exc}"), exc.status
            if isinstance(exc, RequestEntityTooLarge):
                return jsonify(error=f"{name}: {too_large_message(max_bytes)}"), 413
            if isinstance(exc, RegistryFull):
                return jsonify(error=f"{name}: {exc}"), exc.status
            raise
        job.total_bytes = meter.text_bytes
        return jsonify(job=job.id, bytes=meter.raw_bytes)

    server.add_url_rule(route, endpoint="dissector_upload", view_func=upload, methods=["POST"])
