"""Time a large upload through the dashboard: a real headless Chromium sends a generated capture
through the page's file input (streamed as the raw request body, no base64), the server analyses it,
and we wait for the overview to show its request count.

    python bench/dashboard_upload.py [--size-mb 220] [--fixture fixtures/istio-thread/workers/envoy.log.gz]
                                     [--out /tmp/envoy-dashboard-bench/capture.log] [--no-browser]
                                     [--corpus /tmp/envoy-corpus/corpus.log]

The capture is a real fixture replicated until it reaches ``--size-mb``: each copy shifts the
timestamps by whole seconds (so time moves forward), connection ids by the highest id so far + 1,
and folds the copy number into each x-request-id, so it reads like one long-lived proxy.

Prints: size, upload time, time to the provisional overview (the streaming analysis shows the requests
finished so far while it runs), time to the full overview (from choosing the file to the finished
overview showing the request count), the time each other view takes, and peak RSS of the server process.
With ``--no-browser`` the file is POSTed with ``requests`` (streamed from disk) instead.
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_SECOND = re.compile(rb"(?m)^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
_REWRITE = re.compile(
    rb"(?m)^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"
    rb"|(?P<cpre>\[C|ConnectionId\":\")(?P<cid>\d+)"
    rb"|(?P<xpre>'x-request-id', ')(?P<xid>[0-9a-f]{8})"
)


def _second(text: bytes) -> datetime:
    return datetime.strptime(text.decode(), "%Y-%m-%dT%H:%M:%S")


def make_capture(fixture: Path, out: Path, size_mb: float) -> tuple[int, int]:
    """Replicate ``fixture`` (Istio text format) into ``out`` until ``size_mb``; returns (bytes, copies)."""
    opener = gzip.open if fixture.suffix == ".gz" else open
    with opener(fixture, "rb") as fh:  # type: ignore[operator]
        base: bytes = fh.read()
    stamps = _SECOND.findall(base)
    first, last = _second(stamps[0]), _second(stamps[-1])
    span = int((last - first).total_seconds()) + 1
    max_conn = max(int(c) for c in re.findall(rb"(?:\[C|ConnectionId\":\")(\d+)", base))
    target = int(size_mb * 1e6)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = copies = 0
    with out.open("wb") as dst:
        while written < target:
            shift, offset, copy = timedelta(seconds=copies * (span + 1)), copies * (max_conn + 1), copies

            def sub(m: re.Match[bytes], shift: timedelta = shift, offset: int = offset, copy: int = copy) -> bytes:
                if m.group("ts") is not None:
                    return (_second(m.group("ts")) + shift).strftime("%Y-%m-%dT%H:%M:%S").encode()
                if m.group("cid") is not None:
                    return m.group("cpre") + str(int(m.group("cid")) + offset).encode()
                xid = int(m.group("xid"), 16) ^ (copy * 0x9E3779B1 & 0xFFFFFFFF)
                return m.group("xpre") + f"{xid:08x}".encode()

            piece = _REWRITE.sub(sub, base)
            dst.write(piece)
            written += len(piece)
            copies += 1
    return written, copies


def cut_corpus(corpus: Path, out: Path, size_mb: float) -> None:
    """The first ``size_mb`` of ``corpus``, ending at a line end."""
    out.parent.mkdir(parents=True, exist_ok=True)
    left = int(size_mb * 1e6)
    with corpus.open("rb") as src, out.open("wb") as dst:
        while left > 0:
            data = src.read(min(left, 1 << 24))
            if not data:
                break
            left -= len(data)
            if left <= 0:
                data = data[: data.rfind(b"\n") + 1]
            dst.write(data)


def serve(app, port: int = 0):  # type: ignore[no-untyped-def]
    """The app in this process (for --no-browser, which reads the registry directly)."""
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = make_server("127.0.0.1", port, app.server, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


def serve_process(max_upload_mb: float) -> tuple[subprocess.Popen[bytes], str]:
    """``envoy-dissect dashboard`` in its own process, so the browser driver here does not compete with
    the analysis for this interpreter's GIL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "envoy_dissector.cli.main", "dashboard", "--port", str(port),
                             "--max-upload-mb", str(max_upload_mb)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("dashboard did not start")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _poll_upload(driver, path: Path, t0: float, marks: dict[str, float]) -> bool:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    msg = " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, "#upload-message, #job-message"))
    # (the upload's job appears once the file is saved: "NAME: analysing N% ...", or waiting for a slot)
    if "uploaded" not in marks and (f"{path.name}: analysing" in msg or "waiting for a free analysis slot" in msg):
        marks["uploaded"] = time.time() - t0
    if "upload failed" in msg or "limit" in msg:
        raise SystemExit(f"upload failed: {msg}")
    title = driver.find_elements(By.ID, "overview-title")
    counts = driver.find_elements(By.ID, "overview-requests")
    shown = counts[0].text.replace(",", "") if counts else ""
    if not (title and path.name in title[0].text and shown.isdigit()):
        return False
    marks.setdefault("job_shown", time.time() - t0)
    if driver.find_elements(By.ID, "overview-provisional"):  # the analysis is still running
        if int(shown) > 0:
            marks.setdefault("provisional", time.time() - t0)
        return False
    marks["overview"] = time.time() - t0
    marks["requests"] = float(shown)
    return True


