"""The same input gives byte-identical outputs (every ``-o`` file and the report), run after run, whatever the
number of polars threads, with the compiled scan on or off, and for any block size.

Each way of running is a fresh interpreter (``determinism_run.py``): hash seeds, thread pools and polars'
group order differ between processes, which is where an unordered group or an unbroken tie would show. The
sample test runs a sample of the fixtures and real excerpts the default way, the same way again and the way with
every setting changed at once (left out of a run that selects the whole test: tests/conftest.py COVERED_BY). The
whole test, in shards, runs every capture the default way and the all-changed way (so each setting is changed for
every capture), and on every fourth capture the default way again and the ways that change one setting each, which
name the setting when bytes differ. The exact repeat is not run on every capture: the all-changed way is a process
of its own too, with its own hash seed, thread pool and group order, so a difference from run to run shows there as
well; the repeat, on the sample and on every fourth capture, tells such a difference apart from a setting's.
Small blocks are 4 KiB, or a 16th of a capture over 64 KiB so that it is still cut into 16 blocks (every block
costs the engine a fixed step: 4 KiB blocks made that way five times the cost of the default one, and 32 blocks a
capture instead of 16 cost ~35 CPU-s a gate for twice the cuts of the same kind: every boundary falls at an
arbitrary byte, mid-line).
"""
from __future__ import annotations

import functools
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
RUNNER = Path(__file__).with_name("determinism_run.py")

Way = tuple[str, str, str, bool]
#: (name, POLARS_MAX_THREADS, ENVOY_DISSECTOR_NATIVE, small blocks: else the default 16 MiB). Every capture runs the
#: first way and the way that changes every setting at once.
WAYS: tuple[Way, ...] = (
    ("threads2-native-16MiB", "2", "1", False),
    ("threads1-polars-scan-small-blocks", "1", "0", True),
)
#: The first way once more in a new process: on every capture of the sample test and on every SAMPLE_WAYS_EVERY-th
#: capture of the whole test (the captures that run the single-setting ways too).
AGAIN: Way = ("threads2-native-16MiB-again", "2", "1", False)
#: Each changes one setting of the first way: run on every SAMPLE_WAYS_EVERY-th capture of the whole test.
SINGLE_SETTING_WAYS: tuple[Way, ...] = (
    ("threads1", "1", "1", False),
    ("polars-scan", "2", "0", False),
    ("small-blocks", "2", "1", True),
)
SAMPLE_WAYS_EVERY = 4
#: The fast test: every n-th capture (fixtures and real excerpts alike), run the first way, again and all-changed.
SAMPLE_EVERY = 20


SMALL_BLOCK = 4096
MIN_BLOCKS = 16


@functools.cache
def small_block(capture: str) -> int:
    """4 KiB, or the size that cuts the capture's text into MIN_BLOCKS blocks (one more where it does not divide) if
    that is larger."""
    path = Path(capture)
    if path.suffix == ".gz":
        with gzip.open(path) as text:
            size = text.seek(0, io.SEEK_END)
    else:
        size = path.stat().st_size
    return max(SMALL_BLOCK, size // MIN_BLOCKS)


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


def _run_way(jobs: list[dict[str, object]], out: Path, threads: str, native: str, cache: Path) -> None:
    out.mkdir(parents=True)
    (out / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "POLARS_MAX_THREADS": threads, "ENVOY_DISSECTOR_NATIVE": native,
           "ENVOY_DISSECTOR_CACHE": "1", "ENVOY_DISSECTOR_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, str(RUNNER), str(out / "jobs.json"), str(out / "runs")], env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]


def _outputs(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _run_and_read(jobs: list[list[str]], picks: list[int], tmp: Path, way: Way, cache: Path) -> dict[str, bytes]:
    """Run ``jobs[i]`` for every i in *picks* one way, in one interpreter (each job with its own block size:
    0 is the default); the outputs keyed ``<i>/<file>`` by their number in *jobs*."""
    name, threads, native, small_blocks = way
    out = tmp / name
    _run_way([{"args": jobs[i], "block_bytes": small_block(jobs[i][0]) if small_blocks else 0} for i in picks],
             out, threads, native, cache)
    outputs = _outputs(out / "runs")
    # (a rejected capture writes its report and no file: the same files every way)
    assert sum(k.endswith("report.txt") for k in outputs) == len(picks), name
    renumbered = {}
    for key, data in outputs.items():
        run_number, rest = key.split("/", 1)
        renumbered[f"{picks[int(run_number)]:03d}/{rest}"] = data
    return renumbered


def _check(jobs: list[list[str]], tmp: Path, sampled: list[int] | None = None) -> None:
    """Every job the WAYS, compared with the first; the jobs numbered in *sampled* AGAIN and the single-setting
    ways too, or without *sampled* every job AGAIN."""
    # One shape cache shared by the ways, starting empty: the first way fills it, the others read it (a run
    # must not depend on what an earlier run left there either).
    cache = tmp / "shape-cache"
    every_job = list(range(len(jobs)))
    first = _run_and_read(jobs, every_job, tmp, WAYS[0], cache)
    runs = [(way, every_job) for way in WAYS[1:]] + [(AGAIN, every_job if sampled is None else sampled)]
    runs += [(way, sampled) for way in SINGLE_SETTING_WAYS if sampled]
    for way, picks in runs:
        outputs = _run_and_read(jobs, picks, tmp, way, cache)
        chosen = set(picks)
        expected = {k: v for k, v in first.items() if int(k.split("/")[0]) in chosen}
        assert sorted(outputs) == sorted(expected), way[0]
        differ = sorted({f"{k}: {' '.join(jobs[int(k.split('/')[0])])}" for k in outputs
                         if outputs[k] != expected[k]})
        assert not differ, f"{way[0]} differs from {WAYS[0][0]}:\n" + "\n".join(differ[:20])


def test_a_sample_gives_the_same_bytes_every_way(tmp_path: Path) -> None:
    jobs = all_jobs()
    assert len(jobs) > 100
    _check(jobs[::SAMPLE_EVERY], tmp_path)


#: The full test in shards, so pytest-xdist spreads it over the cores (one test of 11 minutes was the gate's tail):
#: one a core (tests/conftest.py LONG_FIRST starts each worker on one), since each way of a shard is an interpreter
#: of its own (~1 CPU-s to start and warm up: 4 shards on 2 cores started 12 more than needed).
SHARDS = 2


@pytest.mark.slow
@pytest.mark.timeout(3600)  # half of ~160 captures two ways, an eighth four more: ~1.5 min alone
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_capture_gives_the_same_bytes_every_way(tmp_path: Path, shard: int) -> None:
    jobs = all_jobs()
    mine = range(shard, len(jobs), SHARDS)
    # every SAMPLE_WAYS_EVERY-th capture of the shard runs the sampled ways, and so does every capture of the sample
    # test (which a run selecting this test leaves out: tests/conftest.py COVERED_BY)
    sampled = [k for k, i in enumerate(mine) if k % SAMPLE_WAYS_EVERY == SAMPLE_WAYS_EVERY // 2 or i % SAMPLE_EVERY == 0]
    _check([jobs[i] for i in mine], tmp_path, sampled)
