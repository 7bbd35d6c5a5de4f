"""`envoy-dissect` command line: thin front ends over parser, analysis, kube, lab and dashboard (see main.py)."""
import os
import sys

if "polars" not in sys.modules:
    # Polars allocates through its own jemalloc, configured from this variable when polars loads (polars puts
    # its decay settings first and appends what it finds here, polars/__init__.py). One arena
    # instead of one per thread: our parser threads and polars' pool free each other's buffers, and with many
    # arenas the pages go back to the system and are faulted in again (on the 1 GB capture: system time
    # 7.0 s -> 5.8 s, 5 GB: 57.7 -> 64.9 MB/s, the same peak RSS; bench/README.md). A value the user set wins.
    os.environ.setdefault("_RJEM_MALLOC_CONF", "narenas:1")
