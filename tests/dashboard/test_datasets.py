"""datasets: per-session ownership, shared demo, LRU cap, background jobs with progress and errors."""
from __future__ import annotations

import gzip
import os
import shutil
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.analysis import dissect
from envoy_dissector.dashboard.datasets import (
    Registry,
    RegistryFull,
    decompressed_size,
    demo_capture,
    demo_sources,
    load_demo,
    new_id,
    valid_token,
)
from envoy_dissector.parser.sources import Source

FIXTURE = Path("fixtures/istio-thread/upstream-delay/envoy.log.gz")


@pytest.fixture(scope="module")
def capture():
    return dissect(str(FIXTURE))


def test_tokens():
    t = new_id()
    assert valid_token(t) and t != new_id()
    assert not valid_token("") and not valid_token("x" * 23) and not valid_token("../../etc/passwd....") \
        and not valid_token(None)


def test_sessions_see_only_their_own_uploads_and_the_shared_ones(capture):
    reg = Registry()
    shared = reg.add(capture, name="demo", owner=None)
    a = reg.add(capture, name="a", owner="tok-a")
    b = reg.add(capture, name="b", owner="tok-b")
    assert [d.name for d in reg.visible("tok-a")] == ["a", "demo"]
    assert [d.name for d in reg.visible("tok-b")] == ["b", "demo"]
    assert [d.name for d in reg.visible(None)] == ["demo"]
    assert reg.get(a.id, "tok-a") is a and reg.get(a.id, "tok-b") is None and reg.get(a.id, None) is None
    assert reg.get(shared.id, "tok-b") is shared
    assert reg.get("unknown", "tok-a") is None
    assert not reg.forget(shared.id, "tok-a") and not reg.forget(b.id, "tok-a")
    assert reg.forget(a.id, "tok-a") and reg.get(a.id, "tok-a") is None


def test_lru_cap_drops_least_recently_used_uploads_never_shared(capture):
    reg = Registry(max_datasets=2)
    demo = reg.add(capture, name="demo", owner=None)
    first = reg.add(capture, name="1", owner="t")
    second = reg.add(capture, name="2", owner="t")
    assert reg.get(first.id, "t") is first  # touch: now second is the least recently used
    reg.add(capture, name="3", owner="t")
    assert reg.get(second.id, "t") is None and reg.get(first.id, "t") is first
    assert reg.get(demo.id, "t") is demo


def test_one_sessions_uploads_never_evict_another_sessions(capture, tmp_path):
    reg = Registry(max_datasets=2)
    evicted: list[str] = []
    reg.on_evict(evicted.append)
    other = reg.add(capture, name="other", owner="tok-b")
    spill = tmp_path / "spill"
    spill.mkdir()
    (spill / "part.parquet").write_bytes(b"x")
    first = reg.add(capture, name="1", owner="tok-a", files=[spill])
    for n in range(2, 8):
        reg.add(capture, name=str(n), owner="tok-a")
    assert [d.name for d in reg.visible("tok-a")] == ["7", "6"]
    assert reg.get(other.id, "tok-b") is other  # untouched by tok-a's seven uploads
    assert first.id in evicted and other.id not in evicted and len(evicted) == 5
    assert not spill.exists()  # the evicted dataset's files are removed


def test_sessions_are_capped_and_idle_ones_give_their_room(capture):
    reg = Registry(max_sessions=2, session_idle_s=60)
    a = reg.add(capture, name="a", owner="tok-a")
    reg.add(capture, name="b", owner="tok-b")
    reg.admit("tok-a")  # a session already holding data may go on
    with pytest.raises(RegistryFull) as full:
        reg.admit("tok-c")
    assert full.value.status == 503 and "2 browser sessions" in str(full.value)
    assert reg.get(a.id, "tok-a") is a
    reg._last_used["tok-b"] -= 3600  # tok-b went quiet an hour ago
    reg.admit("tok-c")
    assert reg.visible("tok-b") == [] and reg.sessions() == 1


def test_pending_analyses_per_session_are_capped(tmp_path):
    import threading

    gate = threading.Event()

    def slow(*args, **kwargs):
        gate.wait(30)
        return dissect(str(FIXTURE))

    reg = Registry(max_pending=2, workers=1, analyse=slow)
    jobs = []
    for n in range(2):
        path = tmp_path / f"{n}.gz"
        shutil.copyfile(FIXTURE, path)
        jobs.append(reg.submit(path, name=f"{n}.gz", owner="t"))
    with pytest.raises(RegistryFull) as full:
        reg.admit("t")
    assert full.value.status == 429
    reg.admit("u")  # another session is not held up by t's queue
    gate.set()
    for job in jobs:
        assert reg.wait(job).state == "done"
    reg.admit("t")
    reg.shutdown(wait=True)


def test_job_analyses_in_background_reports_progress_and_keeps_the_file_while_the_dataset_lives(tmp_path):
    path = tmp_path / "upload.gz"
    shutil.copyfile(FIXTURE, path)
    reg = Registry()
    job = reg.submit(path, name="upstream-delay.log.gz", owner="t")
    reg.wait(job)
    assert job.state == "done", job.error
    assert path.exists()  # a request's lines are read again from it
    assert job.total_bytes == len(gzip.decompress(FIXTURE.read_bytes()))
    assert job.done_bytes == job.total_bytes and job.fraction == 1.0
    ds = reg.get(job.dataset_id, "t")
    assert ds is not None and ds.name == "upstream-delay.log.gz"
    assert ds.capture.requests["origin"][0] == "upstream-delay.log.gz"  # never the temporary path
    pending, finished = reg.poll("t")
    assert not pending and finished == [job]
    assert reg.poll("t", {job.id}) == ([], [])  # the browser has seen it
    assert reg.poll("other") == ([], [])
    assert reg.job(job.id, "other") is None
    uid = ds.capture.requests.filter("complete")["request_uid"][0]
    assert ds.capture.request_lines(ds.request(uid)).equals(dissect(Source("upstream-delay.log.gz", path=FIXTURE)).request_lines(uid))
    assert reg.forget(ds.id, "t") and not path.exists()


