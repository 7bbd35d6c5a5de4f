"""Builders shared by the test folders: one module, so that no test module imports another (or a conftest).

* fixture captures: ``FIXTURE_LOGS`` (every trace log under fixtures/, with the format it must be detected as);
  ``analysed`` (a capture file analysed once per test process, for the tests that only read it);
* Dash callback requests: ``body`` (a ``/_dash-update-component`` request for one callback), ``pattern``;
* a served upload and every answer of the UI about it: ``serve_upload``, ``every_answer``;
* processes: ``DashboardProcess`` (``envoy-dissect dashboard`` in a subprocess), ``RssSampler`` (peak RSS).
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

if TYPE_CHECKING:
    from envoy_dissector.analysis import Capture

# --- fixture captures -------------------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

#: fixtures/<top>/... -> format id the detector must report.
EXPECTED_FORMAT = {
    "envoy": "envoy", "envoy-us": "envoy",
    "istio": "istio", "old-format": "istio",
    "istio-thread": "istio-thread", "kubectl": "istio-thread",
    "istio-json": "istio-json", "istio-json-old": "istio-json",
    "custom": "custom",
    "legacy-1.19": "istio",
}
#: Folders of captures made at another log level, holding one folder per format.
LEVEL_DIRS = frozenset({"debug-level", "info-level"})
#: Top folders whose format has millisecond timestamps / no thread id.
MILLISECOND_DIRS = frozenset({"envoy"})
NO_THREAD_DIRS = frozenset({"istio", "old-format", "istio-json-old", "legacy-1.19"})


@dataclass(frozen=True)
class FixtureLog:
    path: Path
    rel: str
    top: str
    expected_format: str
    meta: dict[str, Any] | None
    #: the --log-format to pass (custom captures only; the others are auto-detected)
    log_format: str | None

    @property
    def pattern(self) -> str | None:
        return self.meta["log_format"]["pattern"] if self.meta else None


def _meta_for(path: Path) -> dict[str, Any] | None:
    """The capture's meta.json; for a multi-pod log, the first pod's (all pods share format and start)."""
    for d in (path.parent, *path.parents):
        if (d / "meta.json").exists():
            return json.loads((d / "meta.json").read_text())
        if d == FIXTURES:
            break
    pods = sorted(path.parent.glob("*/meta.json"))
    return json.loads(pods[0].read_text()) if pods else None


def fixture_logs() -> list[FixtureLog]:
    paths = sorted({*FIXTURES.glob("**/*.log"), *FIXTURES.glob("**/*.log.gz")})
    logs = []
    for path in paths:
        rel = path.relative_to(FIXTURES).as_posix()
        top = rel.split("/")[0]
        if top in LEVEL_DIRS:  # debug-level/<format>/..., info-level/<format>/...: the format is one level down
            top = rel.split("/")[1]
        if top == "real":  # excerpts written by other people: checked by tests/real against their manifest
            continue
        meta = _meta_for(path)
        log_format = meta["log_format"]["pattern"] if top == "custom" and meta else None
        logs.append(FixtureLog(path, rel, top, EXPECTED_FORMAT[top], meta, log_format))
    return logs


FIXTURE_LOGS = fixture_logs()


def analysed(log: str | Path, log_format: str | None = None) -> Capture:
    """``dissect(log, log_format=...)``, once per test process (an xdist worker) for every test module: the
    tests that only read a capture share it instead of each analysing the file again (keyed by the path as
    given: the name is the capture's origin in what it shows). A capture that fails raises on every call."""
    return _analysed(str(log), log_format)


@functools.cache
def _analysed(log: str, log_format: str | None) -> Capture:
    from envoy_dissector.analysis import dissect

    return dissect(log, log_format=log_format)


def by_rel(rel: str) -> FixtureLog:
    return next(f for f in FIXTURE_LOGS if f.rel == rel)


# --- Dash callback requests -------------------------------------------------------------------------------

DISPATCH = "/_dash-update-component"
UPLOAD = "/_dissector/upload"


def outputs_of(key: str) -> object:
    if key.startswith(".."):
        return [{"id": part.rsplit(".", 1)[0], "property": part.rsplit(".", 1)[1]}
                for part in key.strip(".").split("...")]
    ident, prop = key.rsplit(".", 1)
    return {"id": ident, "property": prop}


def pattern(spec: dict) -> dict | None:
    """The id of a pattern-matching (ALL) dependency, ``None`` for a plain one."""
    ident = spec["id"]
    return json.loads(ident) if isinstance(ident, str) and ident.startswith("{") else None


def item(spec: dict, value: object) -> object:
    if (ident := pattern(spec)) is not None:  # ALL: a list with one concrete component
        concrete = {k: (v if isinstance(v, str) else 3) for k, v in ident.items()}
        if "wait" in concrete:
            concrete["wait"] = 0
        return [{"id": concrete, "property": spec["property"], "value": value}]
    return {"id": spec["id"], "property": spec["property"], "value": value}


def body(key: str, entry: dict, values: dict[int, object], valid: dict) -> dict:
    specs = entry["inputs"] + entry["state"]

    def value(i: int, spec: dict) -> object:
        if i in values:
            return values[i]
        if pattern(spec) is not None:
            return 1
        return valid.get((spec["id"], spec["property"]), 1 if spec["property"] in ("n_clicks", "n_intervals")
                         else None)

    items = [item(s, value(i, s)) for i, s in enumerate(specs)]
    n = len(entry["inputs"])
    first = entry["inputs"][0]
    changed = f"{first['id']}.{first['property']}"
    return {"output": key, "outputs": outputs_of(key), "inputs": items[:n], "state": items[n:],
            "changedPropIds": [changed]}


# --- the dashboard over HTTP: an upload, its own callbacks ----------------------------------------------------

def upload(http: requests.Session, base: str, session: str, data: bytes, name: str) -> requests.Response:
    return http.post(f"{base}{UPLOAD}", params={"name": name}, data=data, timeout=120,
                     headers={"X-Dissector-Session": session, "Content-Type": "application/octet-stream"})


class Callbacks:
    """Calls the app's own Dash callbacks over HTTP, as the page does."""

    def __init__(self, http: requests.Session, base: str) -> None:
        self.http, self.base = http, base
        deps = http.get(f"{base}/_dash-dependencies", timeout=30).json()
        self.poll_key = next(d["output"] for d in deps if "dataset.options" in d["output"])
        self.overview_key = next(d["output"] for d in deps if "overview.children" in d["output"])
        self.requests = 0

    def _call(self, output: str, inputs: list, state: list) -> dict:
        outputs = outputs_of(output)
        body = {"output": output, "outputs": outputs, "inputs": inputs, "state": state,
                "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"]}
        r = self.http.post(f"{self.base}{DISPATCH}", json=body, timeout=60)
        self.requests += 1
        assert r.status_code in (200, 204), (r.status_code, r.text[:300])
        return r.json()["response"] if r.status_code == 200 else {}

    def poll(self, session: str) -> tuple[list[dict], bool]:
        """The session's dataset options and whether analyses are pending (the header's poll callback)."""
        resp = self._call(self.poll_key, [{"id": "job-poll", "property": "n_intervals", "value": 1},
                                          {"id": "upload-job", "property": "data", "value": None}],
                          [{"id": "session", "property": "data", "value": {"token": session}},
                           {"id": "dataset", "property": "value", "value": None},
                           {"id": "jobs-seen", "property": "data", "value": []},
                           {"id": "dataset", "property": "options", "value": None}])
        return resp["dataset"]["options"], not resp["job-poll"]["disabled"]

    def overview(self, session: str, dataset_id: str) -> str:
        resp = self._call(self.overview_key, [{"id": "dataset", "property": "value", "value": dataset_id},
                                              {"id": "job-poll", "property": "n_intervals", "value": 1}],
                          [{"id": "session", "property": "data", "value": {"token": session}},
                           {"id": "overview-rows", "property": "data", "value": None}])
        return json.dumps(resp["overview"]["children"])


