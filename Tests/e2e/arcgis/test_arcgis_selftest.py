"""Self-tests of the ArcGIS test server (no proxy involved, no authproxy binary).

Run from the repo root:  python3 -m pytest Tests/e2e/arcgis -q -p no:cacheprovider
"""

import hashlib
from http.client import HTTPConnection
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from arcgis.server import (ERR_403, ERR_498, ERR_499, ESRI_QUERY_DOC, OOB_REDIRECT,
                           ArcGISServer, federate, pkce_challenge)

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.dirname(HERE)
ALICE = ("alice", "alice-pass")
APP = ("proxyapp", "proxyapp-secret")


def _noproxy_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy")}
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------

@pytest.fixture
def http():
    s = requests.Session()
    s.trust_env = False
    yield s
    s.close()


@pytest.fixture
def make():
    started = []

    def _make(**kw):
        srv = ArcGISServer(**kw).start()
        started.append(srv)
        return srv

    yield _make
    for s in started:
        s.stop()


@pytest.fixture
def standalone(make):
    return make(role="server", ttl=30)


@pytest.fixture
def fed(make):
    """A portal and a federated ArcGIS Server on two ports."""
    portal = make(role="portal", ttl=30)
    server = make(role="server", ttl=30, owning_system_url=portal.portal_url)
    return portal, server


def gen_server_token(http, srv, user=ALICE, **extra):
    data = {"username": user[0], "password": user[1], "client": "requestip", "f": "json"}
    data.update(extra)
    r = http.post(srv.server_root + "/tokens/generateToken", data=data, timeout=10)
    assert r.status_code == 200
    return r.json()


def gen_portal_token(http, portal, user=ALICE, **extra):
    data = {"username": user[0], "password": user[1], "client": "requestip", "f": "json"}
    data.update(extra)
    r = http.post(portal.sharing_url + "/generateToken", data=data, timeout=10)
    assert r.status_code == 200
    return r.json()


def query(http, srv, token=None, headers=None, **params):
    p = {"where": "1=1", "outFields": "*", "f": "json"}
    if token is not None:
        p["token"] = token
    p.update(params)
    return http.get(srv.query_url(), params=p, headers=headers or {}, timeout=10)


def authorize(http, portal, redirect="http://127.0.0.1:1/cb", **extra):
    p = {"client_id": APP[0], "response_type": "code", "redirect_uri": redirect,
         "expiration": "20160"}
    p.update(extra)
    r = http.get(portal.sharing_url + "/oauth2/authorize", params=p, allow_redirects=False,
                 timeout=10)
    return r


def code_from(r):
    assert r.status_code == 302, r.text
    loc = urlsplit(r.headers["Location"])
    return {k: v[0] for k, v in parse_qs(loc.query).items()}


# ---------------------------------------------------------------------------
# discovery
# ---------------------------------------------------------------------------

def test_rest_info_standalone_and_federated(http, standalone, fed, make):
    r = http.get(standalone.server_root + "/rest/info", params={"f": "json"})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")   # like ArcGIS Server
    info = r.json()
    assert info["currentVersion"] == 11.1 and info["fullVersion"] == "11.1.0"
    assert "owningSystemUrl" not in info
    assert info["authInfo"] == {
        "isTokenBasedSecurity": True,
        "tokenServicesUrl": standalone.server_root + "/tokens/generateToken",
        "shortLivedTokenValidity": 1}
    portal, server = fed
    info = http.get(server.server_root + "/rest/info?f=pjson").json()
    assert info["owningSystemUrl"] == portal.portal_url
    assert info["authInfo"]["tokenServicesUrl"] == portal.sharing_url + "/generateToken"
    pretty = http.get(server.server_root + "/rest/info?f=pjson").text
    assert "\n  " in pretty
    # configurable validity + legacy tokens URL
    s2 = make(role="server", short_lived_validity=7, legacy_tokens_url=True)
    a = http.get(s2.server_root + "/rest/info?f=json").json()["authInfo"]
    assert a["shortLivedTokenValidity"] == 7
    assert a["tokenServicesUrl"] == s2.server_root + "/tokens/"
    # portal discovery is public, like real portals
    pi = http.get(portal.sharing_url + "/info?f=json")
    assert pi.status_code == 200 and pi.headers["Content-Type"].startswith("application/json")
    assert pi.json() == {"owningSystemUrl": portal.portal_url,
                         "authInfo": {"tokenServicesUrl": portal.sharing_url + "/generateToken",
                                      "isTokenBasedSecurity": True}}


# ---------------------------------------------------------------------------
# generateToken (server)
# ---------------------------------------------------------------------------

def test_generate_token_good_and_bad(http, make):
    srv = make(role="server", ttl=30, ssl=True)
    t0 = time.time()
    doc = gen_server_token(http, srv, expiration="60")
    assert set(doc) == {"token", "expires", "ssl"} and doc["ssl"] is True
    assert t0 * 1000 + 29_000 <= doc["expires"] <= time.time() * 1000 + 30_500  # capped to ttl
    short = gen_server_token(http, srv, expiration="0.05")   # 3 s requested: honoured
    assert short["expires"] - time.time() * 1000 < 4000
    assert query(http, srv, doc["token"]).json() == ESRI_QUERY_DOC
    bad = http.post(srv.server_root + "/tokens/generateToken",
                    data={"username": "alice", "password": "nope", "client": "requestip",
                          "f": "json"})
    assert bad.status_code == 200
    assert bad.json() == {"error": {"code": 400, "message": "Unable to generate token.",
                                    "details": ["Invalid username or password."]}}
    unknown = http.post(srv.server_root + "/tokens/generateToken",
                        data={"username": "mallory", "password": "x", "f": "json"})
    assert unknown.json()["error"]["details"] == ["Invalid username or password."]
    missing = http.post(srv.server_root + "/tokens/generateToken", data={"f": "json"}).json()
    assert missing["error"]["code"] == 400 and len(missing["error"]["details"]) == 2
    # GET is refused like ArcGIS Server >= 10.3 does
    g = http.get(srv.server_root + "/tokens/generateToken",
                 params={"username": "alice", "password": "alice-pass", "f": "json"})
    assert g.status_code == 200
    assert g.json() == {"error": {"code": 405, "message": "Method not supported",
                                  "details": "Generate Token request should not contain "
                                             "username and password in the query string."}}
    g2 = http.get(srv.server_root + "/tokens/generateToken?f=json").json()
    assert g2["error"]["code"] == 405
    # client=referer needs a referer
    nr = http.post(srv.server_root + "/tokens/generateToken",
                   data={"username": "alice", "password": "alice-pass", "client": "referer",
                         "f": "json"}).json()
    assert nr["error"]["details"] == ["'referer' must be specified."]
    # legacy endpoint /arcgis/tokens/
    leg = http.post(srv.server_root + "/tokens/", data={"username": "alice",
                                                       "password": "alice-pass", "f": "json"})
    assert "token" in leg.json()
    st = srv.stats()
    assert st["tokens_issued"]["generate_password"] == 3
    assert st["token_failures"] == {"bad_credentials": 2, "missing_credentials": 1,
                                    "method_not_allowed": 2, "bad_client": 1}


def test_referer_binding(http, standalone):
    tok = gen_server_token(http, standalone, client="referer",
                           referer="https://app.example")["token"]
    r = query(http, standalone, tok)
    assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "referer_mismatch"
    r = query(http, standalone, tok, headers={"Referer": "https://app.example/map.html"})
    assert r.json() == ESRI_QUERY_DOC


