"""``dashboard --follow FILE``: the followed log's analysis feeds a live job every browser session sees
(``dashboard/live_job.py``); the log is read and analysed on threads of their own for as long as the server runs."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from envoy_dissector.cli.follow import LiveAnalysis
from envoy_dissector.cli.tail import FileFollower, LivePipe, Pump, follow_file
from envoy_dissector.dashboard.datasets import Registry
from envoy_dissector.dashboard.live_job import LiveJob, start_live_job
from envoy_dissector.parser.errors import InputError
from envoy_dissector.parser.sources import shown_name


def follow_into(registry: Registry, target: str, dissect_kw: dict[str, Any]) -> LiveJob:
    """Start following ``target`` (a log file, rotation handled) into a shared live job of ``registry``."""
    path = Path(target)
    if path.is_dir():
        raise InputError("is a directory; follow one log file", path=shown_name(target))
    name = shown_name(target)
    job = start_live_job(registry, name, path)
    pipe = LivePipe(name)
    engine = LiveAnalysis(pipe.source, format=dissect_kw.get("format", "auto"), log_format=dissect_kw.get("log_format"),
                          redact=dissect_kw.get("redact", True), on_finished=job.add_finished)
    job.count_lines = lambda: engine.lines_read
    pump = Pump("envoy-dissect-dashboard-tail", follow_file(FileFollower(path), pipe))

    def watch() -> None:  # an analysis that ends (a bad format, the log unreadable) is shown as the job's error
        engine.done.wait()
        failure = engine.error or pump.error
        job.error, job.state = (str(failure) if failure else "the follow ended"), "error"

    engine.start()
    pump.start()
    threading.Thread(target=watch, name="envoy-dissect-dashboard-follow", daemon=True).start()
    return job
