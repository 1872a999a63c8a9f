"""Token lifecycle through the real binary against the ArcGIS test server: the client never
sees a failure the proxy could absorb, and a token service is never hammered."""
import hashlib
import json
import re
import threading
import time

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer, federate
from scripted_arcgis import INVALID_TOKEN, ScriptedArcGIS
from test_credentials import arcgis_cred, via


# ---------------------------------------------------------------------------------------------------------
# Rejection detection: compressed bodies, the unwrapped shape
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("enc,form", [("gzip", "json"), ("deflate", "json"), ("gzip", "unwrapped"), (None, "unwrapped")])
def test_encoded_or_unwrapped_rejection_is_retried(proxy_factory, session, enc, form):
    s = ArcGISServer(role="server", ttl=60, content_encoding=enc).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        url = s.query_url() + "?f=json&__err=" + form
        assert via(p, session, "GET", url).status_code == 200
        s.expire_all()
        s.reset_stats()
        r = via(p, session, "GET", url, headers={"Accept-Encoding": enc or "identity"})
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        log = s.request_log()
        assert [e["outcome"] for e in log] == ["498", "ok"], log
        assert log[0]["content_encoding"] == enc
        st = s.stats()
        assert st["tokens_issued"]["generate_password"] == 1, st
    finally:
        s.stop()


@pytest.mark.parametrize("enc", ["gzip", "deflate"])
def test_encoded_answers_reach_the_client_byte_identical(proxy_factory, session, enc):
    s = ArcGISServer(role="server", ttl=60, content_encoding=enc).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        for path in ["/rest/services/Secure/Points/FeatureServer/0/query?f=json",
                     "/rest/services/Secure/Points/FeatureServer/0/nosuch?f=json"]:  # a 400 error body, not a token error
            r = via(p, session, "GET", s.server_root + path, headers={"Accept-Encoding": enc}, stream=True)
            raw = r.raw.read(decode_content=False)
            assert r.headers["Content-Encoding"] == enc
            assert hashlib.sha256(raw).hexdigest() == s.request_log()[-1]["sent_sha256"]
        assert s.stats()["tokens_issued"]["generate_password"] == 1
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------------------
# A server that rejects every token: backoff, the upstream's answer to the client
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["json", "status"])
def test_server_rejecting_every_token_is_not_hammered(proxy_factory, session, form):
    s = ArcGISServer(role="server", ttl=60, reject_all=True, error_form=form).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        t0 = time.time()
        for _ in range(50):
            r = via(p, session, "GET", s.query_url() + "?f=json")
            # Each client gets the upstream's own rejection (not a 502 of ours).
            assert r.status_code == (200 if form == "json" else 498), r.text[:200]
            assert r.json() == {"error": {"code": 498, "message": "Invalid token.", "details": []}}, r.text[:200]
            time.sleep(0.05)
        elapsed = time.time() - t0
        times = [c["t"] for c in s.token_calls("server.generateToken")]
        assert 1 <= len(times) <= 5, (len(times), elapsed)
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(g >= 0.9 for g in gaps), gaps       # backing off: 1 s, 2 s, 4 s ...
        assert all(b >= a * 1.5 for a, b in zip(gaps, gaps[1:])), gaps
        assert s.stats()["rejected_498"] == 50 + len(times) - 1, s.stats()["rejected_498"]
        assert p.wait_for_log(lambda l: "the server rejects new tokens" in l)
        assert "alice-pass" not in p.log_text()
        # The server is fixed: after the backoff the next rejection-free token works again.
        s.set(reject_all=False)
        deadline = time.time() + 10
        while time.time() < deadline:
            r = via(p, session, "GET", s.query_url() + "?f=json")
            if "features" in r.json():
                break
            time.sleep(0.3)
        assert "features" in r.json(), r.text[:200]
    finally:
        s.stop()


def test_tokens_expired_twice_in_a_row_are_both_refreshed(proxy_factory, session):
    """An administrator invalidates tokens twice within seconds: the second time, the token the proxy got after the
    first is one the server had accepted, so its rejection is an expiry (refresh and replay), not a sign that the
    server rejects new tokens. The client never sees 498 (found by a README walk-through)."""
    s = ArcGISServer(role="server", ttl=600).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        for round_ in range(4):
            r = via(p, session, "GET", s.query_url() + "?f=json")
            assert r.status_code == 200 and r.json().get("features"), (round_, r.text[:200])
            s.expire_all()
            time.sleep(0.3)
        r = via(p, session, "GET", s.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:200]
        assert len(s.token_calls("server.generateToken")) == 5
        assert "the server rejects new tokens" not in p.log_text()
    finally:
        s.stop()


