"""The command line configures polars' allocator before polars loads (cli/__init__.py), unless the user did."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = ("import envoy_dissector.cli, os, sys; import polars; "
         "print(os.environ.get('_RJEM_MALLOC_CONF'), 'polars' in sys.modules)")


@pytest.mark.parametrize(("given", "expected"), [(None, "narenas:1,muzzy_decay_ms:0"), ("narenas:4", "narenas:4")])
def test_the_cli_sets_one_arena_and_no_muzzy_pages_unless_the_user_chose(given: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if given is not None:
        env["_RJEM_MALLOC_CONF"] = given
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    conf, loaded = out.stdout.split()
    # (polars puts its own decay settings first and appends ours: the last value of an option wins)
    assert loaded == "True" and conf.endswith("," + expected)