# --- a served upload, and every answer of the UI about it ---------------------------------------------------

def serve_upload(data: bytes):
    """A real app that received ``data`` as an upload and finished analysing it: (app, client, token, dataset)."""
    from envoy_dissector.dashboard.app import create_app  # dash is imported by the tests that use it only
    from envoy_dissector.dashboard.datasets import new_id

    app = create_app(demo=False)
    client, token = app.server.test_client(), new_id()
    r = client.post("/_dissector/upload?name=planted.log", data=data, headers={"X-Dissector-Session": token})
    assert r.status_code == 200, r.json
    reg = app.server.config["DISSECTOR_REGISTRY"]
    job = reg.wait(reg.job(r.json["job"], token))
    assert job.state == "done", job.error
    yield app, client, token, reg.get(job.dataset_id, token)
    reg.shutdown(wait=True)


def every_answer(app, client, token: str, ds, uid: str) -> dict:
    """The page, its layout and every server callback, with valid inputs pointing at ``ds`` and request ``uid``."""
    valid = {
        ("session", "data"): {"token": token}, ("dataset", "value"): ds.id, ("compare-a", "value"): ds.id,
        ("compare-b", "value"): ds.id, ("selected-request", "data"): {"dataset": ds.id, "uid": uid},
        ("loop-state", "data"): {"dataset": ds.id, "start": None, "end": None, "highlight": [5]},
        ("requests-grid", "getRowsRequest"): {"startRow": 0, "endRow": 1000, "filterModel": {}, "sortModel": []},
        ("compare-a", "options"): [{"label": "a", "value": ds.id}], ("jobs-seen", "data"): [],
        ("search", "value"): "/",
    }
    answers = {"/": client.get("/").data, "/_dash-layout": client.get("/_dash-layout").data}
    for key, entry in app.callback_map.items():
        if "callback" not in entry:
            continue
        r = client.post(DISPATCH, json=body(key, entry, {}, valid))
        assert r.status_code in (200, 204), (key, r.data[:300])
        answers[key] = r.data
    return answers


