"""``python -m envoy_dissector.cli`` is ``envoy-dissect``."""
from envoy_dissector.cli.main import entry

entry()
