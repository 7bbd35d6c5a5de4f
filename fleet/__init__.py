"""Many captures on a distributed engine (Dask): one dissection task per input, a hive-partitioned dataset, merged
statistics. ``pip install "envoy-dissector[fleet]"``; ``envoy-dissect fleet``; docs/scale.md."""
