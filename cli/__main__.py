"""``python -m envoy_dissector.cli`` is ``envoy-dissect``."""
import sys

from envoy_dissector.cli.main import main

sys.exit(main())
