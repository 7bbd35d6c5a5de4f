"""A planted-secrets capture leaks into no output and no file under the cache directory (issue 11).

Secrets sit in every place and spelling (tests/security/planted.py): header dumps (fixed names, names
by pattern, values by shape, odd spacing), query strings in ``:path`` and ``match for URL``, codec
header lines, header lines cut from their record, in Istio text and JSON, bare and with kubectl
wrappers. Every command and every ``-o`` runs; nothing printed or written may hold ``MARK``.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from planted import MARK, SECRETS_PLANTED, VARIANTS, planted_text

from envoy_dissector.cli.main import main
from envoy_dissector.parser.redact import REDACTED, Redaction, redact_strings, redact_text


def _text_of(path: Path) -> str:
    if path.suffix == ".parquet":
        return pl.read_parquet(path).write_ndjson()
    return path.read_text(errors="replace")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_secret_leaks_anywhere(variant, fixtures_dir, tmp_path, capsys, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE", "1")
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE_DIR", str(cache))
    capture = tmp_path / "planted.log"
    text = VARIANTS[variant](fixtures_dir)
    capture.write_text(text)
    assert text.count(MARK) >= SECRETS_PLANTED
    out = tmp_path / "out"
    outputs = [out / f"requests{s}" for s in (".parquet", ".csv", ".jsonl", ".json", ".trace.json")]
    commands = [["analyze", str(capture), *[a for o in outputs for a in ("-o", str(o))]],
                ["analyze", str(capture), "--json"], ["analyze", str(capture), "--top", "100"],
                ["parse", str(capture)], ["parse", str(capture), "--json"],
                *[["parse", str(capture), "-o", str(out / f"events{s}")] for s in (".parquet", ".csv", ".jsonl")]]
    printed = []
    for command in commands:
        assert main([command[0], "-q", *command[1:]]) == 0
        printed.append("".join(capsys.readouterr()))
    written = list(out.iterdir())
    assert len(written) == 8
    for text_out in printed + [_text_of(p) for p in written]:
        assert MARK not in text_out
    summary = json.loads((out / "requests.json").read_text())
    assert summary["diagnostics"]["requests"] == 50  # redaction kept the capture analysable
    paths = pl.read_parquet(out / "requests.parquet")["path"].drop_nulls()
    assert paths.str.contains(f"access_token={REDACTED}", literal=True).all()
    assert paths.str.contains("ok=1", literal=True).all()  # other parameters stay
    authorities = pl.read_parquet(out / "requests.parquet")["authority"].drop_nulls()
    assert authorities.len() and not authorities.str.contains(REDACTED, literal=True).any()  # ':authority' is no secret
    assert summary["diagnostics"]["malformed_examples"]  # the cut header lines, redacted
    assert any('"x_api_key":"[redacted]"' in e for e in summary["diagnostics"]["malformed_examples"])
    assert paths.str.contains(f"api%5Fkey={REDACTED}&", literal=True).all()  # the name stays, its value goes
    cached = [p for p in cache.rglob("*") if p.is_file()]
    assert cached and all(MARK not in p.read_text(errors="replace") for p in cached)


def test_cache_holds_no_capture_value_even_without_redaction(fixtures_dir, tmp_path, capsys, monkeypatch):
    """With --no-redact the secrets are in the outputs (asked for), but never in the shape cache;
    nor is an unlisted value no rule redacts."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE", "1")
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE_DIR", str(cache))
    text = planted_text(fixtures_dir).replace("':method', 'GET'", "':method', 'GET'\n'x-note', 'plainPLANTword'")
    capture = tmp_path / "planted.log"
    unknown = "2026-11-22T01:09:59.000000Z\tdebug\tenvoy http x.cc:1\tunknown words PLANTunknown here\n"
    capture.write_text(text + unknown)
    for redact in ([], ["--no-redact"]):
        assert main(["analyze", "-q", str(capture), "--json", *redact]) == 0
        out = capsys.readouterr().out
        assert (MARK in out) == bool(redact)
    cached = [p for p in cache.rglob("*") if p.is_file()]
    assert cached
    for path in cached:
        assert MARK not in path.read_text(errors="replace")


def test_stale_cache_files_are_removed(tmp_path, fixtures_dir, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "shapes-0123456789abcdef.json").write_text('{"rules": {"authorization PLANTold": []}}')
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE", "1")
    monkeypatch.setenv("ENVOY_DISSECTOR_CACHE_DIR", str(cache))
    capture = tmp_path / "planted.log"
    capture.write_text(planted_text(fixtures_dir))
    assert main(["parse", "-q", str(capture)]) == 0
    assert not (cache / "shapes-0123456789abcdef.json").exists()