def query_from(srv, source, token, referer=None):
    """A query sent from another loopback address (as a replica behind another NAT address would)."""
    u = urlsplit(srv.query_url())
    c = HTTPConnection(u.hostname, u.port, timeout=10, source_address=(source, 0))
    try:
        c.request("GET", u.path + "?f=json&where=1%3D1&token=" + token,
                  headers={"Referer": referer} if referer else {})
        r = c.getresponse()
        return r.status, json.loads(r.read()), r.getheader("X-Arcgis-Test-Reason")
    finally:
        c.close()


def test_requestip_binding_refuses_another_source_address(http, standalone):
    tok = gen_server_token(http, standalone, client="requestip")["token"]
    assert query_from(standalone, "127.0.0.1", tok)[1] == ESRI_QUERY_DOC
    status, body, reason = query_from(standalone, "127.0.0.2", tok)
    assert (status, body, reason) == (200, ERR_498, "ip_mismatch")
    # No client at all is requestip too (ArcGIS's default).
    tok2 = http.post(standalone.server_root + "/tokens/generateToken",
                     data={"username": "alice", "password": "alice-pass", "f": "json"}).json()["token"]
    assert query_from(standalone, "127.0.0.3", tok2)[2] == "ip_mismatch"
    # A referer-bound token works from any address that sends its referer.
    rtok = gen_server_token(http, standalone, client="referer", referer="app://authproxy/x")["token"]
    for source in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
        assert query_from(standalone, source, rtok, referer="app://authproxy/x")[1] == ESRI_QUERY_DOC
    assert query_from(standalone, "127.0.0.2", rtok)[2] == "referer_mismatch"
    assert {e["client"] for e in standalone.request_log()} == {"127.0.0.1", "127.0.0.2", "127.0.0.3"}


def test_the_exchange_checks_the_portal_tokens_referer(http, fed):
    portal, server = fed
    ptok = gen_portal_token(http, portal, client="referer", referer="app://authproxy/x")["token"]
    data = {"token": ptok, "serverUrl": server.server_root, "client": "referer", "referer": "app://authproxy/x",
            "f": "json"}
    r = http.post(portal.sharing_url + "/generateToken", data=data)
    assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "referer_mismatch"
    r = http.post(portal.sharing_url + "/generateToken", data=data, headers={"Referer": "app://authproxy/x"})
    stok = r.json()["token"]
    assert query(http, server, stok).json() == ERR_498
    assert query(http, server, stok, headers={"Referer": "app://authproxy/x"}).json() == ESRI_QUERY_DOC


@pytest.mark.parametrize("mode,where", [
    ("portal", "/sharing/oauth2/authorize?client_id=arcgisonline&response_type=token"),
    ("signin", "/sharing/rest/oauth2/signin?returnUrl="),
    ("saml", "/idp/adfs/ls/?SAMLRequest="),
    ("idp", "/idp/login?returnUrl="),
])
def test_web_tier_mode_redirects_to_sign_in_instead_of_498(http, make, mode, where):
    srv = make(role="server", ttl=30, signin_redirect=mode)
    tok = gen_server_token(http, srv)["token"]
    assert query(http, srv, tok).json() == ESRI_QUERY_DOC
    for token in (None, "bogus", tok):
        if token == tok:
            srv.expire_all()
        r = http.get(
            srv.query_url(), params=dict({"f": "json"}, **({"token": token} if token else {})),
            allow_redirects=False, timeout=10)
        assert r.status_code == 302, (r.status_code, r.text[:200])
        loc = r.headers["Location"]
        assert where in loc, loc
        assert "redirect_uri" in loc or "returnUrl" in loc or "RelayState" in loc
    # The sign-in page at the end of the redirect is a login form, not data.
    page = http.get(loc, allow_redirects=False, timeout=10)
    if mode != "portal":
        assert page.status_code == 200 and "Sign In" in page.text and "<form" in page.text
    st = srv.stats()
    assert st["signin_redirects"] == 3 and st["rejected_498"] == 0 and st["rejected_499"] == 0, st
    # Portal endpoints and the token service keep their JSON answers.
    assert "token" in gen_server_token(http, srv)
    # Switched off at run time, the 498 is back.
    srv.set(signin_redirect="none")
    assert query(http, srv, "bogus").json() == ERR_498


def test_a_moved_service_is_an_ordinary_redirect(http, standalone):
    r = http.get(standalone.query_url(folder="Moved"), params={"f": "json", "where": "1=1"},
                 allow_redirects=False, timeout=10)
    assert r.status_code == 301
    assert r.headers["Location"].startswith(standalone.query_url(folder="Secure") + "?")
    assert "where=1%3D1" in r.headers["Location"]
    assert standalone.stats()["moved_redirects"] == 1


# ---------------------------------------------------------------------------
# token transport, double tokens
# ---------------------------------------------------------------------------

def test_token_transports_and_double_token(http, standalone):
    srv = standalone
    tok = gen_server_token(http, srv)["token"]
    tok2 = gen_server_token(http, srv)["token"]
    assert tok != tok2
    base = {"where": "1=1", "f": "json"}
    assert http.get(srv.query_url(), params=dict(base, token=tok)).json() == ESRI_QUERY_DOC
    assert http.post(srv.query_url(), data=dict(base, token=tok)).json() == ESRI_QUERY_DOC
    assert http.get(srv.query_url(), params=base,
                    headers={"X-Esri-Authorization": "Bearer " + tok}).json() == ESRI_QUERY_DOC
    assert http.get(srv.query_url(), params=base,
                    headers={"Authorization": "Bearer " + tok}).json() == ESRI_QUERY_DOC
    # the same token twice is fine
    assert http.get(srv.query_url(), params=dict(base, token=tok),
                    headers={"X-Esri-Authorization": "Bearer " + tok}).json() == ESRI_QUERY_DOC
    # two different tokens: error + counted, whatever the transport
    d1 = http.get(srv.query_url() + "?token=%s&token=%s&f=json" % (tok, tok2))
    d2 = http.get(srv.query_url(), params=dict(base, token=tok),
                  headers={"X-Esri-Authorization": "Bearer " + tok2})
    d3 = http.post(srv.query_url() + "?token=" + tok, data=dict(base, token=tok2))
    for d in (d1, d2, d3):
        assert d.status_code == 200 and d.json() == ERR_498
        assert d.headers["X-Arcgis-Test-Reason"] == "double_token"
    st = srv.stats()
    assert st["double_token"] == 3 and st["same_token_twice"] == 1
    assert st["rejected_498"] == 0 and st["accepted"] == 5
    assert st["token_sources"] == {"query": 6, "form": 2, "x-esri-authorization": 3,
                                   "authorization": 1}
    log = srv.request_log()
    assert [e["token_sources"] for e in log[:4]] == [["query"], ["form"],
                                                     ["x-esri-authorization"],
                                                     ["authorization"]]
    assert all(e["outcome"] == "ok" for e in log[:5])
    assert [e["double_token"] for e in log[5:]] == [True, True, True]
    assert log[6]["token_sources"] == ["query", "x-esri-authorization"]
    assert log[0]["token"] == tok


