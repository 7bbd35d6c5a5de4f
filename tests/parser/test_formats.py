"""Format detection and line accounting on every real fixture capture (parser/formats.py)."""
from __future__ import annotations

import gzip

import pytest

from envoy_dissector.parser.errors import FormatError, InputError
from envoy_dissector.parser.formats import KNOWN_FORMATS, detect_format, detection_by_id
from envoy_dissector.parser.pipeline import parse, parse_text
from tests.builders import NO_THREAD_DIRS

MS_WARNING = "millisecond"
THREAD_WARNING = "no thread ids"


def test_fixture_mapping_agrees_with_meta(fixture_log):
    """The folder -> format id mapping the tests use matches what the lab recorded in meta.json."""
    meta = fixture_log.meta
    if meta is None:  # only the hand reconstruction of seed 000 has no meta.json
        assert fixture_log.rel.startswith("old-format/seed000/")
        return
    name = meta["log_format"]["name"]
    assert {"envoy-us": "envoy", "istio-json-old": "istio-json"}.get(name, name) == fixture_log.expected_format


def test_detects_format_and_accounts_for_every_line(fixture_log, parsed_fixture):
    d = parsed_fixture(fixture_log).diagnostics
    assert d.format == fixture_log.expected_format
    assert d.lines_read > 0
    assert d.lines_read == d.lines_in_records + d.lines_malformed
    assert d.records > 0
    assert d.records_unknown < 0.01 * d.records
    assert d.records == sum(d.events_by_kind.values())


def test_lines_read_is_the_physical_line_count(fixture_log, parsed_fixture):
    opener = gzip.open if fixture_log.path.suffix == ".gz" else open
    with opener(fixture_log.path, "rb") as fh:
        data = fh.read()
    physical = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    assert parsed_fixture(fixture_log).diagnostics.lines_read == physical


def test_resolution_and_thread_warnings(fixture_log, parsed_fixture):
    warnings = parsed_fixture(fixture_log).diagnostics.warnings
    ms = any(MS_WARNING in w for w in warnings)
    no_thread = any(THREAD_WARNING in w for w in warnings)
    assert ms == (fixture_log.top == "envoy")
    assert no_thread == (fixture_log.top in NO_THREAD_DIRS)
    if fixture_log.pattern is not None:  # and the same facts from the pattern Envoy was started with
        assert ms == ("%e" in fixture_log.pattern)
        assert no_thread == ("%t" not in fixture_log.pattern)


def test_timestamps_are_epoch_microseconds_in_capture_time(fixture_log, parsed_fixture):
    events = parsed_fixture(fixture_log).events
    ts = events["ts_us"]
    assert ts.null_count() == 0
    if fixture_log.meta is not None:
        from datetime import datetime

        started = datetime.fromisoformat(fixture_log.meta["timing"]["started_utc"].replace("Z", "+00:00"))
        finished = datetime.fromisoformat(fixture_log.meta["timing"]["finished_utc"].replace("Z", "+00:00"))
        lo, hi = int(started.timestamp() * 1e6), int(finished.timestamp() * 1e6)
        slack = 2_000_000  # Envoy's clock vs the harness; ms formats truncate
        assert lo - slack <= ts.min() and ts.max() <= hi + slack


def test_threads_present_exactly_when_the_format_has_them(fixture_log, parsed_fixture):
    events = parsed_fixture(fixture_log).events
    has_thread = fixture_log.top not in NO_THREAD_DIRS
    assert (events["thread"].null_count() == 0) == has_thread
    assert (events["thread"].null_count() == events.height) == (not has_thread)


def test_custom_capture_without_log_format_is_rejected(fixture_by_rel):
    fx = fixture_by_rel("custom/keepalive/envoy.log.gz")
    with pytest.raises(FormatError) as err:
        parse(fx.path)
    text = str(err.value)
    assert "custom/keepalive/envoy.log.gz" in text and "--log-format" in text


def test_non_envoy_file_gives_a_clear_format_error(tmp_path):
    path = tmp_path / "nginx.log"
    path.write_text('127.0.0.1 - - [10/Oct/2024:13:55:36 +0000] "GET / HTTP/1.1" 200 612 "-" "curl/8.0"\n' * 20)
    with pytest.raises(FormatError) as err:
        parse(path)
    e = err.value
    assert isinstance(e, InputError) and e.exit_code == 3
    text = str(e)
    assert text.startswith(f"{path}:1: not an Envoy / istio-proxy log")
    for known in KNOWN_FORMATS:  # says what was tried
        assert known.label in text
    assert "GET / HTTP/1.1" in text  # and what it found


def test_empty_sample_is_a_format_error():
    with pytest.raises(FormatError, match="no log lines"):
        detect_format(["", "   "], source="x.log")


def test_forced_format_id(fixture_by_rel):
    fx = fixture_by_rel("istio/keepalive/envoy.log.gz")
    assert parse(fx.path, format="istio").diagnostics.format == "istio"
    with pytest.raises(FormatError):  # an istio-thread capture is not Envoy's default layout
        parse(fixture_by_rel("istio-thread/keepalive/envoy.log.gz").path, format="envoy")
    with pytest.raises(FormatError, match="unknown format 'nginx'"):
        detection_by_id("nginx")


def test_detection_not_fooled_by_header_dumps(fixture_by_rel):
    """A capture excerpt dominated by header-dump continuation lines is still detected.

    Real Istio requests carry 20-40 headers, dumped 4 times per request; the
    detector must judge record-start lines, not dump lines.
    """
    opener = gzip.open(fixture_by_rel("istio-thread/keepalive/envoy.log.gz").path, "rt")
    lines = opener.read().splitlines()
    start = next(i for i, line in enumerate(lines) if "request headers complete" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("\tthread="))
    # one record with its dump, and 30 more headers in the dump (as a real Istio request has)
    extra = [f"'x-extra-header-{k}', 'value-{k}'" for k in range(30)]
    excerpt = [lines[start], *lines[start + 1 : end], *extra, *lines[end : end + 3]]
    parsed = parse_text("\n".join(excerpt) + "\n")
    d = parsed.diagnostics
    assert d.format == "istio-thread"
    assert d.lines_malformed == 0 and d.records == 3
    assert parsed.events["n_lines"][0] == end - start + 30 + 1
