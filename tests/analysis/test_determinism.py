"""The same input gives byte-identical outputs (every ``-o`` file and the report), run after run, whatever the
number of polars threads, with the compiled scan on or off, and for any block size.

Each way of running is a fresh interpreter (``determinism_run.py``): hash seeds, thread pools and polars'
group order differ between processes, which is where an unordered group or an unbroken tie would show. The
fast test runs a sample of the fixtures and real excerpts; the slow one runs every one of them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
RUNNER = Path(__file__).with_name("determinism_run.py")

#: (name, POLARS_MAX_THREADS, ENVOY_DISSECTOR_NATIVE, block bytes: 0 = the default 16 MiB). The first way runs
#: twice; each other way changes one setting, the last all of them.
WAYS = (
    ("threads2-native-16MiB", "2", "1", 0),
    ("threads2-native-16MiB-again", "2", "1", 0),
    ("threads1", "1", "1", 0),
    ("polars-scan", "2", "0", 0),
    ("blocks-4KiB", "2", "1", 4096),
    ("threads1-polars-scan-blocks-4KiB", "1", "0", 4096),
)
#: The fast test: every n-th capture (fixtures and real excerpts alike), run the first way twice and the last.
SAMPLE_EVERY = 20
FAST_WAYS = (WAYS[0], WAYS[1], WAYS[-1])


def _custom_format(log: Path) -> list[str]:
    meta = log.parent / "meta.json"
    if not meta.exists():
        return []
    fmt = json.loads(meta.read_text()).get("log_format", {})
    return ["--log-format", fmt["pattern"]] if fmt.get("name") == "custom" else []


def all_jobs() -> list[list[str]]:
    """Every capture under fixtures/ (lab captures with their --log-format, and every real excerpt)."""
    logs = sorted(p for p in FIXTURES.rglob("*") if p.name.endswith((".log", ".log.gz")))
    return [[str(p), *_custom_format(p)] for p in logs]


def _run_way(jobs: list[list[str]], out: Path, threads: str, native: str, block: int, cache: Path) -> None:
    out.mkdir(parents=True)
    (out / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "POLARS_MAX_THREADS": threads, "ENVOY_DISSECTOR_NATIVE": native,
           "DETERMINISM_BLOCK_BYTES": str(block), "ENVOY_DISSECTOR_CACHE": "1", "ENVOY_DISSECTOR_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, str(RUNNER), str(out / "jobs.json"), str(out / "runs")], env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]


def _outputs(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _check(jobs: list[list[str]], tmp: Path, ways: tuple[tuple[str, str, str, int], ...] = WAYS) -> None:
    # One shape cache shared by the ways, starting empty: the first way fills it, the others read it (a run
    # must not depend on what an earlier run left there either).
    cache = tmp / "shape-cache"
    first: dict[str, bytes] | None = None
    for name, threads, native, block in ways:
        _run_way(jobs, tmp / name, threads, native, block, cache)
        outputs = _outputs(tmp / name / "runs")
        # (a rejected capture writes its report and no file: the same files every way)
        assert sum(k.endswith("report.txt") for k in outputs) == len(jobs), name
        if first is None:
            first = outputs
            continue
        assert sorted(outputs) == sorted(first), name
        differ = sorted({f"{k}: {' '.join(jobs[int(k.split('/')[0])])}" for k in outputs
                         if outputs[k] != first.get(k)})
        assert not differ, f"{name} differs from {ways[0][0]}:\n" + "\n".join(differ[:20])


def test_a_sample_gives_the_same_bytes_every_way(tmp_path: Path) -> None:
    jobs = all_jobs()
    assert len(jobs) > 100
    _check(jobs[::SAMPLE_EVERY], tmp_path, FAST_WAYS)


#: The full test in shards, so pytest-xdist spreads it over the cores (one test of 11 minutes was the gate's tail).
SHARDS = 4


@pytest.mark.slow
@pytest.mark.timeout(3600)  # six fresh runs over a quarter of ~160 captures: ~1.5 min alone, more on a shared machine
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_capture_gives_the_same_bytes_every_way(tmp_path: Path, shard: int) -> None:
    _check(all_jobs()[shard::SHARDS], tmp_path)