# ---------------------------------------------------------------------------
# rejection forms
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("code", [498, 499])
def test_rejection_forms(http, standalone, code):
    srv = standalone
    tok = "not-a-token" if code == 498 else None
    exp = ERR_498 if code == 498 else ERR_499

    r = query(http, srv, tok)                       # default: json
    assert r.status_code == 200 and r.text == json.dumps(exp, separators=(",", ":"))
    r = query(http, srv, tok, __err="json")
    assert r.status_code == 200 and r.json() == exp
    r = query(http, srv, tok, __err="json-spaced")
    assert r.status_code == 200 and r.json() == exp
    assert '"code" : %d' % code in r.text and "\n" in r.text
    r = query(http, srv, tok, __err="status")
    assert r.status_code == code and r.json() == exp
    r = query(http, srv, tok, callback="cb")        # callback => always JSONP
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/javascript")
    assert r.text == "cb(%s);" % json.dumps(exp, separators=(",", ":"))
    r = query(http, srv, tok, callback="dojo.io.script.jsonp_x._jsonpCallback", __err="status")
    assert r.status_code == 200 and r.text.startswith("dojo.io.script.jsonp_x._jsonpCallback({")
    r = query(http, srv, tok, __err="jsonp", callback="cb2")
    assert r.text.startswith("cb2(")
    r = query(http, srv, tok, __err="html")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    assert ("Invalid Token" if code == 498 else "Token Required") in r.text
    # tiles default to the HTML page
    t = http.get(srv.tile_url(3, 2, 1), params={"token": tok} if tok else {})
    assert t.status_code == 200 and t.headers["Content-Type"].startswith("text/html")
    assert ("Invalid Token" if code == 498 else "Token Required") in t.text
    t = http.get(srv.tile_url(3, 2, 1), params=dict({"__err": "status"},
                                                    **({"token": tok} if tok else {})))
    assert t.status_code == code
    st = srv.stats()
    assert st["rejected_%d" % code] == 10 and st["accepted"] == 0


def test_403_body_form_answers_a_valid_token_with_200_and_err_403(http, standalone):
    srv = standalone
    tok = gen_server_token(http, srv)["token"]
    r = query(http, srv, tok, __err="403-body")
    assert r.status_code == 200 and r.json() == ERR_403
    r = query(http, srv, "bad", __err="403-body")       # token errors keep their usual shape
    assert r.status_code == 200 and r.json()["error"]["code"] == 498
    r = query(http, srv, None, __err="403-body")
    assert r.status_code == 200 and r.json()["error"]["code"] == 499


def test_403_is_not_a_token_error_and_server_wide_form(http, standalone):
    srv = standalone
    tok = gen_server_token(http, srv)["token"]
    r = query(http, srv, tok, __err="403")          # even with a valid token
    assert r.status_code == 403 and r.json() == ERR_403
    assert ERR_403["error"]["messageCode"] == "GWM_0003"
    r = query(http, srv, None, __err="403")
    assert r.status_code == 403
    # server-wide default form
    r = http.post(srv.url + "/__admin/error-form", data={"form": "status"})
    assert r.json() == {"form": "status"}
    assert query(http, srv, "bad").status_code == 498
    assert query(http, srv, None).status_code == 499
    assert http.get(srv.tile_url(), params={"token": "bad"}).status_code == 498
    assert query(http, srv, "bad", __err="json").status_code == 200    # per request wins
    http.post(srv.url + "/__admin/error-form", data={"form": "auto"})
    assert query(http, srv, "bad").status_code == 200
    assert http.get(srv.tile_url(), params={"token": "bad"}).headers["Content-Type"].startswith(
        "text/html")
    st = srv.stats()
    assert st["rejected_403"] == 2 and st["rejected_498"] == 5 and st["rejected_499"] == 1


def test_public_folder_and_other_resources(http, standalone):
    srv = standalone
    pub = srv.query_url(folder="Public")
    assert http.get(pub, params={"f": "json"}).json() == ESRI_QUERY_DOC
    r = http.get(pub, params={"f": "json", "token": "garbage"})      # invalid token: still 498
    assert r.json() == ERR_498
    tok = gen_server_token(http, srv)["token"]
    assert http.get(pub, params={"f": "json", "token": tok}).json() == ESRI_QUERY_DOC
    svc = http.get(srv.service_url(), params={"f": "json", "token": tok}).json()
    assert svc["layers"][0]["geometryType"] == "esriGeometryPoint"
    lyr = http.get(srv.service_url() + "/0", params={"f": "pjson", "token": tok}).json()
    assert lyr["fields"] == ESRI_QUERY_DOC["fields"]
    assert http.get(srv.service_url(), params={"f": "json"}).json() == ERR_499
    cnt = http.get(srv.query_url(), params={"returnCountOnly": "true", "f": "json",
                                            "token": tok}).json()
    assert cnt == {"count": 3}
    gj = http.get(srv.query_url(), params={"f": "geojson", "token": tok}).json()
    assert gj["type"] == "FeatureCollection" and len(gj["features"]) == 3
    png = http.get(srv.tile_url(4, 5, 6), params={"token": tok})
    assert png.status_code == 200 and png.headers["Content-Type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n") and len(png.content) < 4096
    jp = http.get(srv.query_url(), params={"f": "json", "token": tok, "callback": "cb"})
    assert jp.text.startswith("cb({") and jp.text.endswith("});")
    assert http.get(srv.server_root + "/rest/services?f=json").json()["folders"]
    assert http.get(srv.url + "/nothing/here").status_code == 404


# ---------------------------------------------------------------------------
# federation
# ---------------------------------------------------------------------------

def test_federation_exchange_between_two_instances(http, fed, make):
    portal, server = fed
    other = make(role="server", ttl=30, owning_system_url=portal.portal_url)
    foreign = make(role="server", ttl=30)                   # not federated with portal
    ptok = gen_portal_token(http, portal)["token"]
    # a portal token is not a server token (unless accept_portal_tokens)
    r = query(http, server, ptok)
    assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "portal_token_not_accepted"
    # exchange
    ex = http.post(portal.sharing_url + "/generateToken",
                   data={"token": ptok, "serverUrl": server.server_root, "f": "json"})
    doc = ex.json()
    assert set(doc) == {"token", "expires", "ssl"} and doc["token"] != ptok
    stok = doc["token"]
    assert query(http, server, stok).json() == ESRI_QUERY_DOC
    # serverUrl given as the services URL works too (same root)
    ex2 = http.post(portal.sharing_url + "/generateToken",
                    data={"token": ptok, "serverUrl": server.server_root + "/rest/services",
                          "f": "json"}).json()
    assert query(http, server, ex2["token"]).json() == ESRI_QUERY_DOC
    # the server token is bound to its server and is not a portal token
    r = query(http, other, stok)
    assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "wrong_audience"
    r = http.get(portal.sharing_url + "/portals/self", params={"f": "json", "token": stok})
    assert r.json() == ERR_498
    # refusals: unknown server, bad / expired portal token
    nf = http.post(portal.sharing_url + "/generateToken",
                   data={"token": ptok, "serverUrl": foreign.server_root, "f": "json"}).json()
    assert nf["error"]["code"] == 400 and "federated" in nf["error"]["details"][0]
    bad = http.post(portal.sharing_url + "/generateToken",
                    data={"token": "bogus", "serverUrl": server.server_root, "f": "json"})
    assert bad.json() == ERR_498
    # explicit registration (no rest/info probe)
    strict = make(role="portal", ttl=30, auto_federate=False)
    s3 = make(role="server", ttl=30, owning_system_url=strict.portal_url)
    pt3 = gen_portal_token(http, strict)["token"]
    r = http.post(strict.sharing_url + "/generateToken",
                  data={"token": pt3, "serverUrl": s3.server_root, "f": "json"}).json()
    assert "error" in r
    http.post(strict.url + "/__admin/federate", data={"serverUrl": s3.server_root})
    r = http.post(strict.sharing_url + "/generateToken",
                  data={"token": pt3, "serverUrl": s3.server_root, "f": "json"}).json()
    assert query(http, s3, r["token"]).json() == ESRI_QUERY_DOC
    # portal force-expire: its portal token can no longer be exchanged
    http.post(portal.url + "/__admin/expire")
    r = http.post(portal.sharing_url + "/generateToken",
                  data={"token": ptok, "serverUrl": server.server_root, "f": "json"})
    assert r.json() == ERR_498
    st = portal.stats()
    assert st["tokens_issued"]["generate_federated"] == 2
    assert st["token_failures"] == {"not_federated": 1, "invalid_portal_token": 2}
    assert st["validate_calls"] >= 3
    # server-side counters are not polluted by the back-channel
    assert set(server.stats()["requests"]) == {"query"}


