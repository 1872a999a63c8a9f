"""Reproducers for the request-path findings of issue 35's outside probe (items 1 and 2), run on both upstream clients
in CI (`http_client = "libcurl"` too):

1. A token answer was written raw into request heads: a token endpoint answering
   `"tok\\r\\nX-Injected: 1\\r\\n\\r\\nGET /smuggled HTTP/1.1…"` made the upstream read a second request on the
   proxy's pooled connection. Now such a token is refused (502 naming the token service, the credential backs off),
   and no head the proxy writes upstream holds a byte its own parser would refuse.
2. A long GET to an edit operation became a POST and was sent three times after a 504. Now only listed read
   operations on matched hosts are converted, and an edit is never retried or resent, whatever method carries it.
Each failed on the build the probe tested."""
import json
import subprocess
import time

import pytest
import requests

import harness
from harness import cred
from test_retries import CountingOrigin, answer
from test_security_request_path import DropsSecondRequest

SMUGGLED = "tok\r\nX-Injected: 1\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: victim\r\n\r\n"


class HostileTokenServer(harness.RawBackend):
    """An ArcGIS server and an OAuth 2.0 token endpoint on one port whose token answers carry a smuggled request,
    and a service that records what reaches it (kept-alive connections, as a real server keeps them)."""

    def __init__(self, token=SMUGGLED):
        self.token = token
        self.token_requests = 0
        super().__init__(respond=self._answer)

    def _json(self, obj):
        body = json.dumps(obj).encode()
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    def _answer(self, req):
        path = req.target.split("?")[0]
        if path.endswith("/rest/info"):
            return self._json({"currentVersion": 11.1, "authInfo": {
                "isTokenBasedSecurity": True, "tokenServicesUrl": self.url + "/arcgis/tokens/generateToken"}})
        if path.endswith("/generateToken"):
            with self.lock:
                self.token_requests += 1
            return self._json({"token": self.token, "expires": int(time.time() * 1000) + 3600_000, "ssl": False})
        if path.endswith("/oauth/token"):
            with self.lock:
                self.token_requests += 1
            return self._json({"access_token": self.token, "token_type": "Bearer", "expires_in": 3600})
        return self._json({"path": path})

    def smuggled(self):
        """Evidence that a request head was split: a request the client never sent, or the injected field."""
        with self.lock:
            seen = [r.target for r in self.requests if "smuggled" in r.target]
            raw = b"".join(self.received)
        return seen, b"X-Injected" in raw


def arcgis_header_cred(srv):
    return cred("gis", "arcgis-token", srv.url + "/arcgis", username="alice", password="alice-pass",
                token_placement="header", token_url=srv.url + "/arcgis/tokens/generateToken")


def oauth2_cred(srv):
    return cred("ogc", "oauth2", srv.url + "/ogc", token_url=srv.url + "/oauth/token", client_id="proxy",
                client_secret="s3cret")


@pytest.fixture
def hostile():
    s = HostileTokenServer()
    yield s
    s.stop()


@pytest.mark.parametrize("kind", ["arcgis-header", "oauth2-bearer"])
def test_a_token_with_a_smuggled_request_is_refused_and_never_reaches_the_upstream(proxy_factory, hostile, session,
                                                                                     kind):
    config, path = (arcgis_header_cred(hostile), "/arcgis/rest/services/x/FeatureServer/0/query?f=json") \
        if kind == "arcgis-header" else (oauth2_cred(hostile), "/ogc/collections/x/items?f=json")
    p = proxy_factory(proxy={"workers": 1}, extra_config=config)
    answers = []
    # Several requests on one client connection and then a second client: with a split head, the upstream's answer
    # to the smuggled request is what the next request on the pooled connection receives.
    for _ in range(3):
        r = session.get(hostile.url + path, proxies=p.proxies, timeout=15)
        answers.append((r.status_code, r.text))
    other = requests.Session()
    other.trust_env = False
    try:
        r = other.get(hostile.url + path, proxies=p.proxies, timeout=15)
        answers.append((r.status_code, r.text))
    finally:
        other.close()
    seen, injected = hostile.smuggled()
    assert not seen and not injected, "the token split the request head: %r %r %r" % (seen, injected, answers)
    for status, text in answers:
        assert status == 502, answers
        err = json.loads(text)["error"]
        said = json.dumps(err)
        assert "/tokens/generateToken" in said or "/oauth/token" in said, err
        assert "cannot be sent" in said, err
        assert "smuggled" not in said and "X-Injected" not in said, err
    # The credential backs off as after an answer without a token: not one token request per client request.
    assert hostile.token_requests <= 2, hostile.token_requests
    assert not any("smuggled" in l or "X-Injected" in l for l in p.log_lines()), "the token reached the log"


@pytest.mark.parametrize("token", ["a\x00b", "a\x7fb", "a\x01b", "caf\u00e9", "a b"],
                         ids=["nul", "del", "ctl", "8bit", "space"])
def test_a_token_with_bytes_a_head_cannot_carry_is_refused(proxy_factory, session, token):
    s = HostileTokenServer(token=token)
    try:
        p = proxy_factory(extra_config=arcgis_header_cred(s))
        r = session.get(s.url + "/arcgis/rest/services/x/FeatureServer/0/query?f=json", proxies=p.proxies,
                        timeout=15)
        assert r.status_code == 502, (r.status_code, r.text[:300])
        assert "cannot be sent" in r.text, r.text[:300]
        with s.lock:
            reached = [r.target for r in s.requests if "/FeatureServer/" in r.target]
        assert reached == [], reached
    finally:
        s.stop()