@pytest.mark.parametrize("text,secret", [
    ("'authorization', 'Bearer abc.def'", "abc.def"),
    ("'Authorization' , 'Basic Zm9vOmJhcg=='", "Zm9vOmJhcg=="),
    ("  'X-Vault-Token','hvs.s3cr3t'", "hvs.s3cr3t"),
    ("'x-something', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdEFGH'", "eyJhbGciOiJIUzI1NiJ9"),
    ("'x-something', 'Bearer tok123'", "tok123"),
    ("'x-something', 'aB3dE5fG7hJ1kL3mN5pQ7rS9tU1vW3xY5'", "aB3dE5fG7hJ1kL3mN5pQ7rS9tU1vW3xY5"),
    ("[C1] completed header: key=x-goog-api-key value=AIzaXYZ", "AIzaXYZ"),
    ("[C1] completed header: key=x-other value=Bearer xyz987", "xyz987"),
    ("[C1][S2] match for URL '/a?api_key=k1&token=t2&password=p3&x=1'", "k1&"),
    ("':path', '/cb?code=c0de&client_secret=sh&state=ok'", "c0de"),
    ("'referer', 'https://a.example/cb#access_token=fr4g&state=ok'", "fr4g"),
    ("[C1][S2] match for URL '/cb#code=fr4g'", "fr4g"),
    ("':path', '/a?api%5Fkey=k3y&ok=1'", "k3y"),
    ("':path', '/a?%61ccess%5ftoken=t0k&ok=1'", "t0k"),
    ("':path', '/login?next=https%3A%2F%2Fa%2Fcb%3Ftoken%3Dn3st%26s%3D1&ok=1'", "n3st"),
    ("':path', '/login?next=%252Fcb%253Fsig%253Dn3st&ok=1'", "n3st"),
    ("[C1] completed header: key=x-other value=Zx9q0009aB3dE5fG7hJ1kL3mN5pQ7rS9tU", "Zx9q0009aB3dE5fG7hJ1kL3mN5pQ7rS9tU"),
])
def test_rules(text, secret):
    got = redact_strings([text])[0]
    assert secret not in got and REDACTED in got


@pytest.mark.parametrize("text", ["'x-request-id', '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'",
                                  "':authority', '127.0.0.1:46289'", "'x-forwarded-host', 'auth.example.com'",
                                  "'x-b3-traceid', '80f198ee56343ba864fe8b2a57d3eff7'",
                                  "'traceparent', '00-80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-01'",
                                  "':path', '/api/v1/items?page=2&sort=name'", "'user-agent', 'curl/8.5.0'"])
def test_ids_and_ordinary_values_stay(text):
    assert redact_strings([text])[0] == text


def test_encoded_names_keep_the_rest_of_the_url():
    got = redact_strings(["':path', '/login?next=%2Fcb%3Fapi_key%3Dk3y&page=2#section-3'"])[0]
    assert got == f"':path', '/login?next=%2Fcb%3Fapi_key%3D{REDACTED}&page=2#section-3'"


@pytest.mark.parametrize("line,secrets", [
    ('{"x_api_key":"k3y1","authorization":"Bearer b34r","user_token":"t0k3n","code":200,"path":"/a"}',
     ["k3y1", "b34r", "t0k3n"]),
    ('[2026-11-22T01:09:34.000Z] "GET /a?access_token=t0k HTTP/1.1" 200 "Bearer b34r" "x" '
     '"Zx9q0009aB3dE5fG7hJ1kL3mN5pQ7rS9tU" "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"',
     ["t0k", "b34r", "Zx9q0009aB3dE5fG7hJ1kL3mN5pQ7rS9tU"]),
    ("GET /a 200 password: hunter2 X-Vault-Token=hvs.s3cr3t jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", ["hunter2",
                                                                                          "hvs.s3cr3t", "eyJhbGci"]),
])
def test_free_text_access_log_fields(line, secrets):
    """An access-log line (or any free text) quoted in diagnostics or an error: JSON fields, key: value pairs
    and values by shape; what is no secret stays (the status code, a request id)."""
    got = redact_text(line)
    assert not [s for s in secrets if s in got], got
    assert "200" in got and "/a" in got
    if "0f1e2d3c" in line:
        assert "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" in got


def test_extra_names_by_option(capsys, fixtures_dir, tmp_path):
    rules = Redaction(headers=("x-tenant-*",), params=("page",))
    got = redact_strings(["'X-Tenant-Id', 'acme'\n':path', '/a?page=2&q=ok'"], rules)[0]
    assert "acme" not in got and "page=[redacted]" in got and "q=ok" in got
    capture = tmp_path / "a.log"
    capture.write_text(planted_text(fixtures_dir))
    assert main(["analyze", "-q", str(capture), "--json", "--redact-header", "user-agent",
                 "--redact-query-param", "ok"]) == 0
    out = capsys.readouterr().out
    assert "ok=[redacted]" in out
