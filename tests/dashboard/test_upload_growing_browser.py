"""In a real headless Chromium: a plain text log's requests are on screen while the log is still being uploaded
(the server analyses the file as it saves it), and the full overview then counts them all."""
from __future__ import annotations

import functools
import gzip
import threading
import time
from pathlib import Path

import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.dashboard import upload
from envoy_dissector.dashboard.content import ContentMeter
from envoy_dissector.dashboard.datasets import Registry
from tests.builders import analysed
from tests.dashboard.browser_steps import TIMEOUT, shot, until

pytestmark = pytest.mark.needs_browser  # skipped without Chromium, failed without it when CI is set (conftest.py)

WORKERS = Path(__file__).resolve().parents[2] / "fixtures" / "istio-thread" / "workers" / "envoy.log.gz"


class _SlowMeter(ContentMeter):
    """Takes each chunk after the first 0.15 s late: the upload lasts seconds, as a large one does."""

    def feed(self, data: bytes) -> None:
        if self.raw_bytes:
            time.sleep(0.15)
        super().feed(data)


def test_requests_show_while_the_upload_is_saved(dash_duo, make_app, monkeypatch, tmp_path, artifacts):
    monkeypatch.setattr(upload, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(upload, "REDACT_BATCH_BYTES", 32 << 10)
    monkeypatch.setattr(upload, "ContentMeter", _SlowMeter)
    saved = threading.Event()
    write = upload.write_upload

    def write_and_tell(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return write(*args, **kwargs)
        finally:
            saved.set()
    monkeypatch.setattr(upload, "write_upload", write_and_tell)
    log = tmp_path / "workers.log"
    log.write_bytes(gzip.decompress(WORKERS.read_bytes()))
    registry = Registry(analyse=functools.partial(dissect, block_bytes=1 << 15), first_window_events=100)
    dash_duo.start_server(make_app(registry=registry))
    dash_duo.wait_for_contains_text("#dataset", "demo: lua-cpu", timeout=TIMEOUT)

    dash_duo.find_element("#upload-file").send_keys(str(log))

    def requests_shown() -> int:
        if not dash_duo.find_elements("#overview-provisional"):
            return 0
        text = [t.text for t in dash_duo.find_elements("#overview-requests")]
        return int(text[0].replace(",", "")) if text and text[0] else 0
    until(requests_shown, what="requests in the provisional overview")
    assert not saved.is_set()  # the upload was still being saved
    # (the server has not answered the upload yet: its progress bar is still there)
    assert dash_duo.find_element("#upload-progress").get_attribute("hidden") is None
    assert "workers.log" in dash_duo.find_element("#upload-message").text
    shot(dash_duo, artifacts, "overview-while-uploading")
    assert saved.wait(60)
    dash_duo.wait_for_text_to_equal("#overview-title", "workers.log", timeout=60)  # the full overview
    expected = int(analysed(WORKERS).summary()["capture"]["requests"])
    dash_duo.wait_for_text_to_equal("#overview-requests", f"{expected:,}", timeout=TIMEOUT)
