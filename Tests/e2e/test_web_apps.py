"""Web apps behind /proxy (issue 41 parts 2 and 3): a credential per app origin through one endpoint, and apps
that require their users' own OIDC sign-in (the token checked against the issuer's JWKS, claims mapped to
credentials)."""
import json
import os
import subprocess
import time

import pytest

import harness
from harness import cred
from oidc.server import OIDCProvider
from cryptography.hazmat.primitives.asymmetric import rsa


def _app_config(name, origins, credentials, **extra):
    lines = ["", "[[app]]", 'name = "%s"' % name, "origins = %s" % json.dumps(origins),
             "credentials = %s" % json.dumps(credentials)]
    rules = extra.pop("rules", [])
    for k, v in extra.items():
        lines.append("%s = %s" % (k, json.dumps(v)))
    for claim, value, creds in rules:
        lines += ["", "[[app.user_rule]]", 'claim = "%s"' % claim, 'value = "%s"' % value,
                  "credentials = %s" % json.dumps(creds)]
    return "\n".join(lines) + "\n"


def _get(p, session, url, origin=None, token=None, method="GET"):
    headers = {}
    if origin:
        headers["Origin"] = origin
    if token:
        headers["Authorization"] = "Bearer " + token
    return session.request(method, p.url + "/proxy?" + url, headers=headers, timeout=15)


def _secure_log(ags):
    return [e for e in ags.request_log() if "/Secure/" in e.get("path", "")]


PARCELS = "http://parcels.example.test:8080"
PUBLIC = "http://public.example.test:8080"


# ---------------------------------------------------------------------------------------------------------
# A credential per app
# ---------------------------------------------------------------------------------------------------------

def test_each_app_origin_gets_only_its_credentials(proxy_factory, ags, session):
    p = proxy_factory(extra_config=cred("parcels", "arcgis-token", ags.server_root + "/rest/services/Secure",
                                        username="alice", password="alice-pass")
                      + _app_config("parcels", [PARCELS], ["parcels"])
                      + _app_config("public", [PUBLIC], []))
    q = ags.query_url() + "?where=1%3D1&f=json"
    r = _get(p, session, q, origin=PARCELS)
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    assert r.headers["Access-Control-Allow-Origin"] == PARCELS and r.headers["Vary"] == "Origin"
    assert _secure_log(ags)[-1]["user"] == "alice"
    # The public app reaches the same secured service without any token (the server says so), and public
    # services as usual.
    n = len(_secure_log(ags))
    r = _get(p, session, q, origin=PUBLIC)
    assert "error" in r.json() and r.json()["error"]["code"] == 499, r.text[:300]
    e = _secure_log(ags)[n]
    assert e["reason"] == "missing_token" and e["token_count"] == 0, e
    r = _get(p, session, ags.query_url(folder="Public") + "?where=1%3D1&f=json", origin=PUBLIC)
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    # A third origin, configured nowhere: refused before anything goes upstream.
    n = len(ags.request_log())
    r = _get(p, session, q, origin="http://other.example.test")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)
    assert "http://other.example.test" in err["message"] and "[[app]]" in " ".join(err["details"])
    assert "Access-Control-Allow-Origin" not in r.headers
    assert len(ags.request_log()) == n
    # An <img>-style request (Referer, no Origin) counts as its page's app.
    r = session.get(p.url + "/proxy?" + q, headers={"Referer": PARCELS + "/map.html"}, timeout=15)
    assert r.status_code == 200 and _secure_log(ags)[-1]["user"] == "alice"


def test_allowed_origins_keep_every_credential_next_to_apps(proxy_factory, ags, session):
    """[proxy] allowed_origins still admits its origins with all credentials; apps narrow only their own."""
    p = proxy_factory(proxy={"allowed_origins": ["http://legacy.example.test"]},
                      extra_config=cred("parcels", "arcgis-token", ags.server_root, username="alice",
                                        password="alice-pass") + _app_config("public", [PUBLIC], []))
    r = _get(p, session, ags.query_url() + "?f=json", origin="http://legacy.example.test")
    assert r.status_code == 200 and _secure_log(ags)[-1]["user"] == "alice"
    r = _get(p, session, ags.query_url() + "?f=json", origin=PUBLIC)
    assert r.json()["error"]["code"] == 499


def test_app_origins_need_no_proxy_authorization_next_to_clients(proxy_factory, ags, session):
    """With [[client]] entries every request needs Proxy-Authorization, which a browser cannot send; an app's
    /proxy requests are admitted by the app instead, with only its credentials. Other /proxy requests still need
    it."""
    p = proxy_factory(proxy={"allowed_origins": ["http://legacy.example.test"]},
                      extra_config=cred("parcels", "arcgis-token", ags.server_root, username="alice",
                                        password="alice-pass")
                      + '\n[[client]]\nname = "team"\npassword = "team-pass"\n'
                      + _app_config("parcels", [PARCELS], ["parcels"]))
    r = _get(p, session, ags.query_url() + "?f=json", origin=PARCELS)
    assert r.status_code == 200 and _secure_log(ags)[-1]["user"] == "alice", r.text[:300]
    r = _get(p, session, ags.query_url() + "?f=json", origin="http://legacy.example.test")
    assert r.status_code == 407
    r = session.get(p.url + "/proxy?" + ags.query_url() + "?f=json", timeout=10,
                    headers={"Origin": "http://legacy.example.test",
                             "Proxy-Authorization": "Basic " + __import__("base64").b64encode(b"team:team-pass").decode()})
    assert r.status_code == 200


