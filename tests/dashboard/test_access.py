"""access: the Host allow-list and the access token on the app's Flask server (test client)."""
from __future__ import annotations

import pytest

from envoy_dissector.dashboard.access import (
    ANY_HOST,
    COOKIE,
    AccessPolicy,
    default_allowed_hosts,
    hostname,
    is_loopback,
)
from envoy_dissector.dashboard.app import create_app

TOKEN = "unit-test-token-0123456789"


@pytest.fixture(scope="module")
def app():
    return create_app(demo=False, policy=AccessPolicy.for_bind("0.0.0.0", token=TOKEN,
                                                               extra_hosts=["dissector.example"]))


def get(app, path, host="dissector.example", **kw):
    return app.server.test_client().get(path, headers={"Host": host, **kw.pop("headers", {})}, **kw)


def test_names():
    assert hostname("[::1]:80") == "::1" and hostname("::1") == "::1" and hostname("A.Example.:8050") == "a.example"
    assert is_loopback("127.0.0.2") and is_loopback("::1") and not is_loopback("10.0.0.1")
    assert not is_loopback("example.com")
    assert default_allowed_hosts("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert "10.1.2.3" in default_allowed_hosts("10.1.2.3")


def test_token_by_query_cookie_or_bearer(app):
    assert get(app, "/").status_code == 401
    r = get(app, f"/?tab=x&token={TOKEN}")
    assert r.status_code == 303 and r.headers["Location"] == "/?tab=x"  # other parameters kept
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN}") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    client = app.server.test_client()
    client.set_cookie(COOKIE, TOKEN, domain="dissector.example")
    assert client.get("/", headers={"Host": "dissector.example"}).status_code == 200
    assert get(app, "/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert get(app, "/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert get(app, f"/?token={TOKEN}x").status_code == 401
    assert get(app, "/", headers={"Cookie": f"{COOKIE}=nope"}).status_code == 401


def test_host_is_checked_before_the_token(app):
    r = get(app, f"/?token={TOKEN}", host="evil.example")
    assert r.status_code == 403 and "evil.example" in r.text
    assert get(app, "/", host="localhost:8050", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_any_host_and_no_token_on_loopback():
    open_app = create_app(demo=False, policy=AccessPolicy.for_bind("127.0.0.1", extra_hosts=[ANY_HOST]))
    r = open_app.server.test_client().get("/", headers={"Host": "whatever.example"})
    assert r.status_code == 200
    assert r.headers["X-Frame-Options"] == "DENY" and r.headers["Referrer-Policy"] == "no-referrer"
    default = create_app(demo=False)  # loopback names only
    assert default.server.test_client().get("/", headers={"Host": "rebound.example"}).status_code == 403
