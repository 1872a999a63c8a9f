"""Token-type credentials through the real binary, against the ArcGIS test server (Tests/e2e/arcgis):
injection and matching, proactive and reactive refresh with replay, single flight, failures and backoff,
federation, rejection forms, ssl tokens, client tokens, persistence, login and signout."""
import hashlib
import json
import os
import subprocess
import threading
import time
import urllib.parse

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer, federate




def target_query(entry):
    return urllib.parse.parse_qs(urllib.parse.urlsplit(entry["target"]).query)


def header(entry, name):
    return [v for k, v in entry["headers"] if k.lower() == name.lower()]


def via(proxy, session, method, url, **kw):
    kw.setdefault("timeout", 30)
    return session.request(method, url, proxies=proxy.proxies, **kw)


# ---------------------------------------------------------------------------------------------------------
# Injection and matching
# ---------------------------------------------------------------------------------------------------------

def test_api_key_only_on_matching_urls(proxy_factory, origin, session):
    p = proxy_factory(extra_config=cred("k", "api-key", origin.url + "/echo", key="KEY-1"))
    via(proxy, session, "GET", origin.url + "/echo?f=json") if False else None
    assert via(p, session, "GET", origin.url + "/echo?f=json").status_code == 200
    via(p, session, "GET", origin.url + "/echox?f=json")            # sibling path: no token
    other = harness.free_port()
    log = origin.request_log()
    assert target_query(log[-2]).get("token") == ["KEY-1"]
    assert target_query(log[-2]).get("f") == ["json"]
    assert "token" not in target_query(log[-1])
    # A different port or scheme of the same host is another destination: the credential does not apply.
    p2 = proxy_factory(extra_config=cred("k", "api-key", "http://127.0.0.1:%d/echo" % other, key="KEY-2")
                       + cred("s", "api-key", origin.url.replace("http://", "https://") + "/echo", key="KEY-3"))
    via(p2, session, "GET", origin.url + "/echo")
    assert "token" not in target_query(origin.request_log()[-1])
    assert "KEY-" not in p2.log_text() and "KEY-" not in p.log_text()


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_injected_token_never_reaches_the_client_in_a_redirect(proxy_factory, session, client):
    """An upstream redirect that echoes the request target (IIS/Web Adaptor http->https, trailing-slash
    redirects) used to hand the injected API key to the client in Location; the injected token field is removed
    there (and in Content-Location), the client's own fields stay byte for byte."""
    seen = []

    def answer(c):
        target = harness.read_head(c).split(b" ")[1]
        seen.append(target)
        body = b'<html><body><h1>Object Moved</h1>This object may be found <a HREF="https://127.0.0.1:%d%s">here</a>.</body></html>' % (port, target)
        c.sendall(b"HTTP/1.1 301 Moved Permanently\r\nLocation: https://127.0.0.1:%d%s\r\n"
                  b"Content-Location: %s\r\nRefresh: 0; url=%s\r\nContent-Type: text/html\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (port, target, target, target, len(body), body))
        c.close()

    upstream = harness.ScriptedUpstream(answer)
    port = upstream.port
    try:
        p = proxy_factory(proxy={"http_client": client},
                          extra_config=cred("svc", "api-key", "http://127.0.0.1:%d/arcgis" % port, key="ORG-SECRET-KEY"))
        r = via(p, session, "GET", "http://127.0.0.1:%d/arcgis/rest/services?f=json&where=1%%3D1" % port,
                allow_redirects=False)
        assert r.status_code == 301
        assert seen and b"token=ORG-SECRET-KEY" in seen[-1]          # the upstream got the key
        assert r.headers["Location"] == "https://127.0.0.1:%d/arcgis/rest/services?f=json&where=1%%3D1" % port
        assert r.headers["Content-Location"] == "/arcgis/rest/services?f=json&where=1%3D1"
        assert r.headers["Refresh"] == "0; url=/arcgis/rest/services?f=json&where=1%3D1"
        assert "ORG-SECRET-KEY" not in str(r.headers)
        # The body that repeats the URL keeps its length, with the key masked.
        assert "ORG-SECRET-KEY" not in r.text and "token=**************" in r.text, r.text
        assert int(r.headers["Content-Length"]) == len(r.content)
    finally:
        upstream.close()


def test_header_placement_and_override(proxy_factory, origin, session):
    p = proxy_factory(extra_config=cred("h", "api-key", origin.url, key="HKEY", token_placement="header",
                                        override_client_token=True))
    via(p, session, "GET", origin.url + "/echo?token=client&f=json", headers={"Authorization": "Bearer client2"})
    e = origin.request_log()[-1]
    assert header(e, "X-Esri-Authorization") == ["Bearer HKEY"]
    assert "token" not in target_query(e)
    assert header(e, "Authorization") == []


def test_client_token_left_alone_without_override(proxy_factory, origin, session):
    p = proxy_factory(extra_config=cred("k", "api-key", origin.url, key="PROXYKEY"))
    via(p, session, "GET", origin.url + "/echo?token=mine")
    assert target_query(origin.request_log()[-1])["token"] == ["mine"]
    via(p, session, "GET", origin.url + "/echo", headers={"X-Esri-Authorization": "Bearer mine"})
    e = origin.request_log()[-1]
    assert "token" not in target_query(e) and header(e, "X-Esri-Authorization") == ["Bearer mine"]
    via(p, session, "POST", origin.url + "/echo", data={"where": "1=1", "token": "mine"})
    e = origin.request_log()[-1]
    assert "token" not in target_query(e)


def test_form_placement_for_urlencoded_post(proxy_factory, origin, session):
    p = proxy_factory(extra_config=cred("k", "api-key", origin.url, key="FORMKEY", override_client_token=True))
    r = via(p, session, "POST", origin.url + "/echo", data={"where": "1=1", "token": "old", "f": "json"})
    info = r.json()
    body = urllib.parse.parse_qs("where=1%3D1&f=json&token=FORMKEY")
    assert info["body_length"] == len("where=1%3D1&f=json&token=FORMKEY"), info
    assert info["body_sha256"] == hashlib.sha256(b"where=1%3D1&f=json&token=FORMKEY").hexdigest()
    assert "token" not in target_query(origin.request_log()[-1]) and body


def test_unmatched_deny(proxy_factory, origin, session):
    p = proxy_factory(proxy={"unmatched": "deny"}, extra_config=cred("k", "api-key", origin.url + "/echo", key="K"))
    assert via(p, session, "GET", origin.url + "/echo").status_code == 200
    r = via(p, session, "GET", origin.url + "/json")
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)