def upload_with_browser(url: str, path: Path, timeout: float) -> dict[str, float]:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.common.by import By

    # (the dashboard tests' conftest imports ``tests.builders``: the repository's root goes on the path too)
    sys.path[:0] = [str(ROOT / "tests" / "dashboard"), str(ROOT)]
    import conftest  # noqa: F401 - selenium 3 / urllib3 2 shim

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--window-size=1440,1000"):
        options.add_argument(arg)
    options.binary_location = os.environ.get("DASH_TEST_CHROMEPATH", shutil.which("chromium") or "")
    driver = webdriver.Chrome(options=options)
    marks: dict[str, float] = {}
    try:
        driver.get(url)
        deadline = time.time() + 30
        while not driver.find_elements(By.ID, "upload-file") and time.time() < deadline:
            time.sleep(0.1)
        t0 = time.time()
        driver.find_element(By.ID, "upload-file").send_keys(str(path))
        deadline = t0 + timeout
        while time.time() < deadline:
            try:
                done = _poll_upload(driver, path, t0, marks)
            except StaleElementReferenceException:  # Dash re-rendered what we were reading
                done = False
            if done:
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"no overview after {timeout:.0f} s")
        driver.save_screenshot(str(ROOT / "test-artifacts" / "bench-large-upload.png"))
        # the other views on the big capture: first grid block, event loop, waterfall
        for tab, ready, key in (("requests", ".ag-center-cols-container .ag-row", "grid"),
                                ("loop", "#loop-graph .main-svg", "loop"),
                                ("waterfall", "#waterfall-graph .main-svg", "waterfall")):
            t = time.time()
            driver.find_element(By.ID, f"tab-{tab}").click()
            while not driver.find_elements(By.CSS_SELECTOR, ready) and time.time() - t < 120:
                time.sleep(0.05)
            marks[key] = time.time() - t
            time.sleep(1.0)
            driver.save_screenshot(str(ROOT / "test-artifacts" / f"bench-large-{tab}.png"))
    finally:
        driver.quit()
    return marks


def upload_with_requests(url: str, path: Path, registry, timeout: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    import requests

    from envoy_dissector.dashboard.datasets import Dataset, new_id
    from envoy_dissector.dashboard.views import overview

    token = new_id()
    t0 = time.time()
    with path.open("rb") as fh:
        r = requests.post(f"{url}/_dissector/upload", params={"name": path.name}, data=fh,
                          headers={"X-Dissector-Session": token, "Content-Type": "application/octet-stream"})
    r.raise_for_status()
    marks = {"uploaded": time.time() - t0}
    job = registry.wait(registry.job(r.json()["job"], token), timeout)
    if job.state != "done":
        raise SystemExit(f"analysis failed: {job.error}")
    ds: Dataset = registry.get(job.dataset_id, token)
    overview(ds)
    marks["overview"] = time.time() - t0
    marks["requests"] = float(ds.summary()["capture"]["requests"])
    return marks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=220.0)
    ap.add_argument("--fixture", type=Path, default=ROOT / "fixtures/istio-thread/workers/envoy.log.gz")
    ap.add_argument("--out", type=Path, default=Path("/tmp/envoy-dashboard-bench/capture.log"))
    ap.add_argument("--corpus", type=Path, default=None,
                    help="upload the first --size-mb of this make_corpus.py output instead (one long-lived proxy "
                         "with a few restarts; a replicated fixture restarts the proxy every ~70 KB)")
    ap.add_argument("--no-browser", action="store_true", help="POST with requests instead of Chromium")
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args(argv)

    if args.corpus is not None:
        args.out = args.out.with_name(f"corpus-{args.size_mb:.0f}.log")
        if not args.out.exists():
            cut_corpus(args.corpus, args.out, args.size_mb)
    elif not args.out.exists() or args.out.stat().st_size < args.size_mb * 1e6:
        t = time.time()
        size, copies = make_capture(args.fixture, args.out, args.size_mb)
        print(f"generated {args.out}: {size / 1e6:.0f} MB, {copies} copies of {args.fixture} "
              f"in {time.time() - t:.1f} s", flush=True)
    size = args.out.stat().st_size
    (ROOT / "test-artifacts").mkdir(exist_ok=True)

    cap_mb = max(2048, size / 2**20 + 1)
    if args.no_browser:
        from envoy_dissector.dashboard.app import create_app

        app = create_app(max_upload_mb=cap_mb)
        server, url = serve(app)
        try:
            marks = upload_with_requests(url, args.out, app.server.config["DISSECTOR_REGISTRY"], args.timeout)
        finally:
            server.shutdown()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    else:
        proc, url = serve_process(cap_mb)
        try:
            marks = upload_with_browser(url, args.out, args.timeout)
            rss = peak_rss_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"capture: {size / 1e6:.0f} MB, {marks['requests']:.0f} requests in the overview")
    print(f"upload (browser → server, streamed to disk): {marks.get('uploaded', float('nan')):.1f} s")
    if "provisional" in marks:
        print(f"the upload's page shown (file chosen → its provisional overview, no request yet): "
          f"{marks.get('job_shown', float('nan')):.1f} s")
    print(f"time to the provisional overview (file chosen → first requests shown): {marks['provisional']:.1f} s")
    print(f"time to the full overview (file chosen → analysis done, overview shown): {marks['overview']:.1f} s")
    for key, what in (("grid", "Requests: first block of rows"), ("loop", "Event loop: figure"),
                      ("waterfall", "Waterfall: slowest request")):
        if key in marks:
            print(f"{what} after switching tab: {marks[key]:.1f} s")
    print(f"peak RSS of the server process: {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