def test_accept_portal_tokens_and_role_both(http, make):
    both = make(role="both", ttl=30, federate_self=True)
    info = http.get(both.server_root + "/rest/info?f=json").json()
    assert info["owningSystemUrl"] == both.portal_url
    ptok = gen_portal_token(http, both)["token"]
    assert query(http, both, ptok).json() == ERR_498
    stok = http.post(both.sharing_url + "/generateToken",
                     data={"token": ptok, "serverUrl": both.server_root, "f": "json"}).json()
    assert query(http, both, stok["token"]).json() == ESRI_QUERY_DOC
    both.set(accept_portal_tokens=True)
    assert query(http, both, ptok).json() == ESRI_QUERY_DOC
    # separate processes style: server accepts portal tokens via the back-channel
    portal = make(role="portal", ttl=30)
    server = make(role="server", ttl=30)
    federate(portal, server, accept_portal_tokens=True)
    ptok = gen_portal_token(http, portal)["token"]
    assert query(http, server, ptok).json() == ESRI_QUERY_DOC


# ---------------------------------------------------------------------------
# OAuth 2.0
# ---------------------------------------------------------------------------

def test_oauth_client_credentials(http, fed):
    portal, server = fed
    url = portal.sharing_url + "/oauth2/token"
    r = http.post(url, data={"client_id": APP[0], "client_secret": APP[1],
                             "grant_type": "client_credentials", "expiration": "120", "f": "json"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    doc = r.json()
    assert set(doc) == {"access_token", "expires_in"} and doc["expires_in"] == 30
    tok = doc["access_token"]
    me = http.get(portal.sharing_url + "/portals/self", params={"f": "json", "token": tok})
    assert me.json()["isPortal"] is True
    # exchange the app token for a server token
    ex = http.post(portal.sharing_url + "/generateToken",
                   data={"token": tok, "serverUrl": server.server_root, "f": "json"}).json()
    assert query(http, server, ex["token"]).json() == ESRI_QUERY_DOC
    bad = http.post(url, data={"client_id": APP[0], "client_secret": "wrong",
                               "grant_type": "client_credentials", "f": "json"})
    assert bad.status_code == 200
    assert bad.json() == {"error": {"code": 400, "error": "invalid_client",
                                    "error_description": "Invalid client_secret",
                                    "message": "Invalid client_secret", "details": []}}
    unk = http.post(url, data={"client_id": "nope", "client_secret": "x",
                               "grant_type": "client_credentials", "f": "json"}).json()
    assert unk["error"]["error"] == "invalid_client_id"
    st = portal.stats()
    assert st["tokens_issued"]["oauth_client_credentials"] == 1
    assert st["token_failures"] == {"invalid_client_secret": 1, "invalid_client": 1}


def test_oauth_authorization_code_pkce_refresh(http, make):
    portal = make(role="portal", ttl=30, refresh_ttl=600, oauth_error_status=400)
    tok_url = portal.sharing_url + "/oauth2/token"
    verifier = secrets.token_urlsafe(48)
    redirect = "http://127.0.0.1:1/callback"
    r = authorize(http, portal, redirect, code_challenge=pkce_challenge(verifier),
                  code_challenge_method="S256", state="xyz 1")
    q = code_from(r)
    assert r.headers["Location"].startswith(redirect + "?code=")
    assert q["state"] == "xyz 1"
    code = q["code"]
    # wrong verifier -> PKCE failure (and the code is consumed, like real portals)
    bad = http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code",
                                   "code": code, "redirect_uri": redirect,
                                   "code_verifier": "wrong" * 10, "f": "json"})
    assert bad.status_code == 400
    assert bad.json()["error"]["error_description"] == "Invalid code_verifier"
    q = code_from(authorize(http, portal, redirect, code_challenge=pkce_challenge(verifier),
                            code_challenge_method="S256"))
    missing = http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code",
                                       "code": q["code"], "redirect_uri": redirect, "f": "json"})
    assert missing.json()["error"]["error_description"] == "code_verifier not specified"
    q = code_from(authorize(http, portal, redirect, code_challenge=pkce_challenge(verifier),
                            code_challenge_method="S256"))
    good = http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code",
                                    "code": q["code"], "redirect_uri": redirect,
                                    "code_verifier": verifier, "f": "json"})
    assert good.status_code == 200
    doc = good.json()
    assert set(doc) == {"access_token", "expires_in", "username", "ssl", "refresh_token",
                        "refresh_token_expires_in"}
    assert doc["username"] == "alice" and doc["ssl"] is False and doc["expires_in"] == 30
    assert doc["refresh_token_expires_in"] == 600
    me = http.get(portal.sharing_url + "/community/self",
                  params={"f": "json"}, headers={"X-Esri-Authorization": "Bearer "
                                                 + doc["access_token"]}).json()
    assert me["username"] == "alice"
    # a code works once
    again = http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code",
                                     "code": q["code"], "redirect_uri": redirect,
                                     "code_verifier": verifier, "f": "json"})
    assert again.json()["error"]["error_description"] == "Invalid authorization code"
    # refresh: new access token, no new refresh token
    ref = http.post(tok_url, data={"client_id": APP[0], "grant_type": "refresh_token",
                                   "refresh_token": doc["refresh_token"], "f": "json"}).json()
    assert set(ref) == {"access_token", "expires_in", "username", "ssl"}
    assert ref["access_token"] != doc["access_token"]
    badr = http.post(tok_url, data={"client_id": APP[0], "grant_type": "refresh_token",
                                    "refresh_token": "bogus", "f": "json"})
    assert badr.status_code == 400
    assert badr.json() == {"error": {"code": 400, "error": "invalid_request",
                                     "error_description": "Invalid refresh_token",
                                     "message": "Invalid refresh_token", "details": []}}
    # exchange_refresh_token returns a new refresh token
    exr = http.post(tok_url, data={"client_id": APP[0], "grant_type": "exchange_refresh_token",
                                   "refresh_token": doc["refresh_token"],
                                   "redirect_uri": redirect, "f": "json"}).json()
    assert exr["refresh_token"] != doc["refresh_token"]
    # plain authorization code without PKCE, and __user
    q = code_from(authorize(http, portal, redirect, __user="bob"))
    plain = http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code",
                                     "code": q["code"], "redirect_uri": redirect}).json()
    assert plain["username"] == "bob"
    wrong_redirect_code = code_from(authorize(http, portal, redirect))["code"]
    wr = http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code",
                                  "code": wrong_redirect_code,
                                  "redirect_uri": "http://127.0.0.1:1/other"}).json()
    assert wr["error"]["error_description"] == "Invalid redirect_uri"
    st = portal.stats()
    assert st["tokens_issued"]["oauth_authorization_code"] == 2
    assert st["tokens_issued"]["oauth_refresh"] == 1
    assert st["tokens_issued"]["oauth_exchange_refresh"] == 1
    assert st["token_failures"] == {"pkce": 2, "invalid_code": 1, "invalid_refresh_token": 1,
                                    "invalid_redirect_uri": 1}


