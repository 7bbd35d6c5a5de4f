"""A plain text upload is analysed while it arrives: its job runs, and finishes requests, before the last bytes are
in; an upload cut off after its job began withdraws the job (never a dataset, never shown) and its file; a gzip
upload (its text may still pass the cap) is analysed once saved."""
from __future__ import annotations

import functools
import gzip
import io
import time
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis.capture import dissect
from envoy_dissector.dashboard import upload
from envoy_dissector.dashboard.app import create_app
from envoy_dissector.dashboard.datasets import Registry, new_id

FIXTURE = Path("fixtures/istio-thread/workers/envoy.log.gz")


class _PacedBody(io.RawIOBase):
    """An upload body that, once ``pause_at`` bytes are read, runs ``at_pause`` (which may wait or raise) before
    the rest."""

    def __init__(self, data: bytes, pause_at: int, at_pause) -> None:  # type: ignore[no-untyped-def]
        self.data, self.pause_at, self.at_pause, self.pos, self.paused = data, pause_at, at_pause, 0, False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:  # (the test client measures the body by seeking to its end and back)
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset + (len(self.data) if whence == 2 else self.pos if whence == 1 else 0)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        if self.pos >= self.pause_at and not self.paused:
            self.paused = True
            self.at_pause()
        end = min(len(self.data), self.pos + len(buffer), self.pause_at if not self.paused else len(self.data))
        piece = self.data[self.pos:end]
        buffer[:len(piece)] = piece
        self.pos = end
        return len(piece)


@pytest.fixture(autouse=True)
def _small_steps(monkeypatch):  # type: ignore[no-untyped-def]
    # with small reads and batches of the upload, small blocks and a small first window, a 1 MB fixture behaves
    # as a large upload does with the defaults
    monkeypatch.setattr(upload, "CHUNK_BYTES", 16 << 10)
    monkeypatch.setattr(upload, "REDACT_BATCH_BYTES", 64 << 10)


def _app(max_upload_mb: float = 64):  # type: ignore[no-untyped-def]
    registry = Registry(analyse=functools.partial(dissect, block_bytes=1 << 16), first_window_events=100)
    return create_app(demo=False, max_upload_mb=max_upload_mb, registry=registry), registry


def _upload(app, body: io.RawIOBase, size: int, token: str):  # type: ignore[no-untyped-def]
    return app.server.test_client().post(
        "/_dissector/upload?name=workers.log", input_stream=body,
        headers={"X-Dissector-Session": token, "Content-Type": "application/octet-stream",
                 "Content-Length": str(size)})


def _wait(condition, timeout: float = 30.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def test_the_analysis_finishes_requests_before_the_upload_ends(tmp_path):
    app, registry = _app()
    token, data = new_id(), gzip.decompress(FIXTURE.read_bytes())
    seen: dict[str, object] = {}

    def paused() -> None:  # the upload stops at 3/4 until its job has finished requests (or 30 s)
        pending, _ = registry.poll(token)
        seen["job"] = pending[0] if pending else None
        seen["rows"] = _wait(lambda: bool(pending) and pending[0].partial_rows > 0) and pending[0].partial_rows
        seen["described"] = pending[0].describe() if pending else ""

    r = _upload(app, _PacedBody(data, len(data) * 3 // 4, paused), len(data), token)
    assert r.status_code == 200, r.json
    job = seen["job"]
    assert job is not None and job.id == r.json["job"]  # the job ran while a quarter of the file was to come
    assert seen["rows"] and "requests so far" in str(seen["described"])
    assert registry.wait(job).state == "done", job.error
    # the dataset is the whole file's: as the same file analysed once complete
    whole = tmp_path / "workers.log"
    whole.write_bytes(data)
    ds = registry.get(job.dataset_id, token)
    assert ds is not None
    # (the same requests, each with the same duration, whatever the windows and blocks the analysis read)
    got, expected = (c.requests.select("thread", "downstream_conn_id", "stream_id", "total_us").sort(pl.all())
                     for c in (ds.capture, dissect(whole)))
    assert expected.height > 0 and got.equals(expected)


@pytest.mark.parametrize("text_mb, cut, status, words", [
    (3, False, 413, "upload limit"),  # past the cap (decompressed) after its first MiB
    (1, True, 400, "ends early"),     # a gzip stream cut short: known at its end
])
def test_a_gzip_upload_refused_at_its_end_leaves_nothing(text_mb, cut, status, words):
    app, registry = _app(max_upload_mb=2)
    token, text = new_id(), gzip.decompress(FIXTURE.read_bytes())
    data = gzip.compress(text * text_mb)
    data = data[:-12] if cut else data
    seen = {}

    def after_the_first_chunk() -> None:
        seen["pending"] = [j.id for j in registry.poll(token)[0]]

    r = _upload(app, _PacedBody(data, 20_000, after_the_first_chunk), len(data), token)
    assert r.status_code == status and words in r.json["error"], r.json
    # a gzip body is analysed once saved (its text may still pass the cap): no job had begun
    assert seen["pending"] == []
    assert registry.poll(token) == ([], [])
    assert _wait(lambda: not list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()))
    time.sleep(0.2)
    assert registry.visible(token) == []


def test_an_upload_cut_off_after_its_job_began_leaves_nothing():
    app, registry = _app()
    token, data = new_id(), gzip.decompress(FIXTURE.read_bytes())
    seen = {}

    def cut() -> None:
        seen["pending"] = [j.id for j in registry.poll(token)[0]]
        raise ConnectionResetError("the browser went away")

    r = _upload(app, _PacedBody(data, len(data) // 2, cut), len(data), token)
    assert r.status_code == 400  # (werkzeug: the client disconnected)
    assert len(seen["pending"]) == 1
    assert registry.poll(token) == ([], [])
    assert _wait(lambda: not list(app.server.config["DISSECTOR_UPLOAD_DIR"].iterdir()))
    time.sleep(0.2)
    assert registry.visible(token) == []
