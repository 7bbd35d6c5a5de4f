"""Fuzz/property suite, fast subset (bench/fuzz.py runs the same generator on 100 000+ inputs).

Whatever a capture holds, every stage and every output runs without a traceback, and every line is
accounted for (``lines_read == lines_in_records + lines_malformed``, records sum over kinds).
"""
from __future__ import annotations

import random

import pytest
from hostile_inputs import BASES, LOG_FORMATS, check_capture, hostile_capture, load_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def corpora(fixtures_dir) -> dict[str, list[str]]:
    return {base: load_lines(fixtures_dir, base) for base in BASES}


@pytest.mark.parametrize("base", BASES)
@given(rng=st.randoms(use_true_random=False))
@SETTINGS
def test_no_traceback_and_every_line_accounted_for(corpora, base, rng: random.Random, tmp_path_factory):
    text = hostile_capture(rng, corpora[base])
    out = tmp_path_factory.mktemp("out")
    assert check_capture(text, out, LOG_FORMATS.get(base)) in ("ok", "refused")


@given(rng=st.randoms(use_true_random=False))
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
def test_heavily_mutated_lines_parse(rng: random.Random):
    """Every line mutated (no outputs, more cases): the parser alone, on a real Istio sample."""
    lines = [f"2026-11-22T01:09:34.{i:06d}Z\tdebug\tenvoy http source/x.cc:1\t[C{i}][S{i}] new stream\tthread=7"
             for i in range(40)]
    text = hostile_capture(rng, lines, mutation_rate=1.0)
    assert check_capture(text, None, outputs=False) in ("ok", "refused")  # type: ignore[arg-type]