def test_exchange_refresh_token_full_life_counted_and_old_one_kept_or_revoked(http, make):
    """exchange_refresh_token: a new refresh token of the full configured life (not the sign-in's shorter
    `expiration`), the same redirect_uri as the sign-in, counted in stats (a second exchange of one refresh token
    counted apart); the old refresh token keeps working unless `exchange_revokes_old` is set."""
    portal = make(role="portal", ttl=30, refresh_ttl=600)
    tok_url = portal.sharing_url + "/oauth2/token"
    redirect = "http://127.0.0.1:1/callback"

    def sign_in(**extra):
        q = code_from(authorize(http, portal, redirect, **extra))
        return http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code", "code": q["code"],
                                        "redirect_uri": redirect, "f": "json"}).json()

    def exchange(rt, uri=redirect):
        return http.post(tok_url, data={"client_id": APP[0], "grant_type": "exchange_refresh_token",
                                        "refresh_token": rt, "redirect_uri": uri, "f": "json"}).json()

    def refresh(rt):
        return http.post(tok_url, data={"client_id": APP[0], "grant_type": "refresh_token", "refresh_token": rt,
                                        "f": "json"}).json()

    doc = sign_in(expiration=2)  # a two-minute sign-in
    assert doc["refresh_token_expires_in"] == 120
    assert exchange(doc["refresh_token"], "http://127.0.0.1:1/other")["error"]["error_description"] == \
        "Invalid redirect_uri"
    exr = exchange(doc["refresh_token"])
    assert exr["refresh_token"] != doc["refresh_token"] and exr["refresh_token_expires_in"] == 600
    assert "access_token" in refresh(doc["refresh_token"])  # the old one still works by default
    assert "access_token" in refresh(exr["refresh_token"])
    exchange(doc["refresh_token"])  # exchanged a second time: counted
    st = portal.stats()
    assert st["refresh_exchanges"] == 2 and st["refresh_exchange_repeats"] == 1

    portal.set(exchange_revokes_old=True)
    doc = sign_in()
    exr = exchange(doc["refresh_token"])
    assert "refresh_token" in exr
    assert refresh(doc["refresh_token"])["error"]["error_description"] == "Invalid refresh_token"
    assert exchange(doc["refresh_token"])["error"]["error_description"] == "Invalid refresh_token"
    assert "access_token" in refresh(exr["refresh_token"])
    st = portal.stats()
    assert st["refresh_exchanges"] == 3 and st["refresh_exchange_repeats"] == 2


def test_authorize_errors_and_oob_page(http, fed):
    portal, _ = fed
    r = authorize(http, portal, OOB_REDIRECT)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    m = re.search(r'id="code"[^>]*value="([^"]+)"', r.text)
    assert m
    code = m.group(1)
    doc = http.post(portal.sharing_url + "/oauth2/token",
                    data={"client_id": APP[0], "grant_type": "authorization_code", "code": code,
                          "redirect_uri": OOB_REDIRECT, "f": "json"}).json()
    assert "refresh_token" in doc
    # real-style approval page too
    assert 'id="code"' in http.get(portal.url + "/portal/sharing/oauth2/approval",
                                   params={"code": code}).text
    # errors
    r = http.get(portal.sharing_url + "/oauth2/authorize",
                 params={"client_id": "nope", "response_type": "code", "redirect_uri": "x"},
                 allow_redirects=False)
    assert r.status_code == 400 and "Invalid client_id" in r.text
    d = code_from(authorize(http, portal, __deny="1", state="s"))
    assert d == {"error": "access_denied", "error_description": "The user denied your request.",
                 "state": "s"}
    # implicit grant
    r = authorize(http, portal, response_type="token", state="k")
    frag = parse_qs(urlsplit(r.headers["Location"]).fragment)
    assert frag["state"] == ["k"] and frag["access_token"][0]


def test_revoke(http, fed):
    portal, server = fed
    redirect = "http://127.0.0.1:1/cb"
    tok_url = portal.sharing_url + "/oauth2/token"
    code = code_from(authorize(http, portal, redirect))["code"]
    doc = http.post(tok_url, data={"client_id": APP[0], "grant_type": "authorization_code",
                                   "code": code, "redirect_uri": redirect}).json()
    at, rt = doc["access_token"], doc["refresh_token"]
    at2 = http.post(tok_url, data={"client_id": APP[0], "grant_type": "refresh_token",
                                   "refresh_token": rt}).json()["access_token"]
    me = portal.sharing_url + "/portals/self"
    assert "isPortal" in http.get(me, params={"f": "json", "token": at}).json()
    # access token revocation (token_type_hint honoured or not, both work)
    r = http.post(portal.sharing_url + "/oauth2/revokeToken",
                  data={"client_id": APP[0], "auth_token": at, "token_type_hint": "access_token",
                        "f": "json"})
    assert r.json() == {"success": True}
    assert http.get(me, params={"f": "json", "token": at}).json() == ERR_498
    assert "isPortal" in http.get(me, params={"f": "json", "token": at2}).json()
    # refresh token revocation kills the refresh token and the tokens derived from it
    r = http.post(portal.sharing_url + "/oauth2/revokeToken",
                  data={"client_id": APP[0], "token": rt, "token_type_hint": "refresh_token"})
    assert r.json() == {"success": True}
    assert http.get(me, params={"f": "json", "token": at2}).json() == ERR_498
    rr = http.post(tok_url, data={"client_id": APP[0], "grant_type": "refresh_token",
                                  "refresh_token": rt}).json()
    assert rr["error"]["error_description"] == "Invalid refresh_token"
    # unknown token: success, no-op (real portals leak nothing)
    r = http.post(portal.sharing_url + "/oauth2/revokeToken",
                  data={"client_id": APP[0], "auth_token": "whatever"})
    assert r.json() == {"success": True}
    st = portal.stats()
    assert st["revocations"] == 3 and st["revoke_calls"] == 3 and st["revoke_noop"] == 1


def test_portal_self_requires_token(http, fed):
    portal, _ = fed
    r = http.get(portal.sharing_url + "/portals/self", params={"f": "json"})
    assert r.status_code == 200 and r.json() == ERR_499
    tok = gen_portal_token(http, portal)["token"]
    doc = http.get(portal.sharing_url + "/portals/self", params={"f": "json", "token": tok}).json()
    assert doc["user"] == {"username": "alice"} and doc["isPortal"] is True
    r = http.get(portal.sharing_url + "/portals/self",
                 params={"f": "json", "token": "bad", "__err": "status"})
    assert r.status_code == 498
    # portal generateToken refuses GET / credentials in the query string
    g = http.get(portal.sharing_url + "/generateToken", params={"f": "json"}).json()
    assert g["error"]["code"] == 405
    q = http.post(portal.sharing_url + "/generateToken?username=alice&password=alice-pass",
                  data={"f": "json"}).json()
    assert "query string" in q["error"]["details"][0]


# ---------------------------------------------------------------------------
# lifecycle: ttl, force-expire, outage, password change
# ---------------------------------------------------------------------------

def test_expiry_after_ttl(http, fed, make):
    srv = make(role="server", ttl=2)
    tok = gen_server_token(http, srv)["token"]
    assert query(http, srv, tok).json() == ESRI_QUERY_DOC
    portal = make(role="portal", ttl=2)
    cc = http.post(portal.sharing_url + "/oauth2/token",
                   data={"client_id": APP[0], "client_secret": APP[1],
                         "grant_type": "client_credentials"}).json()
    assert cc["expires_in"] == 2
    time.sleep(2.2)
    r = query(http, srv, tok)
    assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "expired"
    assert http.get(portal.sharing_url + "/portals/self",
                    params={"token": cc["access_token"], "f": "json"}).json() == ERR_498
    assert query(http, srv, gen_server_token(http, srv)["token"]).json() == ESRI_QUERY_DOC