def test_a_running_analysis_shows_the_requests_finished_so_far(tmp_path):
    path = tmp_path / "upload.gz"
    shutil.copyfile(FIXTURE, path)
    seen: list[int] = []
    gate = threading.Event()

    def watched(*args, on_finished, **kwargs):
        def emit(requests, phases):
            on_finished(requests, phases)
            seen.append(job.partial_rows)
            gate.wait(30)  # hold the analysis while the test looks at the job
        return dissect(*args, on_finished=emit, window_events=500, **kwargs)

    reg = Registry(analyse=watched)
    job = reg.submit(path, name="u.gz", owner="t")
    deadline = time.time() + 30
    while not seen and time.time() < deadline:
        time.sleep(0.01)
    assert job.state == "running" and 0 < job.partial_rows == job.partial().height == seen[0]
    assert set(job.partial().columns) >= {"request_uid", "total_us", "complete", "loop_queue_us"}
    gate.set()
    reg.wait(job)
    assert job.state == "done" and seen[-1] == reg.get(job.dataset_id, "t").capture.requests.height

def test_job_error_for_a_file_that_is_not_an_envoy_log(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\nworld\n")
    reg = Registry()
    job = reg.wait(reg.submit(path, name="notes.txt", owner="t"))
    assert job.state == "error"
    assert "not an Envoy / istio-proxy log" in job.error and "tried" in job.error
    assert job.describe().startswith("notes.txt")
    assert not path.exists()


def test_decompressed_size(tmp_path):
    plain = tmp_path / "a.log"
    plain.write_bytes(b"x" * 1000)
    assert decompressed_size(plain) == 1000
    gz = tmp_path / "a.gz"
    gz.write_bytes(gzip.compress(b"y" * 100_000))
    assert decompressed_size(gz) == 100_000


def test_demo_is_bundled_and_loads():
    sources = demo_sources()
    assert [s.name for s, _ in sources] == ["demo/lua-cpu.log.gz", "demo/lua-cpu-baseline.log.gz"]
    reg = Registry()
    (lua, base) = load_demo(reg)
    assert lua.shared and lua.summary()["capture"]["requests"] == 40
    assert base.summary()["capture"]["requests"] == 20


def test_a_demo_capture_is_analysed_once_a_process_and_each_registry_holds_its_own(tmp_path, monkeypatch):
    from envoy_dissector.dashboard import datasets

    log = tmp_path / "demo.log.gz"
    shutil.copyfile(FIXTURE, log)
    analysed = []
    real = datasets.dissect

    def dissect_counted(*args, **kw):
        analysed.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(datasets, "dissect", dissect_counted)
    source = Source("demo/x.log.gz", path=log)
    capture = demo_capture(source, "demo: x")
    assert demo_capture(source, "demo: x") is capture and len(analysed) == 1
    a, b = Registry(), Registry()
    in_a, in_b = a.add(capture, name="demo: x", owner=None), b.add(capture, name="demo: x", owner=None)
    assert in_a.id != in_b.id and in_a.detail.directory != in_b.detail.directory
    assert a.get(in_b.id, None) is None and b.get(in_a.id, None) is None
    assert in_a.summary() == in_b.summary() == capture.summary()
    mtime = log.stat().st_mtime_ns
    os.utime(log, ns=(mtime, mtime + 1_000_000_000))  # the file changed: analysed again
    assert demo_capture(source, "demo: x") is not capture and len(analysed) == 2


def test_a_dataset_holds_the_contract_columns_and_keeps_the_rest_on_disk_until_it_is_dropped():
    from envoy_dissector.dashboard.held import HELD_COLUMNS

    whole = dissect("fixtures/istio-thread/lua-cpu/envoy.log.gz")
    full_width = whole.requests.columns
    reg = Registry()
    ds = reg.add(whole, name="lua", owner="t")
    held = ds.capture.requests
    assert held.columns == [c for c in HELD_COLUMNS if c in full_width] and len(full_width) > len(held.columns)
    assert isinstance(held.schema["origin"], pl.Enum) and isinstance(held.schema["path"], pl.Enum)
    assert held["path"].cast(pl.String).to_list() == whole.requests["path"].to_list()
    assert ds.capture.phases.height == 0 and ds.capture.queueing.height == 0  # (on disk)
    assert ds.summary()["capture"]["requests"] == ds.client_requests == 40
    assert ds.request(ds.slowest_uid)["total_us"] == held.filter("complete", ~pl.col("internal"))["total_us"].max()
    slowest = ds.request(ds.slowest_uid)
    assert ds.slowest_lines is not None and ds.request_lines(slowest).equals(whole.request_lines(ds.slowest_uid))
    on_disk = ds.detail.directory
    assert {p.name for p in on_disk.iterdir()} == {"requests.parquet", "phases.parquet", "queueing.parquet"}
    with pytest.raises(KeyError):
        ds.request("no such request")
    assert reg.forget(ds.id, "t") and not on_disk.exists()