# ---------------------------------------------------------------------------------------------------------
# arcgis-token: discovery, refresh, retry, single flight, failures
# ---------------------------------------------------------------------------------------------------------

def arcgis_cred(ags, **extra):
    return cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass", **extra)


@pytest.mark.parametrize("how", ["query", "header", "authorization", "form"])
def test_empty_client_token_gets_the_proxys(proxy_factory, ags, session, how):
    # The REST Services Directory's query form submits an empty `token=`; a client may send
    # `X-Esri-Authorization: Bearer ` with nothing after it. Neither is a token: the proxy's goes in, alone.
    p = proxy_factory(extra_config=arcgis_cred(ags))
    url = ags.query_url() + "?where=1%3D1&text=&objectIds=&outFields=*&f=json"
    kw = {}
    if how == "query":
        url += "&token="
    elif how == "header":
        kw["headers"] = {"X-Esri-Authorization": "Bearer "}
    elif how == "authorization":
        kw["headers"] = {"Authorization": "Bearer "}
    if how == "form":
        r = via(p, session, "POST", ags.query_url(), data={"where": "1=1", "token": "", "f": "json"})
    else:
        r = via(p, session, "GET", url, **kw)
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    e = ags.request_log()[-1]
    assert e["outcome"] == "ok" and e["token_count"] == 1, e