def test_force_expire(http, fed):
    portal, server = fed
    tok = gen_server_token(http, server)["token"]
    ptok = gen_portal_token(http, portal)["token"]
    stok = http.post(portal.sharing_url + "/generateToken",
                     data={"token": ptok, "serverUrl": server.server_root}).json()["token"]
    redirect = "http://127.0.0.1:1/cb"
    code = code_from(authorize(http, portal, redirect))["code"]
    doc = http.post(portal.sharing_url + "/oauth2/token",
                    data={"client_id": APP[0], "grant_type": "authorization_code",
                          "code": code, "redirect_uri": redirect}).json()
    assert query(http, server, tok).json() == ESRI_QUERY_DOC
    assert query(http, server, stok).json() == ESRI_QUERY_DOC
    r = http.post(server.url + "/__admin/expire")
    assert r.json()["expired"] == "access"
    assert query(http, server, tok).json() == ERR_498
    assert query(http, server, stok).json() == ERR_498          # federated ones too
    assert query(http, server, gen_server_token(http, server)["token"]).json() == ESRI_QUERY_DOC
    http.post(portal.url + "/__admin/expire")                   # access only: refresh survives
    me = portal.sharing_url + "/portals/self"
    assert http.get(me, params={"token": doc["access_token"]}).json() == ERR_498
    new = http.post(portal.sharing_url + "/oauth2/token",
                    data={"client_id": APP[0], "grant_type": "refresh_token",
                          "refresh_token": doc["refresh_token"]}).json()
    assert "isPortal" in http.get(me, params={"token": new["access_token"]}).json()
    http.post(portal.url + "/__admin/expire", data={"what": "all"})
    dead = http.post(portal.sharing_url + "/oauth2/token",
                     data={"client_id": APP[0], "grant_type": "refresh_token",
                           "refresh_token": doc["refresh_token"]}).json()
    assert dead["error"]["error"] == "invalid_request"


def test_token_service_down(http, fed):
    portal, server = fed
    srv_gen = server.server_root + "/tokens/generateToken"
    creds = {"username": "alice", "password": "alice-pass", "f": "json"}
    r = http.post(server.url + "/__admin/token-service", data={"mode": "down"})
    assert r.json()["mode"] == "down"
    r = http.post(srv_gen, data=creds)
    assert r.status_code == 503 and "Service Unavailable" in r.text
    http.post(portal.url + "/__admin/token-service", data={"mode": "down", "status": "500"})
    assert http.post(portal.sharing_url + "/generateToken", data=creds).status_code == 500
    assert http.post(portal.sharing_url + "/oauth2/token",
                     data={"client_id": APP[0], "client_secret": APP[1],
                           "grant_type": "client_credentials"}).status_code == 500
    # non-token resources keep working
    assert http.get(portal.sharing_url + "/info?f=json").status_code == 200
    http.post(portal.url + "/__admin/token-service", data={"mode": "ok"})
    assert "token" in http.post(portal.sharing_url + "/generateToken", data=creds).json()
    # fail the next 2 calls only, in JSON form
    http.post(server.url + "/__admin/token-service", data={"mode": "error", "count": "2"})
    for _ in range(2):
        e = http.post(srv_gen, data=creds)
        assert e.status_code == 200 and e.json()["error"]["code"] == 500
    assert "token" in http.post(srv_gen, data=creds).json()
    # connection reset mode
    server.set_token_service("reset", count=1)
    with pytest.raises(requests.ConnectionError):
        http.post(srv_gen, data=creds)
    assert "token" in http.post(srv_gen, data=creds).json()
    st = server.stats()
    assert st["token_failures"] == {"service_down": 4}
    times = st["token_request_times"]
    assert len(times) == 6 and times == sorted(times)
    assert [r["ok"] for r in st["token_requests"]] == [False, False, False, True, False, True]
    pst = portal.stats()
    assert pst["token_failures"] == {"service_down": 2}
    assert pst["token_requests"][1]["endpoint"] == "oauth2.token"


def test_password_change(http, standalone):
    srv = standalone
    old = gen_server_token(http, srv)["token"]
    r = http.post(srv.url + "/__admin/password", data={"username": "alice", "password": "new-pw"})
    assert r.status_code == 200
    assert "error" in gen_server_token(http, srv)
    assert "token" in gen_server_token(http, srv, user=("alice", "new-pw"))
    assert query(http, srv, old).json() == ESRI_QUERY_DOC      # existing tokens stay valid


def test_admin_issue_and_invalidate(http, standalone):
    srv = standalone
    tok = http.post(srv.url + "/__admin/issue", data={"username": "bob", "ttl": "30"}).json()
    assert query(http, srv, tok["token"]).json() == ESRI_QUERY_DOC
    assert srv.stats()["tokens_issued_total"] == 0
    http.post(srv.url + "/__admin/invalidate", data={"token": tok["token"]})
    assert query(http, srv, tok["token"]).json() == ERR_498


# ---------------------------------------------------------------------------
# API key credentials
# ---------------------------------------------------------------------------

def test_api_key_slots_work_side_by_side_and_invalidate_alone(http, standalone):
    srv = standalone
    k1 = srv.create_api_key("item", 1)
    k2 = http.post(srv.url + "/__admin/api-key", data={"item": "item", "slot": "2"}).json()["key"]
    # The shape arcgis-rest-js reads the slot from (slotForKey).
    assert k1.startswith("AAPT") and k1[-10] == "1" and k2[-10] == "2"
    assert query(http, srv, k1).json() == ESRI_QUERY_DOC
    assert query(http, srv, k2).json() == ESRI_QUERY_DOC
    assert http.post(srv.url + "/__admin/api-key/invalidate", data={"item": "item", "slot": "1"}).json() == {
        "invalidated": True}
    r = query(http, srv, k1)
    assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "revoked"
    assert query(http, srv, k2).json() == ESRI_QUERY_DOC
    assert [e.get("api_key_slot") for e in srv.request_log()][-2:] == [1, 2]
    # Regenerating a slot replaces its key: the old one stops working.
    k2b = srv.create_api_key("item", 2)
    assert query(http, srv, k2).json() == ERR_498
    assert query(http, srv, k2b).json() == ESRI_QUERY_DOC
    # The 498 comes in whatever form the request asks for.
    r = query(http, srv, k1, __err="status")
    assert r.status_code == 498 and r.json() == ERR_498


def test_api_key_expiry(http, standalone):
    srv = standalone
    k = srv.create_api_key("short", 1, ttl=0.3)
    assert query(http, srv, k).json() == ESRI_QUERY_DOC
    time.sleep(0.4)
    r = query(http, srv, k)
    assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "expired"
    past = http.post(srv.url + "/__admin/api-key",
                     data={"item": "dated", "slot": "1", "expires": str(int(time.time() * 1000) - 1000)}).json()
    assert query(http, srv, past["key"]).json() == ERR_498


def test_api_key_referrer_restriction(http, standalone):
    srv = standalone
    k = srv.create_api_key("web", 1, referrers=["https://app.example.com/*", "https://other.example.com/"])
    for ref in (None, "https://evil.example.com/", "https://app.example.co/"):
        r = query(http, srv, k, headers={"Referer": ref} if ref else {})
        assert r.json() == ERR_498 and r.headers["X-Arcgis-Test-Reason"] == "referer_mismatch", ref
    for ref in ("https://app.example.com/", "https://app.example.com/maps/x", "https://other.example.com/a"):
        assert query(http, srv, k, headers={"Referer": ref}).json() == ESRI_QUERY_DOC, ref
    assert http.post(srv.url + "/__admin/api-key/referrers", data={"item": "web", "referrers": ""}).json()[
        "updated"]
    assert query(http, srv, k).json() == ESRI_QUERY_DOC


# ---------------------------------------------------------------------------
# uploads
# ---------------------------------------------------------------------------

