"""Kubernetes sources: fetch istio-proxy logs through the API server, and capture a trace window.

* :mod:`.client` — kubeconfig / ``--context`` / in-cluster loading, pod resolution.
* :mod:`.logs` — stream a container log to disk (``[pod/NAME/CONTAINER] TIMESTAMP line``).
* :mod:`.admin` — reach Envoy's admin ``/logging`` through the pod proxy subresource or a port-forward.
* :mod:`.capture` — raise to trace, wait, restore (always), fetch exactly that window.
* :mod:`.config_check` — bounds on a kubeconfig before the client reads it; :mod:`.exec_plugin` — credential
  plugins run with a time limit and their errors scrubbed; :mod:`.deadline` — per-read deadlines;
  :mod:`.errors` — the package's errors and exit codes.
* The commands ``envoy-dissect fetch`` and ``envoy-dissect capture`` are in the command-line package, the
  file cli/kube.py (there is no kube/cli.py).
"""