def test_a_header_credential_with_a_control_byte_is_refused_at_load(tmp_path):
    secret = tmp_path / "value"
    secret.write_bytes(b"abc\x01def")
    path = tmp_path / "proxy.conf"
    path.write_text('[proxy]\nlisten = ["127.0.0.1:%d"]\n' % harness.free_port()
                    + '\n[[credential]]\nname = "hdr"\ntype = "header"\nmatch = ["http://127.0.0.1:9/"]\n'
                    + 'headers = { "X-API-Key" = "file:%s" }\n' % secret)
    r = subprocess.run([harness.proxy_bin(), "check", "--config", str(path)], capture_output=True, text=True,
                       timeout=30, env=harness.clean_env())
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "control byte" in out and "abc" not in out, out


# ---------------------------------------------------------------------------------------------------------
# 2. Edits are never converted to POST, never retried, never resent
# ---------------------------------------------------------------------------------------------------------

def long_ids(n=2700):
    ids, i = [], 1000
    while len(",".join(ids)) < n:
        ids.append(str(i))
        i += 1
    return ",".join(ids)


def test_a_long_get_to_an_edit_stays_get_and_runs_once_after_a_504(proxy_factory, session):
    o = CountingOrigin(lambda n, c, head: answer(c, 504))
    try:
        p = proxy_factory(proxy={"upstream_retries": 2}, extra_config=cred("gis", "api-key", o.url + "/arcgis",
                                                                          key="AAPK-key"))
        url = o.url + "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures"
        r = session.get(url, params={"objectIds": long_ids(), "f": "json"}, proxies=p.proxies, timeout=20)
        assert len(r.request.url) > 2700
        assert r.status_code == 504, r.status_code
        time.sleep(0.5)  # a retry would come within the backoff (100 ms, doubling)
        assert o.count == 1, "deleteFeatures reached the server %d times" % o.count
        assert o.heads[0].startswith(b"GET /arcgis/rest/services/x/FeatureServer/0/deleteFeatures?"), o.heads[0][:80]
    finally:
        o.close()


@pytest.mark.parametrize("matched", [True, False], ids=["matched", "unmatched"])
@pytest.mark.parametrize("path", [
    "/arcgis/rest/services/x/FeatureServer/0/applyEdits",
    "/portal/sharing/rest/content/users/alice/items/abc/delete",
    # Spellings a server reads as the same edit (percent-encoded, with a parameter, with dot-segments).
    "/arcgis/rest/services/x/FeatureServer/0/deleteFeature%73",
    "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures;x=1",
    "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/.",
    "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/%2e",
    "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures/x/..",
    # An edit the list does not name, caught by its verb.
    "/arcgis/rest/services/x/UtilityNetworkServer/updateIsConnected",
])
def test_a_short_get_to_an_edit_is_not_retried(proxy_factory, path, matched):
    o = CountingOrigin(lambda n, c, head: answer(c, 503))
    try:
        config = cred("gis", "api-key", o.url, key="AAPK-key") if matched else ""
        p = proxy_factory(proxy={"upstream_retries": 2}, extra_config=config)
        # Raw, so that no client library resolves the dot-segments first.
        conn = harness.proxied_conn(p, timeout=20)
        try:
            conn.request("GET", o.url + path + "?f=json")
            r = conn.getresponse()
            status = r.status
            r.read()
        finally:
            conn.close()
        time.sleep(0.5)
        assert status == 503, status
        assert o.count == 1, "%s reached the server %d times" % (path, o.count)
    finally:
        o.close()


def test_a_long_get_on_an_unmatched_host_stays_get(proxy_factory, session):
    o = CountingOrigin(lambda n, c, head: answer(c, 200, b"{}"))
    try:
        p = proxy_factory()
        for path in ["/api/rest/services/accounts/delete", "/arcgis/rest/services/x/FeatureServer/0/query"]:
            r = session.get(o.url + path, params={"ids": long_ids()}, proxies=p.proxies, timeout=20)
            assert r.status_code == 200
        assert [h.split(b" ")[0] for h in o.heads] == [b"GET", b"GET"], [h[:60] for h in o.heads]
    finally:
        o.close()


def test_a_get_to_an_edit_is_not_resent_after_its_pooled_connection_died(proxy_factory):
    # Answers the first request on each connection; reads the second and closes without answering.
    b = DropsSecondRequest()
    try:
        p = proxy_factory(proxy={"workers": 1}, extra_config=cred("gis", "api-key", b.url + "/arcgis",
                                                                  key="AAPK-key"))
        conn = harness.proxied_conn(p)
        try:
            conn.request("GET", b.url + "/arcgis/rest/services/x/FeatureServer/0/query?where=1%3D1&f=json")
            r = conn.getresponse()
            assert r.status == 200 and r.read().startswith(b"answer-")
            conn.request("GET", b.url + "/arcgis/rest/services/x/FeatureServer/0/deleteFeatures?where=1%3D1&f=json")
            r = conn.getresponse()
            status, body = r.status, r.read()
        finally:
            conn.close()
        with b.lock:
            deletes = [r for r in b.requests if "/deleteFeatures" in r.target]
        assert len(deletes) == 1, "deleteFeatures reached the server %d times" % len(deletes)
        if status == 200:
            # libcurl puts a bodyless request that may not go twice on a new connection of its own.
            with b.lock:
                first = [r for r in b.requests if "/query" in r.target][0]
            assert deletes[0].conn != first.conn, (status, body)
            return
        assert status == 502, (status, body)
        assert "not sent again" in body.decode(), body
    finally:
        b.stop()
