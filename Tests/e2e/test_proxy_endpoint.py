"""The ArcGIS Maps SDK for JavaScript `proxyUrl` form (`/proxy?<url>`), for browser apps."""
import json
import urllib.parse

import harness
from harness import cred
from test_credentials import via

APP = "http://maps.example.test:8080"


def _get(p, session, path, **kw):
    return session.request(kw.pop("method", "GET"), p.url + path, timeout=15, **kw)


def test_endpoint_is_off_without_allowed_origins(proxy, origin, session):
    r = _get(proxy, session, "/proxy?" + origin.url + "/json", headers={"Origin": APP})
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 404)
    assert "allowed_origins" in " ".join(err["details"])


def test_allowed_origin_gets_the_response_with_credentials_and_cors(proxy_factory, origin, session):
    p = proxy_factory(proxy={"allowed_origins": [APP]}, extra_config=cred("k", "api-key", origin.url, key="JSKEY"))
    r = _get(p, session, "/proxy?" + origin.url + "/echo?f=json&where=1%3D1", headers={"Origin": APP})
    assert r.status_code == 200, r.text[:300]
    assert r.headers["Access-Control-Allow-Origin"] == APP
    q = urllib.parse.parse_qs(r.json()["query"])
    assert q["token"] == ["JSKEY"] and q["f"] == ["json"] and q["where"] == ["1=1"], q
    # POST bodies are forwarded too (the JS SDK posts long queries).
    r = _get(p, session, "/proxy?" + origin.url + "/echo", method="POST", data={"where": "1=1", "f": "json"},
             headers={"Origin": APP})
    assert r.status_code == 200 and r.json()["method"] == "POST"
    assert "credential=k" in p.log_text()


def test_other_origin_is_refused(proxy_factory, origin, session):
    p = proxy_factory(proxy={"allowed_origins": [APP]}, extra_config=cred("k", "api-key", origin.url, key="JSKEY"))
    r = _get(p, session, "/proxy?" + origin.url + "/echo", headers={"Origin": "https://evil.example"})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)
    assert not [e for e in origin.request_log() if "/echo" in e["target"]]


def test_unmatched_deny_limits_the_endpoint_to_matched_services(proxy_factory, origin, session):
    """/proxy reaches what the forward proxy reaches; with unmatched = "deny" only URLs a credential matches."""
    p = proxy_factory(proxy={"allowed_origins": [APP], "unmatched": "deny"},
                      extra_config=cred("k", "api-key", origin.url + "/echo", key="JSKEY"))
    r = _get(p, session, "/proxy?" + origin.url + "/echo?f=json", headers={"Origin": APP})
    assert r.status_code == 200, r.text[:300]
    r = _get(p, session, "/proxy?" + origin.url + "/json", headers={"Origin": APP})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)


def test_preflight(proxy_factory, origin, session):
    p = proxy_factory(proxy={"allowed_origins": [APP]})
    r = _get(p, session, "/proxy?" + origin.url + "/echo", method="OPTIONS",
             headers={"Origin": APP, "Access-Control-Request-Method": "POST",
                      "Access-Control-Request-Headers": "content-type, x-requested-with"})
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == APP
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Headers"] == "content-type, x-requested-with"
    assert not origin.request_log()


def test_bad_target_and_bad_config(proxy_factory, session, tmp_path):
    p = proxy_factory(proxy={"allowed_origins": ["*"]})
    r = _get(p, session, "/proxy?ftp://x/y", headers={"Origin": APP})
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 400)
    conf = tmp_path / "c.conf"
    conf.write_text('[proxy]\nallowed_origins = ["https://maps.example.com/app"]\n')
    c = harness.run_cli(["check", "--config", str(conf)])
    assert c.returncode != 0 and "proxy.allowed_origins" in c.stderr


def test_preflight_is_a_proper_204(proxy_factory, origin):
    """The preflight answered "204 Status 204" with a Content-Length (and a body) that a 204 must not have."""
    p = proxy_factory(proxy={"allowed_origins": [APP]})
    out = harness.raw_exchange(p, b"OPTIONS /proxy?" + origin.url.encode() + b"/echo HTTP/1.1\r\nHost: x\r\nOrigin: "
                               + APP.encode() + b"\r\nAccess-Control-Request-Method: POST\r\n\r\n"
                               + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=5)
    first, _, rest = out.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 204 No Content\r\n"), first
    assert b"content-length" not in first.lower() and b"content-type" not in first.lower(), first
    # Nothing between the 204 head and the next response.
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n"), rest[:100]