def test_arcgis_token_with_curl_requests_and_gdal(proxy_factory, ags, session):
    p = proxy_factory(extra_config=arcgis_cred(ags))
    url = ags.query_url() + "?where=1%3D1&outFields=*&f=json"
    r = via(p, session, "GET", url)
    assert r.status_code == 200 and len(r.json()["features"]) == 3
    c = harness.curl("-x", p.url, url)
    assert c.returncode == 0 and b'"features"' in c.stdout
    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority})
    g = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, env=env, timeout=60)
    assert g.returncode == 0, g.stderr
    assert b"Feature Count: 3" in g.stdout
    st = ags.stats()
    assert st["tokens_issued"].get("generate_password") == 1, st  # one token for all three clients
    assert st["rejected_498"] == 0 and st["rejected_499"] == 0
    assert "alice-pass" not in p.log_text()
    assert "token=" not in p.log_text()


def test_proactive_refresh_sends_no_expired_token(proxy_factory, session):
    s = ArcGISServer(role="server", ttl=4).start()  # margin = 10% of 4 s
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        end = time.time() + 9
        while time.time() < end:
            r = via(p, session, "GET", s.query_url() + "?f=json")
            assert r.status_code == 200
            time.sleep(0.2)
        st = s.stats()
        assert st["tokens_issued"]["generate_password"] >= 2, st
        assert st["rejected_498"] == 0, st
    finally:
        s.stop()


@pytest.mark.parametrize("form", ["json", "json-spaced", "status", "html"])
def test_forced_expiry_is_retried_once(proxy_factory, ags, session, form):
    p = proxy_factory(extra_config=arcgis_cred(ags))
    assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
    ags.expire_all()
    ags.reset_stats()
    url = ags.tile_url() if form == "html" else ags.query_url() + "?f=json&__err=%s" % form
    r = via(p, session, "GET", url)
    assert r.status_code == 200, r.text[:300]
    st = ags.stats()
    assert st["rejected_498"] == 1 and st["tokens_issued"]["generate_password"] == 1, st


def test_jsonp_rejection_is_retried(proxy_factory, ags, session):
    p = proxy_factory(extra_config=arcgis_cred(ags))
    via(p, session, "GET", ags.query_url() + "?f=json")
    ags.expire_all()
    r = via(p, session, "GET", ags.query_url() + "?f=json&callback=cb")
    assert r.status_code == 200 and r.text.startswith("cb(") and "features" in r.text, r.text[:200]


def test_403_is_not_a_token_error(proxy_factory, ags, session):
    p = proxy_factory(extra_config=arcgis_cred(ags))
    via(p, session, "GET", ags.query_url() + "?f=json")
    ags.reset_stats()
    r = via(p, session, "GET", ags.query_url() + "?f=json&__err=403")
    assert r.status_code == 403
    assert ags.stats()["tokens_issued_total"] == 0


def test_no_permission_in_a_200_body_is_not_a_token_error(proxy_factory, ags, session):
    # ArcGIS answers a signed-in user without permission with HTTP 200 and
    # {"error":{"code":403,"messageCode":"GWM_0003",...}}: no token would help, so nothing is retried or fetched.
    p = proxy_factory(extra_config=arcgis_cred(ags))
    for _ in range(10):
        assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
        r = via(p, session, "GET", ags.query_url() + "?f=json&__err=403-body")
        assert r.status_code == 200 and r.json()["error"]["code"] == 403, r.text[:300]
    assert ags.stats()["tokens_issued_total"] == 1, ags.stats()["tokens_issued"]
    assert [e["outcome"] for e in ags.request_log()].count("403") == 10     # each sent once, never replayed


def test_urlencoded_post_retried_after_expiry(proxy_factory, ags, session):
    p = proxy_factory(extra_config=arcgis_cred(ags))
    via(p, session, "GET", ags.query_url() + "?f=json")
    ags.expire_all()
    r = via(p, session, "POST", ags.query_url(), data={"where": "1=1", "outFields": "*", "f": "json"})
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    req = [e for e in ags.request_log() if e["method"] == "POST"]
    assert [e["outcome"] for e in req[-2:]] == ["498", "ok"], req[-2:]
    assert req[-1]["token_count"] == 1


