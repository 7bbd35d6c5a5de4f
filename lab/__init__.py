"""A reproducible laboratory: real Envoy on 127.0.0.1, a small upstream, bounded load, and Envoy's own access-log
timing as truth."""
