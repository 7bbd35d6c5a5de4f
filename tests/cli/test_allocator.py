"""The command line configures polars' allocator before polars loads, and glibc's malloc to two arenas
(cli/__init__.py), unless the user did."""
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


ARENAS_PROBE = """
import ctypes, os, sys, tempfile, threading
if sys.argv[1] == "cli":
    import envoy_dissector.cli
barrier = threading.Barrier(6)
def allocate():
    barrier.wait()  # (all six threads allocate at once: each would get an arena of its own)
    held = [bytes(64 << 10) for _ in range(20)]
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
descriptor, path = tempfile.mkstemp()
os.close(descriptor)
stream = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(stream))
libc.fclose(ctypes.c_void_p(stream))
print(open(path).read().count("<heap nr="))
os.unlink(path)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
def test_the_cli_keeps_glibc_to_two_malloc_arenas_unless_the_user_chose() -> None:
    def arenas(mode: str, **env: str) -> int:
        run_env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
        out = subprocess.run([sys.executable, "-c", ARENAS_PROBE, mode], env=run_env, capture_output=True, text=True,
                             check=True)
        return int(out.stdout)

    assert arenas("cli") <= 2
    assert arenas("plain") > 2  # (the probe does make arenas per thread: the check above can fail)
    assert arenas("cli", MALLOC_ARENA_MAX="8") > 2