def test_50mb_multipart_upload_replayed_after_expiry(proxy_factory, ags, session, tmp_path):
    p = proxy_factory(extra_config=arcgis_cred(ags))
    via(p, session, "GET", ags.query_url() + "?f=json")
    ags.expire_all()
    data = os.urandom(1 << 20) * 50
    boundary = "----authproxy-e2e"
    body = (("--%s\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\njson\r\n" % boundary).encode()
            + ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.bin\"\r\n"
               "Content-Type: application/octet-stream\r\n\r\n" % boundary).encode()
            + data + ("\r\n--%s--\r\n" % boundary).encode())

    def gen():
        for i in range(0, len(body), 1 << 20):
            yield body[i:i + (1 << 20)]

    r = via(p, session, "POST", ags.upload_url(), data=gen(), timeout=120,
            headers={"Content-Type": "multipart/form-data; boundary=%s" % boundary})
    assert r.status_code == 200, r.text[:300]
    info = r.json()
    assert info["sha256"] == hashlib.sha256(data).hexdigest() or info.get("size") == len(body), info
    uploads = [e for e in ags.request_log() if e["path"].endswith("/upload")]
    assert [e["outcome"] for e in uploads[-2:]] == ["498", "ok"], uploads[-2:]
    assert p.hwm() < 150 * 1024 * 1024
    assert not [f for f in os.listdir(tmp_path) if f.startswith("replay-")]


def test_replay_limit_relays_the_rejection(proxy_factory, ags, session):
    p = proxy_factory(proxy={"max_replay_bytes": 1000}, extra_config=arcgis_cred(ags))
    via(p, session, "GET", ags.query_url() + "?f=json")
    ags.expire_all()
    r = via(p, session, "POST", ags.upload_url(), data=b"x" * 5000, headers={"Content-Type": "application/octet-stream"})
    assert r.status_code in (200, 498) and "498" in r.text, r.text[:300]
    assert p.wait_for_log(lambda l: "max_replay_bytes" in l)


def test_200_concurrent_requests_one_token_request(proxy_factory, ags):
    p = proxy_factory(extra_config=arcgis_cred(ags))
    results = []
    lock = threading.Lock()

    def one():
        s = requests.Session()
        s.trust_env = False
        try:
            r = s.get(ags.query_url() + "?f=json", proxies=p.proxies, timeout=60)
            with lock:
                results.append(r.status_code)
        finally:
            s.close()

    ts = [threading.Thread(target=one) for _ in range(200)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert results.count(200) == 200, {c: results.count(c) for c in set(results)}
    assert ags.stats()["tokens_issued"]["generate_password"] == 1
    # and again after a forced expiry: still one token request
    ags.expire_all()
    ags.reset_stats()
    results.clear()
    ts = [threading.Thread(target=one) for _ in range(200)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert results.count(200) == 200
    assert ags.stats()["tokens_issued"]["generate_password"] == 1


def test_wrong_password_clear_502_and_backoff(proxy_factory, ags, session):
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", ags.server_root, username="alice", password="wrong"))
    t0 = time.time()
    r = via(p, session, "GET", ags.query_url() + "?f=json")
    assert time.time() - t0 < 10
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "gis" in err["message"] and "Unable to generate token" in err["message"], err
    for _ in range(20):
        via(p, session, "GET", ags.query_url() + "?f=json")
    calls = [x for x in ags.stats()["token_requests"] if "generateToken" in x["endpoint"]]
    assert len(calls) <= 3, calls  # backing off, not one call per request
    assert "wrong" not in p.log_text()


def test_token_service_down_then_recovers(proxy_factory, ags, session):
    ags.set_token_service("down")
    p = proxy_factory(extra_config=arcgis_cred(ags))
    r = via(p, session, "GET", ags.query_url() + "?f=json")
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    ags.set_token_service("ok")
    time.sleep(1.5)  # first backoff step
    deadline = time.time() + 10
    while time.time() < deadline:
        r = via(p, session, "GET", ags.query_url() + "?f=json")
        if r.status_code == 200:
            break
        time.sleep(0.5)
    assert r.status_code == 200


# ---------------------------------------------------------------------------------------------------------
# Federation, OAuth, pregenerated tokens, ssl
# ---------------------------------------------------------------------------------------------------------

def test_oauth_app_federated_exchange(proxy_factory, federation, session):
    portal, server = federation
    p = proxy_factory(extra_config=cred("app", "oauth-app", [portal.portal_url, server.server_root],
                                        client_id="proxyapp", client_secret="proxyapp-secret",
                                        portal_url=portal.portal_url))
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200, r.text[:300]
    r = via(p, session, "GET", portal.sharing_url + "/portals/self?f=json")
    assert r.status_code == 200 and "error" not in r.json(), r.text[:300]
    issued = portal.stats()["tokens_issued"]
    assert issued.get("oauth_client_credentials") == 1 and issued.get("generate_federated") == 1, issued


def test_arcgis_token_from_portal_is_exchanged(proxy_factory, federation, session):
    # The portal runs on another port than the server (another origin): the password goes there only because it
    # is configured (a match prefix), never on the word of the server's rest/info alone (issue 35, item 6).
    portal, server = federation
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", [server.server_root, portal.portal_url],
                                        username="bob", password="bob-pass"))
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200, r.text[:300]
    issued = portal.stats()["tokens_issued"]
    assert issued.get("generate_password") == 1 and issued.get("generate_federated") == 1, issued


