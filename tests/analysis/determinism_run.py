"""Run ``envoy-dissect analyze`` on many captures in one interpreter, every output written (for the determinism
test, which starts this in subprocesses with different settings).

    python determinism_run.py JOBS.json OUT_DIR

``JOBS.json`` is a list of jobs, each ``{"args": [a capture and its options], "block_bytes": N}``; job *i* writes
``OUT_DIR/<i>/`` with every ``-o`` suffix and ``report.txt`` (the terminal report and the exit code).
``block_bytes`` is the size of the blocks its sources are read in (the analysis's own parameter; 0: its default,
16 MiB), so one interpreter runs a way's captures whatever their block sizes.
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import sys
from pathlib import Path
from typing import Any

from envoy_dissector.analysis import capture
from envoy_dissector.cli import analyze
from envoy_dissector.cli.main import main

SUFFIXES = (".csv", ".jsonl", ".parquet", ".json", ".trace.json")


def run(jobs: list[dict[str, Any]], out: Path) -> None:
    for i, job in enumerate(jobs):
        block = int(job["block_bytes"])
        analyze.dissect = functools.partial(capture.dissect, block_bytes=block) if block else capture.dissect
        d = out / f"{i:03d}"
        d.mkdir(parents=True, exist_ok=True)
        args = ["analyze", "-q", *job["args"]]
        for suffix in SUFFIXES:
            args += ["-o", str(d / f"out{suffix}")]
        report, errors = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(report), contextlib.redirect_stderr(errors):
            try:
                code = main(args)
            except SystemExit as exc:  # (argparse and the error boundary exit)
                code = exc.code if isinstance(exc.code, int) else 1
        (d / "report.txt").write_text(f"{report.getvalue()}\n--- stderr\n{errors.getvalue()}\n--- exit {code}\n")


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))
