"""Dash web UI for envoy-dissector."""