def test_arcgis_token_logs_in_once_for_every_federated_server(proxy_factory, federation, session):
    # Two servers federated with one portal, and the portal itself: one password login at the portal, whose
    # token is exchanged per server root (as oauth-app does), not a password login per server root.
    portal, server = federation
    server2 = ArcGISServer(role="server", ttl=60).start()
    try:
        federate(portal, server2)
        p = proxy_factory(extra_config=cred("fed", "arcgis-token",
                                            [portal.portal_url, server.server_root, server2.server_root],
                                            username="bob", password="bob-pass"))
        for srv in (server, server2, server):
            r = via(p, session, "GET", srv.query_url() + "?f=json")
            assert r.status_code == 200 and r.json()["features"], r.text[:300]
        r = via(p, session, "GET", portal.sharing_url + "/portals/self?f=json")
        assert r.status_code == 200 and "error" not in r.json(), r.text[:300]
        issued = portal.stats()["tokens_issued"]
        assert issued["generate_password"] == 1 and issued["generate_federated"] == 2, issued
    finally:
        server2.stop()


@pytest.mark.parametrize("token_url", [False, True])
def test_portal_pages_outside_the_api_are_forwarded_untouched(proxy_factory, federation, session, token_url):
    # arcgis-token matching a portal: its home page is no API (no /rest/, /sharing/ ...). It must reach the
    # portal as is — no token, no rest/info discovery, no backoff — and never spoil the portal API after it.
    portal, server = federation
    extra = {"token_url": portal.sharing_url + "/generateToken"} if token_url else {}
    p = proxy_factory(extra_config=cred("fed", "arcgis-token", [server.server_root, portal.portal_url],
                                        username="bob", password="bob-pass", **extra))
    for path in ["/home/index.html", "/apps/mapviewer/index.html?webmap=1"]:
        direct = session.get(portal.portal_url + path, timeout=30)
        r = via(p, session, "GET", portal.portal_url + path)
        assert r.status_code == direct.status_code and r.content == direct.content, r.text[:300]
    assert portal.stats()["tokens_issued_total"] == 0, portal.stats()["tokens_issued"]
    assert "rest/info" not in p.log_text()
    r = via(p, session, "GET", portal.sharing_url + "/portals/self?f=json")
    assert r.status_code == 200 and "error" not in r.json(), r.text[:300]
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200 and r.json()["features"], r.text[:300]


