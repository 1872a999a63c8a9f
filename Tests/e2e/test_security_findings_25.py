"""Reproducers for issue 25, items 4 and 11b, against the real binary and the ArcGIS test server (Tests/e2e/arcgis).

Item 4: a token "server root" was taken from the request path alone, so every `/arcgis/<anything>/rest/…` under a
credential's match prefix became a token-cache entry with its own token request: with `token_url` set the password
went to the token service once per invented path, a refused password made one failed login per path (account
lockout), and `/metrics` and `status.json` grew with every path. Now a root must be confirmed (configured, or its
`rest/info` answers as an ArcGIS root) before a password is spent on it, probes are budgeted per credential, a
refused password backs off per credential, and only confirmed roots reach the cache, the metrics and the status.

Item 11b: the token service kept the start-up `upstream_timeout_seconds` across reloads."""
import json
import os
import signal
import time

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer


def admin_section(port):
    return '\n[admin]\nlisten = "127.0.0.1:%d"\n' % port


def start_with_admin(proxy_factory, config, **kw):
    for _ in range(3):
        port = harness.free_port()
        p = proxy_factory(extra_config=admin_section(port) + config, **kw)
        if p.wait_for_log(lambda l: "admin listener" in l, timeout=5):
            p.admin = "http://127.0.0.1:%d" % port
            return p
    pytest.fail("admin listener did not start")


def admin_get(p, path):
    s = requests.Session()
    s.trust_env = False
    try:
        return s.get(p.admin + path, timeout=10)
    finally:
        s.close()


def via(proxy, session, url, **kw):
    kw.setdefault("timeout", 30)
    return session.get(url, proxies=proxy.proxies, **kw)


def invented(ags, i):
    return ags.server_root + "/invented%d/rest/services/Secure/Points/FeatureServer/0/query?f=json" % i


def password_logins(ags, ok=None):
    return [c for c in ags.token_calls("server.generateToken", kind="generate_password")
            if ok is None or c["ok"] == ok]


def test_invented_roots_do_not_spend_the_password_or_grow_metrics(proxy_factory, ags, session):
    """200 invented roots under the match prefix, with token_url set: one password login (the real root's), a
    bounded number of rest/info probes, a clear 502 for the invented roots, and /metrics and status.json that do
    not mention them or grow with them."""
    p = start_with_admin(proxy_factory, cred("gis", "arcgis-token", ags.server_root, username="alice",
                                             password="alice-pass",
                                             token_url=ags.server_root + "/tokens/generateToken"))
    assert via(p, session, ags.query_url() + "?f=json").status_code == 200
    assert len(password_logins(ags)) == 1
    metrics_before = len(admin_get(p, "/metrics").content)
    status_before = len(admin_get(p, "/status.json").content)
    ags.reset_stats()

    statuses = [via(p, session, invented(ags, i)).status_code for i in range(200)]

    # Not one password login for an invented root (the old build: 200).
    assert password_logins(ags) == [], len(password_logins(ags))
    # Probes of the invented roots' rest/info are budgeted per credential, not one per path forever.
    probes = ags.stats()["requests"].get("not_found", 0)
    assert probes <= 20, probes
    assert statuses.count(502) == 200, {s: statuses.count(s) for s in set(statuses)}
    r = via(p, session, invented(ags, 0))
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "gis" in err["message"] and "server root" in err["message"], err
    # The real root still works, with the token it has.
    assert via(p, session, ags.query_url() + "?f=json").status_code == 200
    assert password_logins(ags) == []

    metrics = admin_get(p, "/metrics").text
    status = admin_get(p, "/status.json").text
    assert "invented" not in metrics and "invented" not in status
    assert len(metrics) < metrics_before + 2048, (metrics_before, len(metrics))
    assert len(status) < status_before + 2048, (status_before, len(status))
    assert "alice-pass" not in p.log_text()


