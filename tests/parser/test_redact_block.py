"""``redact_block`` (text lines redacted together in polars) gives what ``redact_block_reference`` (line by line in
Python, ``redact_lines``) gives: on every fixture, on the planted secrets of tests/security/planted.py in text,
JSON and kubectl wrappers, and on generated lines of the pieces the rules turn on."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envoy_dissector.parser.redact import REDACTED
from envoy_dissector.parser.redact_lines import RedactingWriter, redact_block, redact_block_reference
from tests.security.planted import MARK, VARIANTS, planted_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_planted_secrets_are_redacted_as_the_reference_does(variant: str) -> None:
    data = VARIANTS[variant](FIXTURES).encode()
    done = redact_block(data)
    assert done == redact_block_reference(data)
    assert MARK.encode() in data and done.count(b"\n") == data.count(b"\n")
    assert REDACTED.encode() in done
    assert redact_block(data, False) == data


def test_every_fixture_is_redacted_as_the_reference_does() -> None:
    paths = sorted(FIXTURES.rglob("*.log.gz")) + sorted(FIXTURES.rglob("*.log"))
    assert len(paths) > 100
    differ = []
    for path in paths:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        if redact_block(data) != redact_block_reference(data):
            differ.append(path.relative_to(FIXTURES))
    assert differ == []


_PIECES = st.sampled_from([
    "\t", "'", "', '", "'authorization', 'Bearer abc.def'", "'cookie', 'sid=1; x=2'", "'x-api-key' , 'k9Z'",
    "completed header: key=authorization value=Basic Zm9v", "completed header: key=x-b3 value=eyJhbGciOi.eyJz.sig",
    "GET /a?token=s3cret&x=1", "?api_key=", "%70assword=p", "#access_token=t", ";", "%", "{", "}", '{"a":"b"}',
    '{"authorization":"Bearer q","msg":"GET /x?code=1"}', "thread=12", "[C3][S7] ", "é", "\u2028", "\ufffd", "\r",
    " ", "header", "Zx9a0009aB3dE5fG7hJ1kL3mN5pQ7rS9tU", "x", "'", ",", "=",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_PIECES, max_size=12).map("".join), min_size=1, max_size=20),
       st.lists(st.sampled_from([b"", b"\xff", b"\xe2\x82", b"\xc3"]), min_size=1, max_size=3))
def test_generated_lines_are_redacted_as_the_reference_does(lines: list[str], junk: list[bytes]) -> None:
    data = b"\n".join(line.encode() + junk[i % len(junk)] for i, line in enumerate(lines))
    assert redact_block(data) == redact_block_reference(data)


class _Sink:
    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, chunk: bytes) -> None:
        self.written.extend(chunk)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_writer_redacts_a_stream_cut_anywhere_as_one_block_in_order(threads: int) -> None:
    data = planted_text(FIXTURES).encode()
    sink = _Sink()
    with RedactingWriter(sink, batch_bytes=4096, threads=threads) as writer:  # type: ignore[arg-type]
        for at in range(0, len(data), 777):
            writer.write(data[at:at + 777])
    assert bytes(sink.written) == redact_block_reference(data)
    assert writer._pool is None  # (its threads have ended)


def test_a_writer_left_by_an_error_writes_nothing_more_and_ends_its_threads() -> None:
    data = planted_text(FIXTURES).encode()
    sink = _Sink()
    writer = RedactingWriter(sink, batch_bytes=4096, threads=2)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="refused"), writer:
        writer.write(data[: len(data) // 2])
        raise RuntimeError("refused")
    assert writer._pool is None and not writer._pending
    # (what was written is the redaction of whole leading lines; the two batches in flight were dropped)
    half = redact_block_reference(data[: data.rfind(b"\n", 0, len(data) // 2) + 1])
    assert half.startswith(bytes(sink.written)) and len(sink.written) < len(half)


def test_a_writer_turned_to_one_thread_midway_writes_the_same_bytes_in_order() -> None:
    data = planted_text(FIXTURES).encode()
    sink = _Sink()
    with RedactingWriter(sink, batch_bytes=4096, threads=2) as writer:  # type: ignore[arg-type]
        for at in range(0, len(data), 777):
            writer.write(data[at:at + 777])
            if at >= len(data) // 3 and writer._pool is not None:
                writer.use_one_thread()
                assert writer._pool is None and not writer._pending  # (what was in flight is written)
    assert bytes(sink.written) == redact_block_reference(data)


def test_a_sensitive_name_written_with_a_unicode_look_alike_is_redacted_as_line_by_line() -> None:
    # K (KELVIN SIGN) folds to k the Unicode way the rules fold case, not the ASCII way of the quick word test:
    # the line holds no ASCII "x-api-key", yet its value is a secret
    codec = ("2026-11-28T19:42:03.796019Z\ttrace\tenvoy http source/common/http/http1/codec_impl.cc:533\t"
             '[Tags: "ConnectionId":"23"] completed header: key=x-api-\u212aey value=s3cr3tvalue\tthread=17450\n')
    data = (codec + "'x-api-\u212aey', 's3cr3tvalue'\n" + "a plain line\n").encode()
    done = redact_block(data)
    assert done == redact_block_reference(data)
    assert b"s3cr3tvalue" not in done and done.count(b"[redacted]") == 2