@pytest.mark.parametrize("expiration", [None, 30])
def test_arcgis_token_with_token_url_and_expiration_still_exchanged(proxy_factory, federation, session, expiration):
    # token_url at the portal (what `authproxy doctor` proposes) plus expiration_minutes: the server's rest/info
    # must still be read, or its owningSystemUrl is never learnt and the portal token goes to the server (498).
    portal, server = federation
    extra = {"expiration_minutes": expiration} if expiration else {}
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", [server.server_root, portal.portal_url],
                                        username="bob", password="bob-pass",
                                        token_url=portal.sharing_url + "/generateToken", **extra))
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    issued = portal.stats()["tokens_issued"]
    assert issued.get("generate_federated") == 1, issued
    assert [e["outcome"] for e in server.request_log() if e.get("kind") == "query"] == ["ok"], server.request_log()


def test_pregenerated_token_and_referer(proxy_factory, ags, session):
    t = ags.issue_token(client="referer", referer="https://maps.example.com", ttl=600)
    p = proxy_factory(extra_config=cred("pre", "token", ags.server_root, token=t, referer="https://maps.example.com"))
    assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
    ags.expire_all()
    r = via(p, session, "GET", ags.query_url() + "?f=json")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "pre" in err["message"] and "renew" in " ".join(err["details"]).lower() + err["message"].lower(), err


def test_expired_pregenerated_token_is_not_sent(proxy_factory, ags, session):
    p = proxy_factory(extra_config=cred("pre", "token", ags.server_root, token="abc") + "expires = 2020-01-01T00:00:00Z\n")
    r = via(p, session, "GET", ags.query_url() + "?f=json")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "expired" in err["message"]
    assert ags.stats()["requests"].get("query", 0) == 0


def test_ssl_token_never_sent_over_http(proxy_factory, session):
    s = ArcGISServer(role="server", ssl=True).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        r = via(p, session, "GET", s.query_url() + "?f=json")
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert "https" in err["message"]
        assert s.stats()["requests"].get("query", 0) == 0
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------------------
# Persistence, login, signout
# ---------------------------------------------------------------------------------------------------------

def test_restart_keeps_tokens_and_encrypts_state(proxy_factory, ags, session, tmp_path):
    state = tmp_path / "shared-state"
    key = "a-very-long-state-key-for-tests"
    conf = {"state_dir": str(state), "state_key": key}
    p = proxy_factory(proxy=conf, extra_config=arcgis_cred(ags))
    assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
    p.stop()
    files = sorted(os.listdir(state))
    assert files == ["tokens.enc", "tokens.lock"], files  # the lock file serialises writers (flock)
    blob = (state / "tokens.enc").read_bytes()
    token = [e for e in ags.request_log() if e["outcome"] == "ok"][-1]["token"]
    assert token.encode() not in blob and b"alice" not in blob
    assert oct(os.stat(state / "tokens.enc").st_mode & 0o777) == "0o600"
    ags.reset_stats()
    p2 = proxy_factory(proxy=conf, extra_config=arcgis_cred(ags))
    assert via(p2, session, "GET", ags.query_url() + "?f=json").status_code == 200
    assert ags.stats()["tokens_issued_total"] == 0
    # A changed password (another credential) does not reuse the saved token.
    p2.stop()
    ags.reset_stats()
    p3 = proxy_factory(proxy=conf, extra_config=cred("gis", "arcgis-token", ags.server_root, username="bob", password="bob-pass"))
    assert via(p3, session, "GET", ags.query_url() + "?f=json").status_code == 200
    assert ags.stats()["tokens_issued"]["generate_password"] == 1