def test_one_service_rejecting_tokens_that_others_accept_does_not_log_in_per_request(proxy_factory, session):
    """One service answers every token with 498 (a service of another server behind the same root, or a denial
    that looks like a token error) while the others accept them. Each request to it refreshed, its fresh token
    was accepted by the next request elsewhere, which ended the backoff, so every request to it cost a
    password login (21 for 20+20 requests). Now the backoff holds once the pattern repeats: its rejections are
    relayed, the other services keep their token, and logins grow with the backoff (1 s doubling), not with
    the requests."""
    def answer(srv, path, tok):
        with srv.lock:
            valid = tok in srv.valid
        if not valid or "/Elsewhere/" in path:
            return 200, INVALID_TOKEN
        return 200, b'{"features":[]}'

    srv = ScriptedArcGIS(answer, username="u", password="p").start()
    port = srv.port
    try:
        p = proxy_factory(extra_config=cred("gis", "arcgis-token", "http://127.0.0.1:%d/arcgis" % port,
                                            username="u", password="p"))
        base = "http://127.0.0.1:%d/arcgis/rest/services/" % port
        started = time.time()
        for _ in range(20):
            assert via(p, session, "GET", base + "Open/FeatureServer/0/query?f=json").json() == {"features": []}
            r = via(p, session, "GET", base + "Elsewhere/FeatureServer/0/query?f=json")
            assert r.json()["error"]["code"] == 498
            time.sleep(0.1)
        elapsed = time.time() - started
        # One login at the start, one per rejection of a fresh token while the backoff doubles (1, 2, 4 s ...).
        assert srv.issued <= 2 + int(elapsed).bit_length(), (srv.issued, elapsed)
    finally:
        srv.stop()


def test_concurrent_clients_share_one_fresh_rejection(proxy_factory):
    s = ArcGISServer(role="server", ttl=60, reject_all=True).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        results = []
        lock = threading.Lock()

        def one():
            c = requests.Session()
            c.trust_env = False
            r = c.get(s.query_url() + "?f=json", proxies=p.proxies, timeout=30)
            with lock:
                results.append((r.status_code, r.json().get("error", {}).get("code")))
            c.close()

        ts = [threading.Thread(target=one) for _ in range(50)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert results == [(200, 498)] * 50, results
        assert len(s.token_calls("server.generateToken")) <= 2
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------------------
# Federation: every token revoked at once
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["oauth-app", "arcgis-token"])
def test_all_tokens_revoked_at_once_the_next_request_succeeds(proxy_factory, federation, session, kind):
    portal, server = federation
    if kind == "oauth-app":
        creds = cred("fed", "oauth-app", [portal.portal_url, server.server_root], client_id="proxyapp",
                     client_secret="proxyapp-secret", portal_url=portal.portal_url)
        new_portal_token = "oauth_client_credentials"
    else:
        # The portal is on another origin than the server: it is trusted with the password as a match prefix.
        creds = cred("fed", "arcgis-token", [server.server_root, portal.portal_url], username="bob",
                     password="bob-pass")
        new_portal_token = "generate_password"
    p = proxy_factory(extra_config=creds)
    assert via(p, session, "GET", server.query_url() + "?f=json").status_code == 200
    portal.revoke_all()
    server.revoke_all()
    portal.reset_stats()
    server.reset_stats()
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200 and r.json()["features"], r.text[:300]
    issued = portal.stats()["tokens_issued"]
    assert issued[new_portal_token] == 1 and issued["generate_federated"] == 1, issued
    assert [e["outcome"] for e in server.request_log()] == ["498", "ok"]


