"""TLS transport lines of Envoy 1.19-era and 1.40 logs (Istio mTLS between sidecars) are recognised, with their
fields, by the grammar (and the fast path agrees): the handshake steps, reads and writes, closes and failures."""
from __future__ import annotations

import pytest

from envoy_dissector.parser.grammar import parse_message

LINES = [
    ("connection\t[C5] ssl read returns: 230", "ssl_read_returns", {"bytes": "230"}),
    ('connection\t[Tags: "ConnectionId":"5"] ssl read returns: -1', "ssl_read_returns", {"bytes": "-1"}),
    ("connection\t[C5] ssl read 190 bytes", "ssl_read_bytes", {"bytes": "190"}),
    ("connection\t[C5] ssl write returns: 190", "ssl_write_returns", {"bytes": "190"}),
    ("connection\t[C5] ssl error occurred while read: WANT_READ", "ssl_error_while_read", {"reason": "WANT_READ"}),
    ("connection\t[C5] ssl error occurred while read: WANT_WRITE", "ssl_error_while_read", {"reason": "WANT_WRITE"}),
    ("connection\t[C5] ssl error occurred while read: ZERO_RETURN", "ssl_error_while_read",
     {"reason": "ZERO_RETURN"}),
    ("connection\t[C5] SSL shutdown: rc=1", "ssl_shutdown", {"code": "1"}),
    ("connection\t[C5] TLS error: 268435581:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED", "tls_failure",
     {}),
    ("connection\t[C5] remote address:127.0.0.1:8080,TLS_error:|268435581:SSL routines:OPENSSL_internal:"
     "CERTIFICATE_VERIFY_FAILED:TLS_error_end", "tls_failure", {}),
    ("connection\tverify cert failed: X509_verify_cert: certificate verification error at depth 0: unable to get "
     "local issuer certificate", "tls_failure", {}),
    # Envoy <= 1.17 (ssl_socket.cc, debug): handshake steps and success; 1.24+ async cert validation (fixtures/real/055, 047)
    ("connection\t[C1] handshake expecting read", "tls_handshake_step", {}),
    ("connection\t[C1] handshake expecting write", "tls_handshake_step", {}),
    ("connection\t[C1] handshake complete", "tls_handshake_complete", {}),
    ("connection\t[C39] Async cert validation completed", "tls_handshake_step", {}),
    ("connection\t[C1] handshake error: 1", "tls_failure", {"reason": "1"}),
    ("filter\ttls inspector: new connection accepted", "listener_noise", {}),
    ("filter\ttls:onServerName(), requestedServerName: outbound_.80_._.app.shop.svc.cluster.local", "listener_noise",
     {}),
]


@pytest.mark.parametrize(("text", "kind", "fields"), LINES, ids=[k + str(i) for i, (_, k, _) in enumerate(LINES)])
def test_tls_line(text: str, kind: str, fields: dict[str, str]) -> None:
    parsed = parse_message(text)
    assert parsed.kind == kind
    values = parsed.values(text)
    for name, value in fields.items():
        assert values[name] == value