def test_login_and_signout(proxy_factory, federation, session, tmp_path):
    portal, server = federation
    state = tmp_path / "login-state"
    redirect_port = harness.free_port()
    creds = cred("me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                 portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % redirect_port)
    conf_text = harness.render_config(harness.default_proxy_section(harness.free_port(), str(state)),
                                      harness.default_log_section()) + creds
    conf = tmp_path / "login.conf"
    conf.write_text(conf_text)
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
    r = via(p, session, "GET", server.query_url() + "?f=json")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "authproxy login" in err["message"]

    login = subprocess.Popen([harness.proxy_bin(), "login", "--config", str(conf), "--credential", "me", "--timeout", "30"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=harness.clean_env(), text=True)
    url = None
    for line in login.stdout:
        if "/oauth2/authorize?" in line:
            url = line.strip()
            break
    assert url, login.stderr.read()
    # The "browser": follow the portal's redirect to the loopback listener.
    time.sleep(0.3)
    b = requests.Session()
    b.trust_env = False
    r = b.get(url, allow_redirects=True, timeout=30)
    assert r.status_code == 200, r.text
    out, errs = login.communicate(timeout=30)
    assert login.returncode == 0, errs
    assert "refresh token stored" in out
    # The running proxy picks it up without a restart.
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200, r.text[:300]
    issued = portal.stats()["tokens_issued"]
    assert issued.get("oauth_authorization_code") == 1 and issued.get("oauth_refresh") == 1, issued

    so = subprocess.run([harness.proxy_bin(), "signout", "--config", str(conf), "--credential", "me"],
                        capture_output=True, text=True, env=harness.clean_env(), timeout=30)
    assert so.returncode == 0, so.stderr
    assert "revoked" in so.stdout
    assert portal.stats()["revocations"] >= 1
    contents = json.loads((state / "tokens.json").read_text())
    assert contents["refreshTokens"] == [] and all(t["credential"] != "me" for t in contents["tokens"])


# ---------------------------------------------------------------------------------------------------------
# Review findings (each failed before its fix)
# ---------------------------------------------------------------------------------------------------------

def _tiny_server(handler_fn):
    import socket as _s
    srv = _s.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    seen = []

    def loop():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handler_fn, args=(c, seen), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return srv, srv.getsockname()[1], seen


def test_discovered_token_service_on_another_host_is_not_trusted(proxy_factory, session):
    """rest/info is the server's word: a password never goes to a token service on another host."""
    def collector(c, seen):
        seen.append(c.recv(65536))
        c.close()

    col, col_port, got = _tiny_server(collector)

    def info(c, seen):
        c.recv(65536)
        body = json.dumps({"currentVersion": 11.1, "authInfo": {"isTokenBasedSecurity": True,
                          "tokenServicesUrl": "http://localhost:%d/collect" % col_port}}).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                  % (len(body), body))
        c.close()

    srv, port, _ = _tiny_server(info)
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", "http://127.0.0.1:%d/arcgis" % port,
                                        username="alice", password="S3cret-pw"))
    r = via(p, session, "GET", "http://127.0.0.1:%d/arcgis/rest/services/x/FeatureServer/0/query?f=json" % port)
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "token_url" in err["message"], err
    time.sleep(0.3)
    assert got == [], got
    srv.close()
    col.close()


def test_hanging_token_service_fails_in_bounded_time(proxy_factory, session):
    def hang(c, seen):
        seen.append(1)
        time.sleep(30)
        c.close()

    srv, port, _ = _tiny_server(hang)
    p = proxy_factory(proxy={"upstream_timeout_seconds": 2},
                      extra_config=cred("gis", "arcgis-token", "http://127.0.0.1:%d/arcgis" % port, username="alice",
                                        password="pw", token_url="http://127.0.0.1:%d/arcgis/tokens/generateToken" % port,
                                        expiration_minutes=60))
    t0 = time.time()
    r = via(p, session, "GET", "http://127.0.0.1:%d/arcgis/rest/services/x/query?f=json" % port, timeout=20)
    assert time.time() - t0 < 8
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    srv.close()


def test_expect_continue_for_a_collected_form(proxy_factory, origin):
    import socket as _s
    p = proxy_factory(extra_config=cred("k", "api-key", origin.url, key="K"))
    body = b"where=1%3D1&f=json"
    s = _s.create_connection((p.host, p.port), timeout=5)
    s.sendall(b"POST " + origin.url.encode() + b"/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
              b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    first = s.recv(100)
    assert first.startswith(b"HTTP/1.1 100 Continue"), first
    s.sendall(body)
    rest = b""
    while b"\r\n\r\n" not in rest or not rest.rstrip().endswith(b"}"):
        d = s.recv(65536)
        if not d:
            break
        rest += d
    s.close()
    assert b" 200 " in rest.split(b"\r\n")[0] or b" 200 " in rest, rest[:200]
    assert hashlib.sha256(body + b"&token=K").hexdigest().encode() in rest
