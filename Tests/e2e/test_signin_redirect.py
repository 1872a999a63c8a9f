"""A redirect to sign in is a token rejection (issue 36, item 4): behind web-tier or SAML authentication an expired
token comes back as a 302 to the portal's sign-in or to the identity provider, not as a 498. authproxy refreshes
once and replays; a server that keeps redirecting gets a 502 naming the credential; the login page never reaches the
GIS client. Ordinary redirects, and redirects answering requests without a credential, are relayed untouched."""
import shutil
import subprocess
import time

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer, federate

CRED = "webtiercred"


@pytest.fixture
def session():
    s = requests.Session()
    s.trust_env = False
    yield s
    s.close()


def server(mode, **kw):
    return ArcGISServer(role="server", ttl=600, signin_redirect=mode, **kw).start()


def arcgis_proxy(proxy_factory, ags, client="native", **fields):
    return proxy_factory(proxy={"http_client": client}, extra_config=cred(
        CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass", **fields))


def features(p, s, url):
    r = s.get(url, proxies=p.proxies, timeout=30)
    assert r.status_code == 200, (r.status_code, r.headers, r.text[:300])
    assert r.json().get("features"), r.text[:300]
    return r


def no_login_page(text):
    return "Sign In" not in text and "<form" not in text and "SAMLRequest" not in text


@pytest.mark.parametrize("client", ["native", "libcurl"])
@pytest.mark.parametrize("mode", ["portal", "signin", "saml"])
def test_an_expired_token_redirected_to_sign_in_is_refreshed_and_the_request_replayed(
        proxy_factory, session, mode, client):
    ags = server(mode)
    try:
        p = arcgis_proxy(proxy_factory, ags, client)
        features(p, session, ags.query_url() + "?f=json")
        ags.expire_all()
        # Requests follows redirects: had the 302 been relayed, it would end on the login page (or in a loop).
        r = features(p, session, ags.query_url() + "?f=json&after=expiry")
        assert not r.history, r.history
        assert ags.stats()["signin_redirects"] == 1, ags.stats()
        assert len(ags.token_calls()) == 2, ags.token_calls()
        assert p.wait_for_log(lambda l: "the server redirects to sign in" in l and "sign_in=" in l)
        assert "alice-pass" not in p.log_text()
    finally:
        ags.stop()


def test_gdal_reads_the_layer_through_a_sign_in_redirect(proxy_factory):
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    ags = server("saml")
    try:
        p = arcgis_proxy(proxy_factory, ags)
        env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority, "GDAL_HTTP_TIMEOUT": "30",
                                 "GDAL_HTTP_MAX_RETRY": "0", "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": ""})
        url = ags.query_url() + "?where=1%3D1&outFields=*&f=json"
        for round_ in range(2):
            r = subprocess.run(["ogrinfo", "-ro", "-al", url], capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 0, r.stdout + r.stderr
            assert "Feature Count: 3" in r.stdout and r.stdout.count("POINT (") == 3, r.stdout
            if round_ == 0:
                ags.expire_all()
        assert ags.stats()["signin_redirects"] >= 1, ags.stats()
        assert len(ags.token_calls()) == 2, ags.token_calls()
    finally:
        ags.stop()


def test_an_identity_provider_known_only_by_its_url_needs_sign_in_urls(proxy_factory, session):
    ags = server("idp")
    try:
        # Without sign_in_urls an IdP's own login URL cannot be told from any other redirect: relayed as it is.
        p = arcgis_proxy(proxy_factory, ags)
        features(p, session, ags.query_url() + "?f=json")
        ags.expire_all()
        r = session.get(ags.query_url() + "?f=json", proxies=p.proxies, timeout=30, allow_redirects=False)
        assert r.status_code == 302 and "/idp/login" in r.headers["Location"], r.headers
        ags.reset_stats()
        q = arcgis_proxy(proxy_factory, ags, sign_in_urls=[ags.url + "/idp/login"])
        features(q, session, ags.query_url() + "?f=json&configured=1")
        ags.expire_all()
        features(q, session, ags.query_url() + "?f=json&configured=2")
        assert ags.stats()["signin_redirects"] == 1, ags.stats()
    finally:
        ags.stop()


def test_a_server_that_keeps_redirecting_gets_a_502_naming_the_credential(proxy_factory, session):
    ags = server("saml")
    try:
        p = arcgis_proxy(proxy_factory, ags)
        features(p, session, ags.query_url() + "?f=json")
        ags.set(reject_all=True)
        r = session.get(ags.query_url() + "?f=json", proxies=p.proxies, timeout=30, allow_redirects=False)
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert "'%s'" % CRED in err["message"] and "sign-in required" in err["message"], err
        assert "Location" not in r.headers and no_login_page(r.text), r.text
        # One refresh, then the second redirect in a row: no loop.
        assert ags.stats()["signin_redirects"] == 2, ags.stats()
        assert len(ags.token_calls()) == 2, ags.token_calls()
        assert p.wait_for_log(lambda l: "still redirects to sign in" in l)
        for line in p.log_lines():
            assert "alice-pass" not in line
        for e in ags.request_log():
            if e.get("token"):
                assert e["token"] not in p.log_text()
    finally:
        ags.stop()


def test_an_ordinary_redirect_is_relayed_untouched(proxy_factory, session):
    ags = server("portal")
    try:
        p = arcgis_proxy(proxy_factory, ags)
        moved = ags.query_url(folder="Moved") + "?f=json"
        r = session.get(moved, proxies=p.proxies, timeout=30, allow_redirects=False)
        assert r.status_code == 301, (r.status_code, r.text[:300])
        loc = r.headers["Location"]
        assert loc.startswith(ags.query_url(folder="Secure")), loc
        assert ags.stats()["moved_redirects"] == 1 and ags.stats()["signin_redirects"] == 0
        # Followed by the client, the moved layer is read with the credential's token.
        r = session.get(moved, proxies=p.proxies, timeout=30)
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
        assert len(ags.token_calls()) == 1, ags.token_calls()
    finally:
        ags.stop()


def test_a_sign_in_redirect_without_a_credential_is_relayed(proxy_factory, session):
    ags = server("saml")
    try:
        # The credential covers the Secure folder only: a request elsewhere carries no token of the proxy's.
        p = proxy_factory(extra_config=cred(
            CRED, "arcgis-token", ags.server_root + "/rest/services/Secure", username="alice", password="alice-pass"))
        r = session.get(ags.query_url(folder="Other") + "?f=json", proxies=p.proxies, timeout=30,
                        allow_redirects=False)
        assert r.status_code == 302 and "SAMLRequest=" in r.headers["Location"], (r.status_code, r.headers)
        assert ags.token_calls() == []
    finally:
        ags.stop()


def test_oauth_app_on_a_federated_server_behind_a_web_tier(proxy_factory, session):
    portal = ArcGISServer(role="portal", ttl=600).start()
    ags = server("portal")
    try:
        federate(portal, ags)
        p = proxy_factory(extra_config=cred(
            "app", "oauth-app", [portal.portal_url, ags.server_root], client_id="proxyapp",
            client_secret="proxyapp-secret", portal_url=portal.portal_url))
        features(p, session, ags.query_url() + "?f=json")
        ags.expire_all()
        portal.expire_all()
        features(p, session, ags.query_url() + "?f=json&after=expiry")
        assert ags.stats()["signin_redirects"] == 1, ags.stats()
        # The federated server token is bound to the credential's synthetic referer, and requests carry it.
        assert {e["referer"] for e in ags.request_log() if e["kind"] == "query"} == {"app://authproxy/app"}
    finally:
        ags.stop()
        portal.stop()


def test_oauth_user_behind_a_web_tier(proxy_factory, session, tmp_path):
    portal = ArcGISServer(role="portal", ttl=600, signin_redirect="signin").start()
    ags = server("signin")
    try:
        federate(portal, ags)
        state = tmp_path / "login-state"
        redirect_port = harness.free_port()
        creds = cred("me", "oauth-user", [portal.portal_url, ags.server_root], client_id="proxyapp",
                     portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % redirect_port)
        conf = tmp_path / "login.conf"
        conf.write_text(harness.render_config(harness.default_proxy_section(harness.free_port(), str(state)),
                                              harness.default_log_section()) + creds)
        login = subprocess.Popen(
            [harness.proxy_bin(), "login", "--config", str(conf), "--credential", "me", "--timeout", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=harness.clean_env(), text=True)
        url = None
        for line in login.stdout:
            if "/oauth2/authorize?" in line:
                url = line.strip()
                break
        assert url, login.stderr.read()
        time.sleep(0.3)
        b = requests.Session()
        b.trust_env = False
        assert b.get(url, allow_redirects=True, timeout=30).status_code == 200
        out, errs = login.communicate(timeout=30)
        assert login.returncode == 0, errs
        p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
        features(p, session, ags.query_url() + "?f=json")
        ags.expire_all()
        portal.expire_all()
        features(p, session, ags.query_url() + "?f=json&after=expiry")
        assert ags.stats()["signin_redirects"] == 1, ags.stats()
    finally:
        ags.stop()
        portal.stop()
