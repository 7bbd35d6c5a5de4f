"""`envoy-dissect` command line: thin front ends over parser, analysis, kube, lab and dashboard (see main.py)."""
import os
import sys

if "polars" not in sys.modules:
    # Polars allocates through its own jemalloc, configured from this variable when polars loads (polars puts
    # its decay settings first and appends what it finds here, polars/__init__.py). One arena
    # instead of one per thread: our parser threads and polars' pool free each other's buffers, and with many
    # arenas the pages go back to the system and are faulted in again (on the 1 GB capture: system time
    # 7.0 s -> 5.8 s, 5 GB: 57.7 -> 64.9 MB/s, the same peak RSS; bench/README.md). Muzzy pages returned at
    # once: jemalloc's second step (MADV_FREE) leaves pages counted in RSS until the kernel needs them, and
    # polars waits a second before it; without it the 5 GB capture peaks 2.50 instead of 2.56 GiB at the same
    # speed (bench/README.md, 2026-11-26). A value the user set wins.
    os.environ.setdefault("_RJEM_MALLOC_CONF", "narenas:1,muzzy_decay_ms:0")
if "numpy" not in sys.modules:
    # numpy's OpenBLAS starts a thread per core whose wait loop spins: 1.9 % of the CPU time of `analyze`
    # (perf, 200 MB capture), for no BLAS work worth threads here.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _two_malloc_arenas() -> None:
    """glibc's malloc (Python's objects, the blocks read, the compiled parser's small buffers) in two arenas instead
    of one per thread that allocates: a block read on one thread and freed on another went back to its own
    arena's pages, and the next thread faulted in new ones. On the 1 GB capture: system time 2.38-2.75 ->
    2.21-2.62 s, wall 0.1-0.3 s less, the same peak (bench/README.md). ``MALLOC_ARENA_MAX`` set by the user wins;
    elsewhere than glibc nothing changes."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(_M_ARENA_MAX, 2)
    except (OSError, AttributeError):  # (not glibc: no mallopt)
        return


#: glibc's mallopt parameter for the most arenas (malloc.h)
_M_ARENA_MAX = -8

_two_malloc_arenas()