def test_refused_password_is_one_failed_login_not_one_per_root(proxy_factory, session):
    """A refused password backs off for the credential, not for one root: a second configured root and 50
    invented ones make no further login while the backoff runs (the old build: 2, then 52)."""
    s1 = ArcGISServer(role="server", ttl=60).start()
    s2 = ArcGISServer(role="server", ttl=60).start()
    try:
        p = proxy_factory(extra_config=cred("gis", "arcgis-token", [s1.server_root, s2.server_root],
                                            username="alice", password="wrong",
                                            token_url=s1.server_root + "/tokens/generateToken"))
        r = via(p, session, s1.query_url() + "?f=json")
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert "Unable to generate token" in err["message"], err
        r = via(p, session, s2.query_url() + "?f=json")
        harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert len(password_logins(s1, ok=False)) == 1, password_logins(s1)
        t0 = time.monotonic()
        for i in range(50):
            via(p, session, invented(s1, i))
        elapsed = time.monotonic() - t0
        failed = password_logins(s1, ok=False)
        # The backoff (1 s, doubling) may end during the loop: one more login per elapsed step, never one per root.
        allowed = 1 + sum(1 for step in (1, 3, 7, 15) if elapsed > step)
        assert len(failed) <= allowed, (len(failed), elapsed)
        assert "wrong" not in p.log_text()
    finally:
        s1.stop()
        s2.stop()


def test_invented_portal_roots_do_not_spend_the_client_secret(proxy_factory, federation, session):
    """An oauth-app credential: a path that invents a portal root (`/portal/<anything>/sharing/rest/…`) made a
    client-credentials grant of its own (the old build: one per path). Now the configured portal's one grant is
    all, and invented server roots under the server's prefix get no token either."""
    portal, server = federation
    p = proxy_factory(extra_config=cred("app", "oauth-app", [portal.portal_url, server.server_root],
                                        client_id="proxyapp", client_secret="proxyapp-secret",
                                        portal_url=portal.portal_url))
    assert via(p, session, portal.sharing_url + "/portals/self?f=json").status_code == 200
    assert via(p, session, server.query_url() + "?f=json").status_code == 200
    statuses = []
    for i in range(30):
        statuses.append(via(p, session, portal.portal_url + "/invented%d/sharing/rest/portals/self?f=json" % i).status_code)
        statuses.append(via(p, session, invented(server, i)).status_code)
    issued = portal.stats()["tokens_issued"]
    assert issued.get("oauth_client_credentials") == 1 and issued.get("generate_federated") == 1, issued
    assert statuses == [502] * 60, statuses
    assert "proxyapp-secret" not in p.log_text()


def test_reload_applies_upstream_timeout_to_token_requests(proxy_factory, ags, session):
    """Item 11b: a reload that shortens upstream_timeout_seconds bounds the token service's requests too (the old
    build kept the start-up 30 s and waited for the hanging token service)."""
    p = proxy_factory(extra_config=cred("gis", "arcgis-token", ags.server_root, username="alice",
                                        password="alice-pass"))
    text = p.config_text.replace("upstream_timeout_seconds = 30", "upstream_timeout_seconds = 2")
    assert text != p.config_text
    tmp = p.config_path + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, p.config_path)
    before = len([l for l in p.log_lines() if "configuration reload" in l])
    p.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while len([l for l in p.log_lines() if "configuration reload" in l]) == before:
        assert time.monotonic() < deadline, p.log_text()[-3000:]
        time.sleep(0.05)
    line = [l for l in p.log_lines() if "configuration reload" in l][before]
    assert "configuration reloaded" in line and "upstream_timeout_seconds" in line, line

    ags.set_token_service("hang", seconds=10)
    t0 = time.monotonic()
    r = via(p, session, ags.query_url() + "?f=json")
    elapsed = time.monotonic() - t0
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert elapsed < 7, elapsed
    ags.set_token_service("ok")
