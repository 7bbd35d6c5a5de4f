"""Kubernetes sources: fetch istio-proxy logs through the API server, and capture a trace window.

* :mod:`.client` — kubeconfig / ``--context`` / in-cluster loading, pod resolution.
* :mod:`.logs` — stream a container log to disk (``[pod/NAME/CONTAINER] TIMESTAMP line``).
* :mod:`.admin` — reach Envoy's admin ``/logging`` through the pod proxy subresource or a port-forward.
* :mod:`.capture` — raise to trace, wait, restore (always), fetch exactly that window.
* The commands ``envoy-dissect fetch`` and ``envoy-dissect capture`` are in the cli package (cli/kube.py).
"""
