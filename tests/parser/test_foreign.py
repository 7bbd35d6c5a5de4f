"""Other programs' lines set aside by kind (parser/foreign.py) and damaged lines read tolerantly (parser/repair.py)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.parser import repair
from envoy_dissector.parser.errors import FormatError
from envoy_dissector.parser.foreign import ALL_KINDS, kind_of, set_aside
from envoy_dissector.parser.formats import KNOWN_FORMATS
from envoy_dissector.parser.logformat import TextFormat
from envoy_dissector.parser.pipeline import parse, parse_text

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"
ISTIO = next(k.compiled for k in KNOWN_FORMATS if k.id == "istio")
ENVOY_MS = next(k.compiled for k in KNOWN_FORMATS if k.label == "Envoy default (milliseconds)")

SIDECAR = """\
2021-10-09T06:09:34.612148Z\tinfo\tFLAG: --concurrency="2"
2021-10-09T06:09:34.621212Z\tinfo\tEffective config: binaryPath: /usr/local/bin/envoy
concurrency: 2
tracing:
  zipkin:
    address: zipkin.istio-system:9411

2021-10-09T06:09:49.653265Z\tdebug\tenvoy http\t[C1][S2] request headers complete (end_stream=true):
':authority', 'x'
{
  "response_code": 200,
  "method": "GET"
}
':path', '/'
[2021-10-09T06:09:49.653Z] "GET / HTTP/1.1" 200 - via_upstream - "-" 0 0 1 1
$ kubectl logs foo -c istio-proxy
...
……
**Logs:**
2021-10-09T06:09:49.653300Z\tdebug\tenvoy router\t[C1][S2] cluster 'x' match for URL '/'
"""


def _lines(text: str) -> pl.DataFrame:
    raw = text.splitlines()
    return pl.DataFrame({"line_no": range(1, len(raw) + 1), "raw": raw, "origin": "f"})


def test_foreign_lines_set_aside_by_kind_with_their_continuations() -> None:
    assert isinstance(ISTIO, TextFormat)
    kept, aside = set_aside(_lines(SIDECAR), pl.col("raw").str.contains(ISTIO.start))
    kinds = dict(zip(aside["line_no"].to_list(), aside["kind"].to_list()))
    assert kinds == {1: "pilot-agent", 2: "pilot-agent", 3: "pilot-agent", 4: "pilot-agent", 5: "pilot-agent",
                     6: "pilot-agent", 7: "pilot-agent", 10: "access-log", 11: "access-log", 12: "access-log",
                     13: "access-log", 15: "access-log", 16: "shell-prompt", 17: "elision", 18: "elision",
                     19: "markdown"}
    # the record's header dump continues across the pretty-printed access-log entry
    assert kept["line_no"].to_list() == [8, 9, 14, 20]
    assert set(aside["kind"]) <= set(ALL_KINDS)


def test_envoy_lines_are_never_foreign() -> None:
    assert kind_of("2021-10-09T06:09:49.653265Z\tdebug\tenvoy http\t[C1][S2] new stream") is None
    assert kind_of("2021-10-09T06:09:49.653265Z  debug  envoy http  [C1][S2] new stream") is None
    assert kind_of("2021-10-09T06:09:49.653265Z\tinfo\txdsproxy\tconnected to upstream XDS server") == "pilot-agent"


def test_sidecar_log_is_judged_by_its_envoy_records_and_every_line_counted() -> None:
    parsed = parse_text(SIDECAR)
    d = parsed.diagnostics
    assert d.format == "istio" and d.records == 2
    assert d.lines_read == d.lines_in_records + d.lines_malformed
    assert sum(d.lines_aside_by_kind.values()) == d.lines_malformed
    assert d.lines_aside_by_kind == {"pilot-agent": 7, "access-log": 5, "shell-prompt": 1, "elision": 2,
                                     "markdown": 1}
    assert parsed.events.filter(pl.col("kind") == "request_headers_complete")["n_lines"].to_list() == [3]


def test_without_an_envoy_line_the_error_names_what_the_file_is() -> None:
    pilot_only = "\n".join(line for line in SIDECAR.splitlines() if "envoy " not in line and "':" not in line)
    with pytest.raises(FormatError) as err:
        parse_text(pilot_only + "\n")
    assert "no Envoy line" in str(err.value) and "pilot-agent" in str(err.value)


@pytest.mark.parametrize(("damaged", "fmt"), [
    ("2024-03-05T07:08:09.123456Z\tdebug envoy http\t[C1][S2] new stream", ISTIO),
    ("2024-03-05T07:08:09.123456Z\tdebug\tenvoy http [C1][S2] new stream", ISTIO),
    ("2024-03-05T07:08:09.123456Zdebug\tenvoy http\t[C1][S2] new stream", ISTIO),
    ("2024-03-05 07:08:09.123][1][debug][http] [source/common/http/conn_manager_impl.cc:1] [C1] new stream",
     ENVOY_MS),
])
def test_a_damaged_line_is_repaired_into_a_record_start(damaged: str, fmt: TextFormat) -> None:
    found = repair.repair_lines(pl.DataFrame({"line_no": [1], "origin": ["f"], "raw": [damaged]}), fmt)
    assert found.height == 1
    assert pl.Series([found["raw"][0]]).str.contains(fmt.start).item()


def test_text_that_is_not_a_damaged_record_is_not_repaired() -> None:
    lines = pl.DataFrame({"line_no": [1, 2], "origin": ["f", "f"],
                          "raw": ["2024-03-05T07:08:09.123456Z\tinfo\tFLAG: --x", "garbage 2024-03-05"]})
    assert repair.repair_lines(lines, ISTIO).height == 0


@pytest.mark.parametrize("name", ["083-lab-istio-thread-paste-markdown-elision-damaged-tab-v1.40-debug.log",
                                  "084-lab-markdown-quote-leading-bracket-lost-v1.40-debug.log"])
def test_the_milestone_on_a_damaged_line_is_kept(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def new_streams() -> int:
        return parse(str(REAL / name)).events.filter(pl.col("kind") == "new_stream").height

    assert new_streams() == 1
    monkeypatch.setattr(repair, "REPAIRS", ())  # without the tolerant reading the milestone is lost
    assert new_streams() == 0


@pytest.mark.parametrize("name", ["068-istio-1.11-kubectl-logs-from-pod-start-pilot-agent-warning.log",
                                  "082-lab-istio-kubectl-logs-pod-start-agent-and-pretty-json-access-log-v1.40-debug.log",
                                  "083-lab-istio-thread-paste-markdown-elision-damaged-tab-v1.40-debug.log",
                                  "095-wso2-choreo-connect-router-v1.21-trace-ext-authz-check-request-elided.log",
                                  "102-lab-istio-json-pod-start-json-pilot-agent-and-access-log-v1.40-trace.log"])
def test_lines_set_aside_the_same_whatever_the_block_size(name: str) -> None:
    """Whether a chunk's foreign lines are set aside is decided per chunk, from the chunk: blocks of a few hundred
    bytes (the detection sample then holds no foreign line) give what one block gives."""
    whole = parse(str(REAL / name))
    small = parse(str(REAL / name), block_bytes=300)
    assert whole.diagnostics.lines_aside_by_kind == small.diagnostics.lines_aside_by_kind
    assert whole.diagnostics.lines_in_records == small.diagnostics.lines_in_records
    assert whole.events.drop("origin").equals(small.events.drop("origin"))
