"""Errors that help (parser/detect.py, parser/pipeline.py): the failing line is quoted with its number and a
likely cause; in a multi-file run an unreadable or foreign file is skipped with a warning, lines accounted.
"""
from __future__ import annotations

import gzip

import pytest

from envoy_dissector.cli.main import main
from envoy_dissector.parser.errors import FormatError
from envoy_dissector.parser.pipeline import parse, parse_text

# github.com/mark8s/service-mesh concepts/wasm.md (2022-04-24, Istio 1.13): the access-log line printed between
# trace records.
ACCESS = ('[2022-04-24T07:59:01.094Z] "GET /order/12 HTTP/1.1" 200 - via_upstream - "-" 0 4568 30 29 "127.0.0.6" '
          '"Mozilla/5.0 (Windows NT 10.0; Win64; x64)" "a3d2" "orders:8080" "10.244.0.13:8080" '
          'inbound|8080|| 127.0.0.6:52811 10.244.0.13:8080 10.244.0.1:0 - default\n')
# github.com/istio/istio/issues/1667 (2017-11-15, Envoy ~1.5): a --log-format without any time.
NO_TIME = ("[121][debug][router] external/envoy/source/common/router/router.cc:241] [C89][S15880760059695439290] "
           "cluster 'in.7788' match for URL '/helloworld.Greeter/SayHelloStream'\n") * 3
ISTIO = ("2022-08-03T09:55:28.789991Z\tdebug\tenvoy http\t[C164193] new stream\n"
         "2022-08-03T09:55:28.790069Z\tdebug\tenvoy http\t[C164193][S18318507144260267655] request end stream\n")


def _error(text: str) -> FormatError:
    with pytest.raises(FormatError) as info:
        parse_text(text)
    return info.value


def test_access_log_is_named_as_such():
    err = _error(ACCESS * 5)
    assert err.line == 1 and err.found == ACCESS.rstrip("\n")[:200]
    assert "access log" in str(err) and "--level trace" in str(err)


def test_no_timestamps_says_so():
    err = _error(NO_TIME)
    assert "no timestamp" in str(err) and err.found.startswith("[121][debug][router]")


def test_points_at_the_first_line_that_fails_not_line_1():
    # a Go service's log lines (as in a docker compose excerpt of an ext_authz example, 2023)
    text = ISTIO + "2023/06/02 02:51:15 >>> Authorization called check()\n" * 5
    err = _error(text)
    assert err.line == 3 and err.found == "2023/06/02 02:51:15 >>> Authorization called check()"
    assert str(err).startswith("<text>:3: ")


def test_unknown_inner_format_under_a_compose_prefix_hints_at_the_prefix():
    err = _error('app-1  | time="2023" level=info msg="x"\n' * 4)
    assert "`svc  | ` prefix" in str(err)


def test_tabs_as_spaces_hint_when_the_layout_is_still_unknown():
    err = _error("2022-07-21T10:51:54.739441Z   dbg   envoy http   [C1][S2] request end stream\n" * 3)
    assert "tabs converted to spaces?" in str(err)


def test_unknown_layout_with_envoy_messages_suggests_log_format():
    err = _error("<7> http [C1][S2] request end stream\n" * 3)
    assert "--log-format" in str(err) and "unknown layout" in str(err)


def test_malformed_lines_in_an_accepted_capture_get_a_hint():
    parsed = parse_text(ISTIO + ACCESS + ISTIO)
    d = parsed.diagnostics
    assert d.lines_malformed == 1 and d.malformed_examples[0].startswith("<text>:3: [2022-04-24T07:59:01.094Z]")
    assert any("access-log lines" in w for w in d.warnings)


def test_malformed_examples_are_redacted():
    parsed = parse_text(ISTIO + '### "authorization": "Bearer abc.def", cookie=session123\n' + ISTIO)
    example = parsed.diagnostics.malformed_examples[0]
    assert "abc.def" not in example and "session123" not in example and "[redacted]" in example
    parsed = parse_text(ISTIO + '### "authorization": "Bearer abc.def"\n' + ISTIO, redact=False)
    assert "abc.def" in parsed.diagnostics.malformed_examples[0]


@pytest.fixture()
def files(tmp_path):
    good = tmp_path / "proxy.log"
    good.write_text(ISTIO * 3)
    foreign = tmp_path / "access.log"
    foreign.write_text(ACCESS * 4)
    broken = tmp_path / "broken.log.gz"
    broken.write_bytes(gzip.compress((ISTIO * 50).encode())[:60])
    return good, foreign, broken


def test_multi_file_run_skips_foreign_and_unreadable_files(files):
    good, foreign, broken = files
    parsed = parse([good, foreign, broken])
    d = parsed.diagnostics
    assert d.records == 6 and d.format == "istio"
    assert d.lines_read == 6 + 4 == d.lines_in_records + d.lines_malformed
    assert d.by_origin[str(foreign)]["lines_malformed"] == 4
    skipped = [w for w in d.warnings if w.startswith("skipped a file: ")]
    assert len(skipped) == 2
    assert any(str(foreign) + ":1:" in w and "access log" in w for w in skipped)
    assert any(str(broken) in w and "read failed" in w for w in skipped)


def test_multi_file_run_fails_only_when_nothing_is_readable(files):
    _, foreign, broken = files
    with pytest.raises(FormatError):
        parse([foreign, broken])


def test_cli_exit_codes_and_no_traceback(files, capsys):
    good, foreign, broken = files
    assert main(["parse", "-q", str(good), str(foreign), str(broken)]) == 0
    out, err = capsys.readouterr()
    assert "warning: skipped a file: " in out and "Traceback" not in out + err
    code = main(["parse", "-q", str(foreign)])
    out, err = capsys.readouterr()
    assert code == 3 and "Traceback" not in out + err
    assert f"{foreign}:1: " in err and "access log" in err