def test_revoked_portal_token_oauth_user(proxy_factory, federation, session, tmp_path):
    """oauth-user: every access token revoked (the refresh token survives): a refresh grant, one exchange."""
    from test_token_state import login, write_conf
    portal, server = federation
    state = tmp_path / "state"
    creds = cred("me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                 portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())
    login(write_conf(tmp_path, "login.conf", state, None, creds))
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
    assert via(p, session, "GET", server.query_url() + "?f=json").status_code == 200
    portal.expire_all("access")
    server.expire_all("access")
    portal.reset_stats()
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200, r.text[:300]
    issued = portal.stats()["tokens_issued"]
    assert issued["oauth_refresh"] == 1 and issued["generate_federated"] == 1, issued


def test_dead_refresh_token_says_to_sign_in_again(proxy_factory, federation, session, tmp_path):
    """oauth-user: when the refresh token of `authproxy login` expires (two weeks) or is revoked, the client got
    "token service …/oauth2/token refused: Invalid refresh_token" and the advice that the proxy would ask again
    in a second, as for an outage: nothing told the operator that only a new sign-in helps. The error now names
    the cause and the command; a portal outage does not say so (the same refresh token works once it is back)."""
    from test_token_state import login, write_conf
    portal, server = federation
    state = tmp_path / "state"
    creds = cred("me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                 portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())
    login(write_conf(tmp_path, "login.conf", state, None, creds))
    refresh_token = json.loads((state / "tokens.json").read_text())["refreshTokens"][0]["refreshToken"]
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
    assert via(p, session, "GET", server.query_url() + "?f=json").status_code == 200

    portal.set_token_service("down")  # an outage: no sign-in advice
    portal.expire_all("access")
    server.expire_all("access")
    r = via(p, session, "GET", server.query_url() + "?f=json")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "authproxy login" not in err["message"], err

    portal.set_token_service("ok")
    portal.expire_all("refresh")  # the sign-in is over (expired, or revoked at the portal)
    time.sleep(1.1)  # the outage's backoff
    r = via(p, session, "GET", server.query_url() + "?f=json")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "Credential 'me'" in err["message"] and "refresh token" in err["message"], err
    assert "expired or was revoked" in err["message"] and "Invalid refresh_token" in err["message"], err
    assert "authproxy login --config <file> --credential me" in err["message"], err
    logged = p.wait_for_log(lambda l: "token request failed" in l and "authproxy login" in l)
    assert logged, p.log_text()[-2000:]
    assert refresh_token not in p.log_text() and refresh_token not in r.text


# ---------------------------------------------------------------------------------------------------------
# Recovery after a token-service outage
# ---------------------------------------------------------------------------------------------------------

def test_outage_backoff_says_when_and_probes_at_its_end(proxy_factory, session):
    s = ArcGISServer(role="server", ttl=60).start()
    try:
        s.set_token_service("down")
        p = proxy_factory(extra_config=arcgis_cred(s))
        r = via(p, session, "GET", s.query_url() + "?f=json")
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert any("again in 1 s" in d for d in err["details"]), err
        t_end = time.time() + 3.5
        while time.time() < t_end:
            r = via(p, session, "GET", s.query_url() + "?f=json")
            err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
            assert any("again in" in d for d in err["details"]), err
            time.sleep(0.2)
        calls = s.token_calls("server.generateToken")
        assert 2 <= len(calls) <= 4, calls            # 1 s, 2 s, (4 s): backing off
        s.set_token_service("ok")
        # No client request from here on: the proxy probes when its backoff ends (at most 4 s away).
        deadline = time.time() + 8
        while time.time() < deadline and not [c for c in s.token_calls("server.generateToken") if c["ok"]]:
            time.sleep(0.1)
        ok = [c for c in s.token_calls("server.generateToken") if c["ok"]]
        assert len(ok) == 1, s.token_calls()
        assert p.wait_for_log(lambda l: "probing the token service" in l)
        r = via(p, session, "GET", s.query_url() + "?f=json")
        assert r.status_code == 200
        assert len(s.token_calls("server.generateToken")) == len(calls) + 1
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------------------
# Clock skew: the server's `expires` is on its own clock
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("skew", [-2 * 3600, 3600])
def test_token_from_a_skewed_server_clock_is_reused(proxy_factory, session, skew):
    # A server two hours behind reports an `expires` already in the proxy's past (one ahead, an hour too far in
    # the future): its Date header says by how much, and the token lives its real ten minutes either way.
    s = ArcGISServer(role="server", ttl=600, clock_skew=skew).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        for _ in range(10):
            r = via(p, session, "GET", s.query_url() + "?f=json")
            assert r.status_code == 200 and r.json()["features"], r.text[:300]
        assert s.stats()["tokens_issued"]["generate_password"] == 1, s.stats()["tokens_issued"]
        # The expiry the proxy works with is the token's real one (ten minutes), not the server's reading.
        got = [l for l in p.log_text().splitlines() if "token obtained" in l]
        assert len(got) == 1 and re.search(r"expires_in_s=(59\d|600)\b", got[0]), got
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------------------
# Content codings the rejection sniffer cannot read (br, zstd)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("enc", ["br", "zstd"])
def test_rejection_cannot_come_back_in_br_or_zstd(proxy_factory, session, enc):
    # Browsers and Node offer "gzip, deflate, br, zstd". On a request carrying an injected token the proxy
    # offers only what it can read, so an expired token's 498 is recognised and the request retried.
    s = ArcGISServer(role="server", ttl=60, content_encoding=enc).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        ae = {"Accept-Encoding": "gzip, deflate, br, zstd"}
        assert via(p, session, "GET", s.query_url() + "?f=json", headers=ae).status_code == 200
        s.expire_all()
        s.reset_stats()
        r = via(p, session, "GET", s.query_url() + "?f=json", headers=ae)
        assert r.status_code == 200 and r.json()["features"], (r.headers, r.content[:200])
        log = s.request_log()
        assert [e["outcome"] for e in log] == ["498", "ok"], log
        assert all(e["content_encoding"] is None for e in log), log
    finally:
        s.stop()


def test_accept_encoding_untouched_without_an_inspected_token(proxy_factory, origin, session):
    # Only requests whose token can be retried after a rejection have their Accept-Encoding filtered.
    p = proxy_factory(extra_config=cred("k", "api-key", origin.url + "/echo", key="K"))
    for path in ["/echo", "/upload"]:      # an API key with one slot (nothing to switch to), no credential
        via(p, session, "GET", origin.url + path, headers={"Accept-Encoding": "gzip, deflate, br, zstd"})
        e = origin.request_log()[-1]
        assert [v for k, v in e["headers"] if k.lower() == "accept-encoding"] == ["gzip, deflate, br, zstd"], e
