"""`envoy-dissect` command line: thin front ends over parser, analysis, kube, lab and dashboard (see main.py)."""