def _Page(host="127.0.0.1"):
    """A web app's origin on `host` (test_proxy_endpoint.BrowserApp); its `page` is set by the test."""
    from test_proxy_endpoint import BrowserApp
    return BrowserApp(host=host)


def _chromium(first, pages, tmp_path, timeout=60):
    """Opens `first` in headless Chromium and waits until every page reported (bounded)."""
    from test_admin import chromium
    browser = subprocess.Popen([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server",
                                "--user-data-dir=%s" % (tmp_path / "chromium"), first.origin + "/"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        for pg in pages:
            assert pg.done.wait(max(0.1, deadline - time.monotonic())), "%s reported nothing" % pg.origin
        return [pg.results for pg in pages]
    finally:
        browser.kill()
        browser.wait(10)


_FETCH_SCRIPT = """<script>
(async () => {
  const out = {};
  try {
    const r = await fetch(%s);
    out.status = r.status;
    const j = await r.json();
    out.features = j.features ? j.features.length : null;
    out.error = j.error ? j.error.code : null;
  } catch (e) { out.status = String(e); }
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
})();
</script>"""


def test_two_apps_in_chromium_through_one_proxy(proxy_factory, ags, tmp_path):
    """Three origins in one browser: the parcels app (top page) reads the secured layer with alice's token, the
    public app (an iframe) reads it without any, and a third origin (another iframe) is refused."""
    pages = [_Page("127.0.0.1"), _Page("127.0.0.2"), _Page("127.0.0.3")]
    parcels, public, other = pages
    try:
        p = proxy_factory(extra_config=cred("parcels", "arcgis-token", ags.server_root + "/rest/services/Secure",
                                            username="alice", password="alice-pass")
                          + _app_config("parcels", [parcels.origin], ["parcels"])
                          + _app_config("public", [public.origin], []))
        url = json.dumps(p.url + "/proxy?" + ags.query_url() + "?where=1%3D1&f=json")
        for pg in pages:
            pg.page = "<html><body>" + _FETCH_SCRIPT % url + "</body></html>"
        parcels.page = parcels.page.replace(
            "</body>", '<iframe src="%s/"></iframe><iframe src="%s/"></iframe></body>' % (public.origin, other.origin))
        got = _chromium(parcels, pages, tmp_path)
        assert got[0] == {"status": 200, "features": 3, "error": None}, got
        # The public app's request reached the server without a token (the server's 499 comes back readable).
        assert got[1]["status"] == 200 and got[1]["error"] == 499, got
        # Refused without CORS: the page cannot even read the 403.
        assert got[2]["status"].startswith("TypeError"), got
        users = [e.get("user") for e in _secure_log(ags)]
        assert users.count("alice") == 1, users
    finally:
        for pg in pages:
            pg.close()


# ---------------------------------------------------------------------------------------------------------
# Only signed-in users
# ---------------------------------------------------------------------------------------------------------

AUDIENCE = "map-app"


@pytest.fixture
def idp():
    p = OIDCProvider().start()
    p.add_user("erin", "erin-pass", groups=["editors", "staff"])
    p.add_user("vic", "vic-pass", groups=["staff"])
    yield p
    p.stop()


def _signin_proxy(proxy_factory, ags, idp, origin, **proxy):
    """An app whose editors get alice's account and everyone else signed in bob's."""
    return proxy_factory(
        proxy=proxy or None,
        extra_config=cred("editing", "arcgis-token", ags.server_root, username="alice", password="alice-pass")
        + cred("viewing", "arcgis-token", ags.server_root, username="bob", password="bob-pass")
        + _app_config("maps", [origin], ["viewing"], sign_in_issuer=idp.issuer, sign_in_audience=AUDIENCE,
                      rules=[("groups", "editors", ["editing"])]))


def test_sign_in_matrix(proxy_factory, ags, idp, session):
    APP = "http://maps.example.test"
    p = _signin_proxy(proxy_factory, ags, idp, APP)
    q = ags.query_url() + "?where=1%3D1&f=json"
    # Anonymous: 401 the app can read and act on, nothing upstream.
    r = _get(p, session, q, origin=APP)
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 401)
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="authproxy"', r.headers
    assert r.headers["Access-Control-Allow-Origin"] == APP
    assert "WWW-Authenticate" in r.headers["Access-Control-Expose-Headers"]
    assert "maps" in err["message"] and not _secure_log(ags)
    assert r.headers["Vary"] == "Origin, Authorization"
    # The preflight of a fetch with Authorization passes without a token.
    r = session.options(p.url + "/proxy?" + q, headers={"Origin": APP, "Access-Control-Request-Method": "GET",
                                                        "Access-Control-Request-Headers": "authorization"}, timeout=10)
    assert r.status_code == 204 and r.headers["Access-Control-Allow-Headers"] == "authorization"
    # An editor gets alice's account; the user's own Authorization does not go upstream (the ArcGIS server
    # reads Authorization: Bearer as a token too and would refuse two).
    erin = idp.user_token("erin", AUDIENCE)
    r = _get(p, session, q, origin=APP, token=erin)
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    # A cache in front of the proxy must not hand this answer to a request without this user's token.
    assert r.headers["Vary"] == "Origin, Authorization"
    e = _secure_log(ags)[-1]
    assert e["user"] == "alice" and e["token_count"] == 1, e
    assert erin not in json.dumps(ags.request_log())
    # Someone signed in but not an editor gets bob's.
    r = _get(p, session, q, origin=APP, token=idp.user_token("vic", AUDIENCE))
    assert r.status_code == 200 and _secure_log(ags)[-1]["user"] == "bob"
    n = len(_secure_log(ags))

    def refused(token, why):
        r = _get(p, session, q, origin=APP, token=token)
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 401)
        h = r.headers["WWW-Authenticate"]
        assert h.startswith('Bearer realm="authproxy", error="invalid_token", error_description="'), h
        assert why in h and why in " ".join(err["details"]), (h, err)
        assert r.headers["Access-Control-Allow-Origin"] == APP
        assert token not in r.text and token not in h

    refused(idp.user_token("erin", AUDIENCE, lifetime=-120), "expired")
    refused(idp.user_token("erin", "another-app"), "another audience")
    refused(idp.user_token("erin", AUDIENCE, issuer="http://127.0.0.1:1/realms/other"), "another issuer")
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused(idp.user_token("erin", AUDIENCE, signing_key=stranger, kid=idp.signing_kid), "signature")
    refused("not-a-jwt", "not a JWT")
    assert len(_secure_log(ags)) == n
    log = p.log_text()
    assert "sign-in token refused" in log and erin not in log
    # The provider rotates its key: tokens signed with the new one work once the proxy refetched the JWKS
    # (an unknown kid triggers it, at most every 5 s).
    before = idp.jwks_requests
    time.sleep(5.2)
    idp.rotate_signing_key()
    r = _get(p, session, q, origin=APP, token=idp.user_token("erin", AUDIENCE))
    assert r.status_code == 200 and _secure_log(ags)[-1]["user"] == "alice", r.text[:300]
    assert idp.jwks_requests == before + 1
    # A made-up kid right after does not make the proxy fetch again.
    refused(idp.user_token("erin", AUDIENCE, signing_key=stranger, kid="made-up"), "kid")
    assert idp.jwks_requests == before + 1