def _blocks(n, block=256 * 1024):
    seed = hashlib.sha256(b"arcgis-upload").digest() * (block // 32)
    sent = 0
    while sent < n:
        b = seed[:min(block, n - sent)]
        sent += len(b)
        yield b


def _sha(n):
    h = hashlib.sha256()
    for b in _blocks(n):
        h.update(b)
    return h.hexdigest()


def test_upload_streamed_20mb(http, standalone):
    srv = standalone
    tok = gen_server_token(http, srv)["token"]
    n = 20 * 1024 * 1024
    # chunked (generator body), token in header
    r = http.post(srv.upload_url(), data=_blocks(n),
                  headers={"X-Esri-Authorization": "Bearer " + tok,
                           "Content-Type": "application/octet-stream"}, timeout=60)
    doc = r.json()
    assert doc["size"] == n and doc["sha256"] == _sha(n) and doc["token_seen"] is True
    assert doc["chunked"] is True and doc["token_source"] == "x-esri-authorization"
    # Content-Length body, token in query
    body = b"".join(_blocks(3_000_001))
    r = http.post(srv.upload_url() + "?f=json&token=" + tok, data=body, timeout=30).json()
    assert r["size"] == len(body) and r["sha256"] == hashlib.sha256(body).hexdigest()
    assert r["chunked"] is False
    # multipart with the token as a form field (like ArcGIS uploads/upload)
    fbody = b"".join(_blocks(1_234_567))
    mp = http.post(srv.upload_url(), data={"f": "json", "token": tok, "description": "d"},
                   files={"file": ("data.bin", fbody, "application/octet-stream")}, timeout=30)
    r = mp.json()
    assert r["token_source"] == "multipart" and r["size"] == len(mp.request.body)
    fpart = [p for p in r["parts"] if p["name"] == "file"][0]
    assert fpart["size"] == len(fbody) and fpart["sha256"] == hashlib.sha256(fbody).hexdigest()
    assert fpart["filename"] == "data.bin"
    assert [p["name"] for p in r["parts"]] == ["f", "token", "description", "file"]
    # without a token: 499, body still consumed, connection reusable
    r = http.post(srv.upload_url(), data=body[:100000], timeout=30)
    assert r.json() == ERR_499
    st = srv.stats()
    assert st["upload_bytes"] == n + len(body) + len(mp.request.body)
    assert st["rejected_499"] == 1


# ---------------------------------------------------------------------------
# GDAL
# ---------------------------------------------------------------------------

def test_gdal_ogrinfo_reads_query_with_token(http, standalone):
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    tok = gen_server_token(http, standalone)["token"]
    url = standalone.query_url() + "?where=1%3D1&outFields=*&f=json&token=" + tok
    env = _noproxy_env({"GDAL_HTTP_TIMEOUT": "20", "GDAL_HTTP_MAX_RETRY": "0"})
    r = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Geometry: Point" in r.stdout and "Feature Count: 3" in r.stdout
    assert "EPSG\",4326" in r.stdout or "WGS 84" in r.stdout
    full = subprocess.run(["ogrinfo", "-ro", "-al", url], capture_output=True, text=True,
                          timeout=60, env=env)
    for name in ("Redlands", "Zurich", "Wellington"):
        assert "name (String) = %s" % name in full.stdout
    log = standalone.request_log()
    assert [e["outcome"] for e in log] == ["ok", "ok"]
    assert log[0]["token_sources"] == ["query"]


# ---------------------------------------------------------------------------
# framing / keep-alive / counters / processes
# ---------------------------------------------------------------------------

def test_keepalive_and_framing(standalone):
    srv = standalone
    c = HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("POST", "/arcgis/tokens/generateToken",
              body="username=alice&password=alice-pass&f=json",
              headers={"Content-Type": "application/x-www-form-urlencoded"})
    r = c.getresponse()
    tok = json.loads(r.read())["token"]
    paths = ["/arcgis/rest/info?f=json",
             "/arcgis/rest/services/Secure/Points/FeatureServer/0/query?f=json&token=" + tok,
             "/arcgis/rest/services/Secure/Points/FeatureServer/0/query?f=json",
             "/arcgis/rest/services/Secure/Points/FeatureServer/0/query?f=json&__err=status",
             "/arcgis/rest/services/Secure/Basemap/MapServer/tile/1/0/0?token=" + tok,
             "/arcgis/rest/services/Secure/Basemap/MapServer/tile/1/0/0",
             "/nope"]
    statuses = []
    for p in paths:
        c.request("GET", p)
        r = c.getresponse()
        body = r.read()
        assert int(r.getheader("Content-Length")) == len(body)
        statuses.append(r.status)
    c.request("HEAD", paths[0])
    r = c.getresponse()
    assert r.read() == b"" and int(r.getheader("Content-Length")) > 0
    c.request("POST", "/arcgis/rest/services/Secure/Points/FeatureServer/0/query",
              body="f=json&where=1%3D1&token=" + tok,
              headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert json.loads(c.getresponse().read()) == ESRI_QUERY_DOC
    c.close()
    assert statuses == [200, 200, 200, 499, 200, 200, 404]
    assert srv.stats()["connections"] == 1


def test_stats_and_reset(http, fed):
    portal, server = fed
    gen_portal_token(http, portal)
    st = http.get(portal.url + "/__stats").json()
    assert st["tokens_issued"]["generate_password"] == 1
    assert set(st["tokens_issued"]) >= {"generate_password", "generate_federated",
                                        "oauth_client_credentials", "oauth_authorization_code",
                                        "oauth_refresh"}
    assert st["requests"] == {"portal_generate_token": 1}
    assert abs(st["token_request_times"][0] - time.time()) < 5
    assert http.post(portal.url + "/__stats/reset").json() == {"reset": True}
    st = http.get(portal.url + "/__stats").json()
    assert st["tokens_issued_total"] == 0 and st["requests"] == {}
    cfg = http.get(server.url + "/__config").json()
    assert cfg["owning_system_url"] == portal.portal_url and cfg["role"] == "server"


def _tls_cert(tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
                    "-days", "2", "-subj", "/CN=localhost", "-keyout", key, "-out", cert,
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def _spawn(args, cwd):
    p = subprocess.Popen([sys.executable] + args, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_noproxy_env())
    line = p.stdout.readline()
    assert line.strip().isdigit(), (line, p.stderr.read() if p.poll() is not None else "")
    return p, int(line)


def _vm(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def test_subprocess_roles_cli_and_tls(http, tmp_path):
    procs = []
    try:
        # portal + federated server as two processes (module form, from Tests/e2e)
        pp, pport = _spawn(["-m", "arcgis.server", "--port", "0", "--print-port", "--role",
                            "portal", "--ttl", "3", "--user", "carol:c-pw",
                            "--app", "cli-app:cli-secret"], E2E)
        procs.append(pp)
        portal_url = "http://127.0.0.1:%d/portal" % pport
        sp, sport = _spawn(["-m", "arcgis.server", "--port", "0", "--print-port", "--role",
                            "server", "--ttl", "3", "--owning-system-url", portal_url], E2E)
        procs.append(sp)
        server_root = "http://127.0.0.1:%d/arcgis" % sport
        pt = http.post(portal_url + "/sharing/rest/generateToken",
                       data={"username": "carol", "password": "c-pw", "f": "json"}).json()
        assert 0 < pt["expires"] - time.time() * 1000 <= 3100
        st = http.post(portal_url + "/sharing/rest/generateToken",
                       data={"token": pt["token"], "serverUrl": server_root,
                             "f": "json"}).json()
        q = http.get(server_root + "/rest/services/Secure/Points/FeatureServer/0/query",
                     params={"f": "json", "token": st["token"]}).json()
        assert q == ESRI_QUERY_DOC
        cc = http.post(portal_url + "/sharing/rest/oauth2/token",
                       data={"client_id": "cli-app", "client_secret": "cli-secret",
                             "grant_type": "client_credentials"}).json()
        assert cc["expires_in"] == 3
        # streamed 20 MB upload does not grow the server process by 20 MB
        hwm0 = _vm(sp.pid, "VmHWM")
        n = 20 * 1024 * 1024
        up = http.post(server_root + "/rest/services/Secure/X/GPServer/upload", data=_blocks(n),
                       headers={"X-Esri-Authorization": "Bearer " + st["token"]},
                       timeout=60).json()
        assert up["size"] == n and up["sha256"] == _sha(n)
        assert _vm(sp.pid, "VmHWM") - hwm0 < 12 * 1024 * 1024
        # script form, role both, TLS
        cert, key = _tls_cert(tmp_path)
        bp, bport = _spawn([os.path.join(HERE, "server.py"), "--port", "0", "--print-port",
                            "--role", "both", "--federate-self", "--ssl", "--tls", cert, key], E2E)
        procs.append(bp)
        base = "https://127.0.0.1:%d" % bport
        info = http.get(base + "/arcgis/rest/info?f=json", verify=cert).json()
        assert info["owningSystemUrl"] == base + "/portal"
        tok = http.post(base + "/portal/sharing/rest/generateToken", verify=cert,
                        data={"username": "alice", "password": "alice-pass"}).json()
        assert tok["ssl"] is True
        for p in procs:
            p.terminate()
        for p in procs:
            assert p.wait(10) is not None
            assert p.stdout.read() == ""           # nothing but the port on stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)


def test_ipv6(http, make):
    import socket
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    srv = make(role="both", host="::1", federate_self=True)
    assert srv.url.startswith("http://[::1]:")
    tok = gen_server_token(http, srv)["token"]
    assert query(http, srv, tok).json() == ESRI_QUERY_DOC


# ---------------------------------------------------------------------------
# hooks for the token lifecycle tests
# ---------------------------------------------------------------------------

def test_unwrapped_rejection_form(http, standalone):
    srv = standalone
    r = query(http, srv, "bad", __err="unwrapped")
    assert r.status_code == 200 and r.json() == {"code": 498, "message": "Invalid token.", "details": []}
    r = query(http, srv, None, __err="unwrapped")
    assert r.json() == {"code": 499, "message": "Token Required", "messageCode": "GWM_0003", "details": []}
    assert srv.stats()["rejected_498"] == 1 and srv.stats()["rejected_499"] == 1


def test_reject_all_switch(http, make):
    srv = make(role="server", ttl=30, reject_all=True)
    tok = gen_server_token(http, srv)["token"]        # the token service still issues tokens
    r = query(http, srv, tok)
    assert r.status_code == 200 and r.json() == ERR_498
    assert r.headers["X-Arcgis-Test-Reason"] == "reject_all"
    assert query(http, srv, None).json() == ERR_499   # no token: still "token required"
    srv.set(reject_all=False)
    assert "features" in query(http, srv, tok).json()
    http.post(srv.url + "/__admin/set", data={"reject_all": "true"})
    assert query(http, srv, tok).json() == ERR_498
    assert srv.stats()["rejected_498"] == 2


@pytest.mark.parametrize("enc", ["gzip", "deflate"])
def test_content_encoding_switch(http, make, enc):
    import gzip as _gzip
    import zlib as _zlib
    srv = make(role="server", ttl=30, content_encoding=enc)
    tok = gen_server_token(http, srv)["token"]
    r = http.get(srv.query_url(), params={"f": "json", "token": tok}, headers={"Accept-Encoding": enc},
                 stream=True, timeout=10)
    raw = r.raw.read(decode_content=False)
    assert r.headers["Content-Encoding"] == enc and r.headers["Content-Length"] == str(len(raw))
    plain = _gzip.decompress(raw) if enc == "gzip" else _zlib.decompress(raw)
    assert json.loads(plain)["features"]
    entry = srv.request_log()[-1]
    assert entry["content_encoding"] == enc and entry["sent_sha256"] == hashlib.sha256(raw).hexdigest()
    # rejections are compressed too
    r = http.get(srv.query_url(), params={"f": "json", "token": "bad"}, headers={"Accept-Encoding": enc},
                 stream=True, timeout=10)
    raw = r.raw.read(decode_content=False)
    plain = _gzip.decompress(raw) if enc == "gzip" else _zlib.decompress(raw)
    assert json.loads(plain) == ERR_498
    # a client that does not accept the coding gets identity
    r = http.get(srv.query_url(), params={"f": "json", "token": "bad"}, headers={"Accept-Encoding": "identity"},
                 timeout=10)
    assert "Content-Encoding" not in r.headers and r.json() == ERR_498


def test_revoke_all_and_token_calls(http, fed):
    portal, server = fed
    pt = gen_portal_token(http, portal)["token"]
    r = http.post(portal.sharing_url + "/generateToken",
                  data={"token": pt, "serverUrl": server.server_root, "f": "json"}, timeout=10)
    st = r.json()["token"]
    assert "features" in query(http, server, st).json()
    portal.revoke_all()
    assert query(http, server, st).json() == ERR_498         # federated server tokens die with the portal's
    r = http.post(portal.sharing_url + "/generateToken",
                  data={"token": pt, "serverUrl": server.server_root, "f": "json"}, timeout=10)
    assert r.json() == ERR_498                                 # the exchange refuses the revoked portal token
    calls = portal.token_calls("portal.generateToken")
    assert [c["kind"] for c in calls] == ["generate_password", "generate_federated", "generate_federated"]
    assert [c["ok"] for c in calls] == [True, True, False]
    assert len(portal.token_calls(kind="generate_federated")) == 2


# ---------------------------------------------------------------------------
# print service
# ---------------------------------------------------------------------------

def test_print_service_loads_each_layer_with_its_own_token():
    """The print service fails on a secured layer without a token, prints with one, and echoes the web map in its
    messages; submitJob, the job status and the result follow the GP job shapes; the output needs a token."""
    s = ArcGISServer(role="server", ttl=60).start()
    try:
        http = requests.Session()
        http.trust_env = False
        tok = s.issue_token("alice")
        task = s.print_url() + "/Export%20Web%20Map%20Task"
        wm = {"operationalLayers": [{"id": "a", "url": s.service_url("Secure", "Points", "FeatureServer") + "/0"},
                                    {"id": "b", "url": s.service_url("Public", "Points", "FeatureServer") + "/0"}]}
        r = http.post(task + "/execute", data={"Web_Map_as_JSON": json.dumps(wm), "f": "json", "token": tok})
        err = r.json()["error"]
        assert err["code"] == 400 and "Failed to create layer from service at" in err["details"][0], err
        assert [(l["token"], l["ok"]) for l in s.print_log()[-1]["layers"]] == [(False, False), (False, True)]
        wm["operationalLayers"][0]["token"] = tok
        r = http.post(task + "/submitJob", data={"Web_Map_as_JSON": json.dumps(wm), "f": "json", "token": tok})
        job = r.json()["jobId"]
        status = http.get(task + "/jobs/" + job, params={"f": "json", "token": tok}).json()
        assert status["jobStatus"] == "esriJobSucceeded" and tok in status["messages"][0]["description"], status
        url = http.get(task + "/jobs/" + job + "/results/Output_File", params={"f": "json", "token": tok}).json()
        url = url["value"]["url"]
        assert "/rest/directories/arcgisoutput/" in url
        assert http.get(url).json()["error"]["code"] == 499
        png = http.get(url, params={"token": tok})
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
        # Without a token the print request itself is refused, as any secured service's.
        assert http.post(task + "/execute", data={"Web_Map_as_JSON": "{}"}).json()["error"]["code"] == 499
    finally:
        s.stop()
