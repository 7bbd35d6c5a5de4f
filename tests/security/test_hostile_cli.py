"""Regression tests for every traceback, hang and unbounded resource of issue 11 (hostile input).

Each case runs the real command line (in-process ``main()`` where a signal or file descriptor is not
involved, a subprocess otherwise) and checks the documented exit code, a one-line error, no traceback.
"""
from __future__ import annotations

import gc
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
import zlib
from pathlib import Path

import polars as pl
import pytest

from envoy_dissector.cli.main import main
from envoy_dissector.parser import limits, pipeline
from envoy_dissector.parser.pipeline import parse

FIXTURE = "istio-thread/keepalive/envoy.log.gz"
CLI = [sys.executable, "-m", "envoy_dissector.cli"]


@pytest.fixture(scope="module")
def lines(fixtures_dir) -> list[str]:
    with gzip.open(fixtures_dir / FIXTURE, "rt") as fh:
        return fh.read().splitlines()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["analyze" if argv[0] not in ("parse", "fetch") else argv[0], "-q",
                 *(argv[1:] if argv[0] in ("parse", "fetch", "analyze") else argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) <= 1 or code == 0, err
    return code, out, err


def rewrite(lines: list[str], pattern: str, repl: str) -> list[str]:
    return [re.sub(pattern, repl, line) for line in lines]


# --- tracebacks seen with hostile captures ---------------------------------------------------------

def test_no_request_capture_with_every_output(tmp_path, lines, capsys):
    # trace-level connection lines and no stream: no request row (an info-level capture exits 8 by design);
    # lines of a stream (`[S…]`, `"StreamId"`: the router's, say) would be a client request cut at both ends
    capture = write(tmp_path / "noreq.log", [x for x in lines if "headers" not in x and "stream" not in x
                                             and "][S" not in x and "StreamId" not in x and "\tinfo\t" not in x][:200])
    outs = [str(tmp_path / f"x{s}") for s in (".json", ".trace.json", ".csv", ".parquet", ".jsonl")]
    code, _, _ = run(capsys, str(capture), *[a for o in outs for a in ("-o", o)])
    assert code == 0 and all(Path(o).exists() for o in outs)
    assert json.loads(Path(outs[0]).read_text())["diagnostics"]["requests"] == 0
    code, out, _ = run(capsys, str(capture), "--json", "--path", "x", "--since", "+1s")
    assert code == 0 and json.loads(out)["diagnostics"]["requests"] == 0


@pytest.mark.parametrize("mutate", [
    lambda ls: rewrite(ls, r"\[Tags", "[\x00Tags") + rewrite(ls[:50], "socket", "so\x00cket"),
    lambda ls: rewrite(ls, r'"ConnectionId":"', '"ConnectionId":"-'),
    lambda ls: rewrite(ls, r'\[Tags: "ConnectionId":"(\d+)"(?:,"StreamId":"(\d+)")?\] ', r"[C-\1][S-\2] "),
    lambda ls: [re.sub(r"^2026-11-22", "2026-02-30" if i % 2 else "2026-13-01", x) if i % 3 == 0 else x
                for i, x in enumerate(ls)],
], ids=["nul-bytes", "negative-tag-ids", "negative-prefix-ids", "impossible-dates"])
def test_odd_values_parse_and_analyse(tmp_path, lines, capsys, mutate):
    capture = write(tmp_path / "odd.log", mutate(lines))
    code, out, _ = run(capsys, str(capture), "--json")
    assert code == 0
    d = json.loads(out)["diagnostics"]
    assert d["lines_read"] == d["lines_in_records"] + d["lines_malformed"]


def test_impossible_dates_warn(tmp_path, lines, capsys):
    capture = write(tmp_path / "dates.log", rewrite(lines, r"^2026-11-22", "2026-02-30"))
    code, out, _ = run(capsys, str(capture), "--json")
    assert code == 0
    assert any("no usable time" in w for w in json.loads(out)["diagnostics"]["warnings"])


def test_huge_ids_and_backwards_time_warn(tmp_path, lines, capsys):
    big = write(tmp_path / "big.log", rewrite(lines, r'"ConnectionId":"', '"ConnectionId":"' + "1" * 30))
    code, out, _ = run(capsys, str(big), "--json")
    assert code == 0 and any("too large for 64 bits" in w for w in json.loads(out)["diagnostics"]["warnings"])
    back = write(tmp_path / "back.log", list(reversed(lines)))
    code, out, _ = run(capsys, str(back), "--json")
    assert code == 0 and any("time goes backwards" in w for w in json.loads(out)["diagnostics"]["warnings"])
    code, out, _ = run(capsys, str(write(tmp_path / "ok.log", lines)), "--json")
    assert not any("backwards" in w or "64 bits" in w for w in json.loads(out)["diagnostics"]["warnings"])


def test_corrupt_and_truncated_gzip(tmp_path, lines, capsys):
    data = gzip.compress(("\n".join(lines) + "\n").encode())
    corrupt = tmp_path / "corrupt.log.gz"
    corrupt.write_bytes(data[:20] + bytes(b ^ 0x55 for b in data[20:200]) + data[200:])
    truncated = tmp_path / "cut.log.gz"
    truncated.write_bytes(data[: len(data) // 2])
    for path in (corrupt, truncated):
        code, _, err = run(capsys, str(path))
        assert code == 2 and "read failed" in err and str(path) in err


@pytest.mark.parametrize("option,pattern,reason", [("--path", "(", "unclosed group"),
                                                   ("--authority", "[", "unclosed character class")])
def test_bad_regex_filter_is_usage_error(tmp_path, lines, capsys, option, pattern, reason):
    code, _, err = run(capsys, str(write(tmp_path / "a.log", lines[:200])), option, pattern)
    assert code == 64 and reason in err and repr(pattern) in err


@pytest.mark.parametrize("value", ["1e400", "-1e400", "nan", "inf"])
def test_out_of_range_times_are_usage_errors(tmp_path, lines, capsys, value):
    code, _, err = run(capsys, str(write(tmp_path / "a.log", lines[:200])), f"--since={value}")
    assert code == 64 and "out of range" in err


def test_unknown_option_is_usage_error_64(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--bogus", "x"])
    assert exc.value.code == 64


# --- writes that fail -------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs anyone may write to (mounted as root, or through sudo where it asks no password, as on
    CI); skipped where mounting is not allowed, which fails the run when CI is set (tests/conftest.py)."""
    mount = tmp_path / "small"
    mount.mkdir()
    as_root = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if subprocess.run([*as_root, "mount", "-t", "tmpfs", "-o", "size=256k,mode=1777", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (neither root nor sudo without a password)")
    try:
        yield mount
    finally:
        subprocess.run([*as_root, "umount", str(mount)], capture_output=True)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl", ".json", ".trace.json"])
def test_full_disk(small_disk, fixtures_dir, capsys, suffix):
    fd = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)  # fill the disk to the last block
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    out = small_disk / f"x{suffix}"
    code, _, err = run(capsys, str(fixtures_dir / FIXTURE), "-o", str(out))
    assert code == 73 and "No space left on device" in err
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # nothing half-written left
    if suffix != ".json" and suffix != ".trace.json":
        code, _, err = run(capsys, "parse", str(fixtures_dir / FIXTURE), "-o", str(small_disk / f"e{suffix}"))
        assert code == 73 and "No space left" in err
        assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_dev_full_as_output_file(tmp_path, fixtures_dir, capsys):
    link = tmp_path / "full.csv"
    link.symlink_to("/dev/full")
    code, _, err = run(capsys, str(fixtures_dir / FIXTURE), "-o", str(link))
    assert code == 73 and "No space left" in err


def test_path_under_a_file(tmp_path, fixtures_dir, capsys):
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile" / "x.csv", tmp_path / "afile" / "sub" / "x.json"):
        code, _, err = run(capsys, str(fixtures_dir / FIXTURE), "-o", str(out))
        assert code == 73 and "cannot write" in err and "None" not in err and "File exists" not in err
    code, _, err = run(capsys, "parse", str(fixtures_dir / FIXTURE), "-o", str(tmp_path / "afile" / "e.jsonl"))
    assert code == 73


@pytest.fixture
def open_tmp():
    """A world-readable temporary folder (pytest's own is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="envoy-dissector-perm-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_permission_denied(open_tmp, fixtures_dir, capsys):
    tmp_path = open_tmp
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    tmp_path.chmod(0o755)
    capture = tmp_path / "in.log.gz"
    shutil.copy(fixtures_dir / FIXTURE, capture)
    capture.chmod(0o644)
    for warm_up in ((str(capture), "-o", str(tmp_path / "ok.csv")),
                    ("parse", str(capture), "-o", str(tmp_path / "e.csv"))):
        assert run(capsys, *warm_up)[0] == 0  # every module imported while files under /root are readable
    as_root = os.geteuid() == 0
    if as_root:  # root may write anywhere: drop to nobody for the run (the real uid stays root)
        os.setegid(65534)
        os.seteuid(65534)
    try:
        results = [run(capsys, str(capture), "-o", str(locked / "x.csv")),
                   run(capsys, "parse", str(capture), "-o", str(locked / "e.csv"))]
    finally:
        if as_root:
            os.seteuid(0)
            os.setegid(0)
    for code, _, err in results:
        assert code == 73 and "Permission denied" in err


def test_full_or_closed_stdout(fixtures_dir):
    for args in (["analyze", "-q", str(fixtures_dir / FIXTURE)],
                 ["parse", "-q", "--json", str(fixtures_dir / FIXTURE)]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(CLI + args, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
        assert proc.returncode == 73 and "No space left" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run(CLI + ["analyze", "-q", str(fixtures_dir / FIXTURE)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=300, pass_fds=(), close_fds=True,
                          preexec_fn=lambda: os.close(1))
    assert proc.returncode == 73 and "Traceback" not in proc.stderr


# --- Ctrl-C and endless streams ---------------------------------------------------------------------

#: the interrupted commands run with faulthandler on: one still running after Ctrl-C is stopped with SIGABRT,
#: which prints every thread's stack (where it was stuck) for the failure's message
INTERRUPTED_ENV = {**os.environ, "PYTHONFAULTHANDLER": "1"}


def _as_from_a_terminal() -> None:
    """The child starts with SIGINT at its default and unblocked, as a command started from a shell does: an
    ignored or blocked SIGINT is inherited across exec (and Python then leaves it so), and the test process may
    carry one from an earlier test's library in the same worker."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_state(pid: int) -> str:
    try:
        return "".join(line for line in Path(f"/proc/{pid}/status").read_text().splitlines(keepends=True)
                       if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")))
    except OSError:
        return "(gone)"


def _interrupt(proc: subprocess.Popen, after_s: float) -> tuple[int, str]:
    time.sleep(after_s)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        state = _signal_state(proc.pid)
        proc.send_signal(signal.SIGABRT)
        try:
            _, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        pytest.fail(f"still running 20 s after Ctrl-C; its signals:\n{state}its threads then:\n"
                    f"{err.decode(errors='replace')[-6000:]}")
    return proc.returncode, err.decode()


def _loading_polars(pid: int, timeout_s: float = 60) -> None:
    """Wait until the process maps polars' library: it is past the interpreter's own start-up (site,
    the editable install's finder) and inside envoy-dissect's imports."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if "polars" in Path(f"/proc/{pid}/maps").read_text():
                return
        except OSError:
            return
        time.sleep(0.01)


def test_ctrl_c_during_start_up(fixtures_dir):
    proc = subprocess.Popen(CLI + ["analyze", "-q", str(fixtures_dir / FIXTURE)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=INTERRUPTED_ENV,
                            preexec_fn=_as_from_a_terminal)
    _loading_polars(proc.pid)
    code, err = _interrupt(proc, 0)
    assert "Traceback" not in err
    assert code in (130, 0) or (code == -signal.SIGINT and not err)  # 0: it finished first


def _writer(lines_file: Path) -> subprocess.Popen:
    """Writes some lines, then keeps the pipe open without writing."""
    return subprocess.Popen(["sh", "-c", f"head -200 {lines_file}; sleep 120"], stdout=subprocess.PIPE)


def test_ctrl_c_while_reading_stdin_that_stays_open(tmp_path, lines):
    writer = _writer(write(tmp_path / "a.log", lines))
    try:
        proc = subprocess.Popen(CLI + ["analyze", "-q", "-"], stdin=writer.stdout, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=INTERRUPTED_ENV,
                                preexec_fn=_as_from_a_terminal)
        _loading_polars(proc.pid)
        code, err = _interrupt(proc, 4)
        assert code == 130 and "interrupted" in err and "Traceback" not in err
    finally:
        writer.kill()


def test_ctrl_c_while_reading_a_fifo_whose_writer_stays_open(tmp_path, lines):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    source = write(tmp_path / "a.log", lines)
    writer = subprocess.Popen(["sh", "-c", f"exec 3>{fifo}; head -200 {source} >&3; sleep 120"])  # never closes
    try:
        proc = subprocess.Popen(CLI + ["analyze", "-q", str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=INTERRUPTED_ENV,
                                preexec_fn=_as_from_a_terminal)
        _loading_polars(proc.pid)
        code, err = _interrupt(proc, 4)
        assert code == 130 and "Traceback" not in err
    finally:
        writer.kill()


ENDLESS = r'''
import re, sys, time, datetime as dt
lines = open(sys.argv[1]).read().splitlines()
shift = 0
while True:
    for line in lines:
        m = re.match(r"^(\d{4}-\d\d-\d\dT[\d:.]+)Z", line)
        if m:
            t = dt.datetime.fromisoformat(m.group(1)) + dt.timedelta(seconds=shift)
            line = t.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z" + line[m.end():]
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
    shift += 5
    time.sleep(0.05)
'''


def test_until_stops_reading_an_endless_stream(tmp_path, lines):
    writer = subprocess.Popen([sys.executable, "-c", ENDLESS, str(write(tmp_path / "a.log", lines))],
                              stdout=subprocess.PIPE)
    try:
        proc = subprocess.run(CLI + ["analyze", "-q", "-", "--until", "+12s", "--json"], stdin=writer.stdout,
                              capture_output=True, text=True, timeout=240)
    finally:
        writer.kill()
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert any("stopped reading" in w for w in summary["diagnostics"]["warnings"])
    assert summary["diagnostics"]["requests"] > 0


# --- bounded resources ------------------------------------------------------------------------------

def test_gzip_bomb_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(limits, "GZIP_RATIO_FLOOR", 1 << 20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = tmp_path / "bomb.log.gz"
    bomb.write_bytes(b"".join(compressor.compress(b"\0" * (1 << 20)) for _ in range(64)) + compressor.flush())
    code, _, err = run(capsys, str(bomb))
    assert code == 2 and "decompression bomb" in err


def test_oversize_lines_are_skipped_and_counted(tmp_path, lines, capsys, monkeypatch):
    monkeypatch.setenv("ENVOY_DISSECTOR_MAX_LINE_BYTES", "10000")
    body = lines[:300] + [lines[300][:60] + "x" * 200_000, "y" * 30_000] + lines[301:600]
    capture = tmp_path / "long.log"
    capture.write_text("\n".join(body) + "\n" + "z" * 50_000)  # and a last line without newline
    code, out, _ = run(capsys, str(capture), "--json")
    d = json.loads(out)["diagnostics"]
    assert code == 0 and d["lines_oversize"] == 3
    assert d["lines_read"] == len(body) + 1 == d["lines_in_records"] + d["lines_malformed"]
    assert any("longer than 10000 bytes" in w for w in d["warnings"])
    assert "xxxxxxxx" not in out


def test_parse_without_output_keeps_no_chunk(fixtures_dir, capsys, monkeypatch):
    alive: list[weakref.ref] = []
    real = pipeline.iter_parse

    class Tracked:
        def __init__(self, parsing) -> None:
            self.parsing = parsing

        @property
        def diagnostics(self):
            return self.parsing.diagnostics

        def __iter__(self):
            for chunk in self.parsing:
                alive.append(weakref.ref(chunk.events))
                yield chunk

    def tracking(*args, **kwargs):
        return Tracked(real(*args, block_bytes=64 * 1024, **kwargs))

    import envoy_dissector.cli.parse as cli_parse
    monkeypatch.setattr(cli_parse, "iter_parse", tracking)
    code, _, _ = run(capsys, "parse", str(fixtures_dir / FIXTURE))
    gc.collect()
    assert code == 0 and len(alive) > 3
    assert sum(ref() is not None for ref in alive) <= 1


def test_parse_output_streams_every_chunk(tmp_path, fixtures_dir, capsys, monkeypatch):
    whole = parse(fixtures_dir / FIXTURE).events
    for suffix in (".parquet", ".csv", ".jsonl"):
        out = tmp_path / f"events{suffix}"
        code, _, _ = run(capsys, "parse", str(fixtures_dir / FIXTURE), "-o", str(out))
        assert code == 0
        got = {".parquet": pl.read_parquet, ".csv": lambda p: pl.read_csv(p, infer_schema=False),
               ".jsonl": lambda p: pl.read_ndjson(p, infer_schema_length=None)}[suffix](out)
        assert got.height == whole.height


# --- what reaches the terminal and spreadsheets -----------------------------------------------------

def test_escape_sequences_never_reach_the_terminal(tmp_path, lines, capsys):
    evil = "\x1b]0;owned\x07\x1b[2J\x1b]8;;http://evil/\x1b\\x\u202e"
    capture = write(tmp_path / "esc.log", rewrite(lines, r"(':path', ')/", r"\1/" + evil.replace("\\", "\\\\")))
    for argv in ((str(capture), "--top", "20"), ("parse", str(capture))):
        code, out, err = run(capsys, *argv)
        assert code == 0 and "\x1b" not in out + err and "\u202e" not in out + err
    code, out, _ = run(capsys, str(capture), "--top", "20")
    assert "\\x1b]0;owned" in out  # shown, escaped


def test_csv_formula_cells_are_neutralised(tmp_path, lines, capsys):
    formulas = ["=HYPERLINK(\"http://evil/\")", "+1+2", "-3+4", "@SUM(A1)", "\tx", "=cmd|' /C calc'!A0"]
    out_lines, n = [], 0
    for line in lines:
        if line.startswith("':path', '"):
            line = f"':path', '{formulas[n % len(formulas)]}'"
            n += 1
        elif line.startswith("':authority', '"):
            line = "':authority', '=1+1'"
        out_lines.append(line)
    capture = write(tmp_path / "formula.log", out_lines)
    code, _, _ = run(capsys, str(capture), "-o", str(tmp_path / "r.csv"))
    code2, _, _ = run(capsys, "parse", str(capture), "-o", str(tmp_path / "e.csv"))
    assert code == code2 == 0
    requests = pl.read_csv(tmp_path / "r.csv", infer_schema=False)
    assert requests["path"].drop_nulls().str.starts_with("'").sum() >= 50
    for frame in (requests, pl.read_csv(tmp_path / "e.csv", infer_schema=False)):
        for column in ("path", "authority", "message", "header_value"):
            if column in frame.columns:
                assert not frame[column].drop_nulls().str.contains(r"^[=+\-@\t\r]").any(), column