def test_unreachable_issuer_is_a_503_naming_it(proxy_factory, ags, session):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    issuer = "http://127.0.0.1:%d/realms/gone" % port
    APP = "http://maps.example.test"
    p = proxy_factory(extra_config=cred("viewing", "arcgis-token", ags.server_root, username="bob",
                                        password="bob-pass")
                      + _app_config("maps", [APP], ["viewing"], sign_in_issuer=issuer, sign_in_audience=AUDIENCE))
    tok = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ." + __import__("base64").urlsafe_b64encode(json.dumps(
        {"iss": issuer, "aud": AUDIENCE, "exp": int(time.time()) + 300}).encode()).decode().rstrip("=") + ".c2ln"
    r = _get(p, session, ags.query_url() + "?f=json", origin=APP, token=tok)
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 503)
    assert issuer in " ".join(err["details"]) and r.headers.get("Retry-After")


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_signed_in_user_in_chromium(proxy_factory, ags, idp, tmp_path, client):
    """The app's page signs the user in at the provider, then reads the secured layer through /proxy with the
    token as Bearer; without it, it reads the 401 and its WWW-Authenticate."""
    page = _Page()
    try:
        p = _signin_proxy(proxy_factory, ags, idp, page.origin, http_client=client)
        page.page = """<html><body><script>
(async () => {
  const out = {};
  const url = %s;
  try {
    const anon = await fetch(url);
    out.anonymous = anon.status + " " + anon.headers.get("WWW-Authenticate");
    const s = await fetch(%s, {method: "POST", body: new URLSearchParams(
      {user: "erin", password: "erin-pass", client_id: %s})});
    const token = (await s.json()).id_token;
    const r = await fetch(url, {headers: {Authorization: "Bearer " + token}});
    out.signedIn = r.status + " " + ((await r.json()).features || []).length;
  } catch (e) { out.error = String(e); }
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
})();
</script></body></html>""" % (json.dumps(p.url + "/proxy?" + ags.query_url() + "?where=1%3D1&f=json"),
                              json.dumps(idp.issuer + "/__test/sign-in"), json.dumps(AUDIENCE))
        (got,) = _chromium(page, [page], tmp_path)
        assert got == {"anonymous": '401 Bearer realm="authproxy"', "signedIn": "200 3"}, got
        assert [e.get("user") for e in _secure_log(ags)] == ["alice"]
    finally:
        page.close()
