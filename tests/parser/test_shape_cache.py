"""The grammar's verdicts per shape survive between runs (parser/shape_cache.py, the on-disk store the CLI and
the dashboard give the parser), and never go stale; without a store the parser writes nothing."""
from __future__ import annotations

import json

import pytest
from polars.testing import assert_frame_equal

from envoy_dissector.parser import shape_cache
from envoy_dissector.parser.pipeline import parse


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE", "1")
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _without_cache(monkeypatch, path):
    with monkeypatch.context() as m:
        m.setenv("ENVOY_DISSECTOR_CACHE", "0")
        return parse(path, shapes=shape_cache)


def test_second_run_needs_no_grammar_call_and_gives_the_same_events(cache, fixture_by_rel, monkeypatch):
    fx = fixture_by_rel("istio-thread/workers/envoy.log.gz")
    first = parse(fx.path, shapes=shape_cache)
    assert first.diagnostics.grammar_calls == first.diagnostics.shapes > 0
    assert shape_cache.cache_path().parent == cache and shape_cache.cache_path().exists()
    second = parse(fx.path, shapes=shape_cache)
    # only value-free shapes are stored (words of Envoy's templates; docs/security.md): the others are
    # parsed again
    stored = len(json.loads(shape_cache.cache_path().read_text())["rules"])
    assert stored > 0 and second.diagnostics.grammar_calls == first.diagnostics.grammar_calls - stored
    assert second.diagnostics.shapes == first.diagnostics.shapes
    assert_frame_equal(second.events, first.events)
    assert_frame_equal(second.events, _without_cache(monkeypatch, fx.path).events)


def test_rules_round_trip(cache, fixture_by_rel):
    parse(fixture_by_rel("envoy/workers/envoy.log.gz").path, shapes=shape_cache)
    stored = json.loads(shape_cache.cache_path().read_text())
    rules = shape_cache.load()
    assert len(rules) == len(stored["rules"]) > 0
    assert {shape: shape_cache._encode(rule) for shape, rule in rules.items()} == stored["rules"]


def test_corrupt_or_foreign_files_are_ignored(cache, fixture_by_rel, monkeypatch):
    fx = fixture_by_rel("istio-thread/retries-503/envoy.log.gz")
    cache.mkdir(parents=True)
    shape_cache.cache_path().write_text("{not json")
    assert shape_cache.load() == {}
    parsed = parse(fx.path, shapes=shape_cache)
    assert parsed.diagnostics.grammar_calls > 0
    assert_frame_equal(parsed.events, _without_cache(monkeypatch, fx.path).events)
    assert shape_cache.load()  # rewritten


def test_name_follows_the_grammar_and_the_code(cache, monkeypatch):
    before = shape_cache.cache_path()
    real = shape_cache._source_bytes
    monkeypatch.setattr(shape_cache, "_source_bytes",
                        lambda name: real(name) + (b"// changed" if name == "EnvoyLog.g4" else b""))
    shape_cache.fingerprint.cache_clear()
    try:
        assert shape_cache.cache_path() != before
    finally:
        monkeypatch.setattr(shape_cache, "_source_bytes", real)
        shape_cache.fingerprint.cache_clear()
    assert shape_cache.cache_path() == before


def test_disabled_cache_reads_and_writes_nothing(cache, monkeypatch, fixture_by_rel):
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE", "0")
    parse(fixture_by_rel("istio-thread/retries-503/envoy.log.gz").path, shapes=shape_cache)
    assert not cache.exists()


def test_the_parser_alone_touches_no_disk(cache, fixture_by_rel):
    """No store given (a notebook's or a library caller's default): nothing is read or written under the cache."""
    fx = fixture_by_rel("istio-thread/workers/envoy.log.gz")
    first = parse(fx.path)
    assert first.diagnostics.grammar_calls == first.diagnostics.shapes > 0
    assert not cache.exists()
    parse(fx.path, shapes=shape_cache)  # the CLI's and dashboard's store fills the cache ...
    assert shape_cache.cache_path().exists()
    again = parse(fx.path)  # ... which a storeless run still does not read
    assert again.diagnostics.grammar_calls == first.diagnostics.grammar_calls


def test_envoy_names_are_taken_out_only_whole_and_only_where_envoy_lists_them():
    strip = shape_cache.without_envoy_names
    # a start-up listing: the listed items go, a name Envoy does not register (a custom extension) stays
    assert strip("main\t  envoy.transport_sockets.upstream: raw_buffer, tls, acme.secret_socket") == (
        "main\tacme.secret_socket")
    assert strip("main\t  envoy.transport_sockets.upstream: raw_buffer, tls") == "main\t"
    # bare names (``tls``) only as items of a listing; a category Envoy does not list is no listing
    assert strip("config\tvalue=tls") == "config\tvalue=tls"
    assert strip("main\t  acme.things: tls") == "main\t  acme.things: tls"
    # dotted names anywhere, as whole tokens only
    assert strip("main\tNo overload action is configured for envoy.overload_actions.shrink_heap.") == (
        "main\tNo overload action is configured for .")
    assert strip("main\tx.envoy.overload_actions.shrink_heap") == "main\tx.envoy.overload_actions.shrink_heap"
    assert strip("main\tenvoy.overload_actions.shrink_heap_acme") == "main\tenvoy.overload_actions.shrink_heap_acme"


def test_envoy_start_up_listing_is_stored_and_capture_values_are_not(cache, fixture_by_rel):
    fx = fixture_by_rel("istio-thread/workers/envoy.log.gz")
    first = parse(fx.path, shapes=shape_cache)
    text = shape_cache.cache_path().read_text()
    listings = [s for s in json.loads(text)["rules"] if s.startswith("main\t  envoy.")]
    assert len(listings) >= 100  # Envoy 1.40 lists ~105 extension categories at every start
    assert "lab_listener" not in text and "envoy-dissector-lab" not in text  # the capture's listener, user agent
    second = parse(fx.path, shapes=shape_cache)
    assert second.diagnostics.grammar_calls <= first.diagnostics.grammar_calls - len(listings)