# --- processes ----------------------------------------------------------------------------------------------

class DashboardProcess:
    """``envoy-dissect dashboard`` in a subprocess (waitress, 127.0.0.1), with its own TMPDIR so its
    upload directory can be inspected; ``url`` is the address it printed (token included if any)."""

    def __init__(self, args: list[str], tmp: Path) -> None:
        import socket
        import subprocess
        import sys

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.log = (tmp / "server.out").open("w+")
        env = {**os.environ, "TMPDIR": str(tmp)}
        env.pop("ENVOY_DISSECTOR_TOKEN", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "envoy_dissector.cli", "dashboard", "--port", str(self.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = self._wait_for_url()

    def _wait_for_url(self, timeout: float = 120) -> str:
        import time

        import requests

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dashboard exited: {self.output()}")
            for line in self.output().splitlines():
                if " dashboard on http" in line:
                    try:
                        requests.get(self.base + "/_dash-layout", timeout=5)
                        return line.split(" dashboard on ")[1].split()[0]
                    except requests.ConnectionError:
                        pass
            time.sleep(0.3)
        raise AssertionError(f"dashboard did not start: {self.output()}")

    def output(self) -> str:
        self.log.flush()
        return (self.tmp / "server.out").read_text()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def upload_dirs(self) -> list[Path]:
        """Upload directories (inside the server's private temporary directory)."""
        return sorted([*self.tmp.glob("envoy-dissector-uploads-*"), *self.tmp.glob("*/envoy-dissector-uploads-*")])

    def private_dirs(self) -> list[Path]:
        """The server's private temporary directories (one while it runs)."""
        return sorted(self.tmp.glob("envoy-dissector-dashboard-*"))

    def stop(self) -> None:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except Exception:
                self.proc.kill()
        self.log.close()


class RssSampler:
    """Peak resident memory of a process, sampled every ``interval`` s in a thread (psutil)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        import threading

        import psutil

        self.proc = psutil.Process(pid)
        self.interval = interval
        self.baseline = self.proc.memory_info().rss
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except Exception:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.last = self.proc.memory_info().rss
