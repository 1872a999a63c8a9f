"""oauth-user sign-ins that last: the proxy exchanges the refresh token of `authproxy login`
(`grant_type=exchange_refresh_token`) before it expires, on its own schedule, saves the new one atomically
(state file, and the fleet's Redis with `[cluster]`), exchanges it once per due time in a fleet, and says clearly
when the portal refuses. Real binary, real clients (Python requests, curl), the ArcGIS test server with short
refresh-token lives."""
import json
import shutil
import subprocess
import time

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer, federate
from test_admin import admin_get, admin_section
from test_credentials import via
from test_token_state import login, write_conf


@pytest.fixture
def short_signin():
    """A portal whose refresh tokens live 12 s (access tokens 8 s) and that invalidates a refresh token once it is
    exchanged (so spending an old one, or exchanging one twice, shows), with a server federated with it."""
    portal = ArcGISServer(role="portal", ttl=8, refresh_ttl=12, exchange_revokes_old=True).start()
    server = ArcGISServer(role="server", ttl=8).start()
    federate(portal, server)
    yield portal, server
    server.stop()
    portal.stop()


def user_cred(portal, server, name="me"):
    return cred(name, "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())


def refresh_tokens(portal):
    """Every refresh token the portal ever issued."""
    with portal.state.lock:
        return list(portal.state.refresh)


def assert_no_refresh_token(portal, *texts):
    secrets = refresh_tokens(portal)
    assert secrets
    for text in texts:
        for s in secrets:
            assert s not in text


def stored(state):
    return json.loads((state / "tokens.json").read_text())["refreshTokens"]


def serve_for(p, server, seconds, session, failures):
    """GETs the secured layer through `p` once a second for `seconds`; appends each failure."""
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        r = via(p, session, "GET", server.query_url() + "?f=json")
        n += 1
        if r.status_code != 200 or not r.json().get("features"):
            failures.append((time.strftime("%X"), r.status_code, r.text[:300]))
        time.sleep(1.0)
    return n


def test_a_short_sign_in_keeps_serving_through_exchanges_and_a_restart(proxy_factory, short_signin, session,
                                                                        tmp_path):
    portal, server = short_signin
    state = tmp_path / "state"
    creds = user_cred(portal, server)
    login(write_conf(tmp_path, "login.conf", state, None, creds))
    first = stored(state)[0]
    assert abs(first["expires"] - first["issued"] - 12000) < 2000, first
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
    failures = []
    serve_for(p, server, 20, session, failures)
    # A restart in the middle: the new proxy goes on with the refresh token the last exchange saved.
    p.stop()
    saved = stored(state)[0]
    assert saved["refreshToken"] != first["refreshToken"] and saved["grant"], saved
    log1 = p.log_text()
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
    serve_for(p, server, 20, session, failures)
    # curl as a second client, through the same proxy.
    out = subprocess.run(["curl", "-s", "--max-time", "20", "-x", "http://%s" % p.authority,
                          server.query_url() + "?f=json"], capture_output=True, text=True, timeout=30)
    assert json.loads(out.stdout).get("features"), out.stdout[:300]
    assert failures == [], failures
    st = portal.stats()
    # Due every 9 s (a quarter of 12 s before expiry): about four in 40 s; never the same refresh token twice.
    assert st["refresh_exchanges"] >= 3, st["token_requests"][-20:]
    assert st["refresh_exchange_repeats"] == 0
    assert st["tokens_issued"]["oauth_authorization_code"] == 1  # no new login
    assert st["token_failures"].get("invalid_refresh_token", 0) == 0, st["token_failures"]
    log = log1 + p.log_text()
    assert log.count("refresh token exchanged: the sign-in continues") == st["refresh_exchanges"], log[-3000:]
    # An exchange continues the sign-in: no access token was dropped as if it were a new login.
    assert "new refresh token from another process" not in log
    assert_no_refresh_token(portal, log, (state / "tokens.json").read_text().replace(stored(state)[0]["refreshToken"], ""))


def test_idle_proxy_exchanges_on_its_own(proxy_factory, short_signin, session, tmp_path):
    """No request at all for longer than the refresh token lives: the sign-in is still there afterwards."""
    portal, server = short_signin
    state = tmp_path / "state"
    creds = user_cred(portal, server)
    login(write_conf(tmp_path, "login.conf", state, None, creds))
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
    assert p.wait_for_log(lambda l: "refresh token exchanged" in l, timeout=15), p.log_text()[-2000:]
    time.sleep(12)  # past the life of the first refresh token, and of the second
    assert portal.stats()["refresh_exchanges"] >= 2
    r = via(p, session, "GET", server.query_url() + "?f=json")
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]


def test_a_refused_exchange_says_so_with_the_time_left(proxy_factory, session, tmp_path):
    portal = ArcGISServer(role="portal", ttl=60, refresh_ttl=16).start()
    server = ArcGISServer(role="server", ttl=60).start()
    try:
        federate(portal, server)
        state = tmp_path / "state"
        creds = user_cred(portal, server)
        login(write_conf(tmp_path, "login.conf", state, None, creds))
        port = harness.free_port()
        p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=admin_section(port) + creds)
        p.admin = "http://127.0.0.1:%d" % port
        assert via(p, session, "GET", server.query_url() + "?f=json").status_code == 200
        portal.expire_all("refresh")  # revoked at the portal ("revoke all tokens", a password change)
        hits = p.wait_for_log(lambda l: "refresh token exchange refused" in l, timeout=15)
        assert hits, p.log_text()[-2000:]
        line = hits[0]
        assert "credential=me" in line.replace('"', "") and "authproxy login" in line and "expires_in" in line, line
        status = admin_get(p, "/status.json").json()
        me = [c for c in status["credentials"] if c["name"] == "me"][0]
        rows = [e for e in me["expiries"] if e["what"] == "refresh_token"]
        assert len(rows) == 1, me["expiries"]
        row = rows[0]
        assert "Credential 'me'" in row["lastError"] and "refused to exchange" in row["lastError"], row
        assert "authproxy login --config <file> --credential me" in row["lastError"], row
        assert "the sign-in ends in" in row["lastError"] and row["dueSoon"] and "renews" not in row, row
        page = admin_get(p, "/").text
        assert "refused to exchange" in page
        metrics = admin_get(p, "/metrics").text
        assert 'authproxy_credential_expiry_timestamp_seconds{credential="me",what="refresh_token"}' in metrics
        assert 'authproxy_credential_renewal_timestamp_seconds{credential="me"' not in metrics
        # The access token the proxy holds still serves until it expires.
        assert via(p, session, "GET", server.query_url() + "?f=json").status_code == 200
        assert_no_refresh_token(portal, p.log_text(), json.dumps(status), page, metrics)
    finally:
        server.stop()
        portal.stop()


def test_status_and_metrics_show_the_sign_in_and_its_renewal(proxy_factory, federation, session, tmp_path):
    """A two-week refresh token: its expiry and the proxy's own renewal a day before are on /metrics and the
    status page; not "due soon" although it is within expiry_warning_days (the proxy renews it)."""
    portal, server = federation
    state = tmp_path / "state"
    creds = user_cred(portal, server)
    login(write_conf(tmp_path, "login.conf", state, None, creds))
    port = harness.free_port()
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=admin_section(port) + creds)
    p.admin = "http://127.0.0.1:%d" % port
    deadline = time.time() + 5
    while True:
        metrics = admin_get(p, "/metrics").text
        if "authproxy_credential_renewal_timestamp_seconds" in metrics or time.time() > deadline:
            break
        time.sleep(0.2)
    expiry = [l for l in metrics.splitlines()
              if l.startswith('authproxy_credential_expiry_timestamp_seconds{credential="me",what="refresh_token"}')]
    renewal = [l for l in metrics.splitlines()
               if l.startswith('authproxy_credential_renewal_timestamp_seconds{credential="me",what="refresh_token"}')]
    assert len(expiry) == 1 and len(renewal) == 1, metrics
    e, r = float(expiry[0].split()[-1]), float(renewal[0].split()[-1])
    assert abs(e - r - 86400) <= 1 and abs(e - time.time() - 14 * 86400) < 60, (e, r)
    status = admin_get(p, "/status.json").json()
    row = [x for c in status["credentials"] if c["name"] == "me" for x in c["expiries"] if x["what"] == "refresh_token"]
    assert len(row) == 1 and not row[0]["dueSoon"] and row[0]["renews"], row
    # `check` reads the state file: when the stored sign-in expires and when a running proxy exchanges it.
    c = harness.run_cli(["check", "--config", str(tmp_path / "login.conf")])
    assert c.returncode == 0, c.stderr
    assert "sign-in of 'me' (alice): refresh token expires" in c.stdout and "exchanges it from" in c.stdout, c.stdout
    assert_no_refresh_token(portal, metrics, json.dumps(status), admin_get(p, "/").text, c.stdout + c.stderr)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server (Debian package) is not installed")
def test_two_replicas_exchange_once_per_due_time(proxy_factory, short_signin, tmp_path):
    from test_fleet import RedisServer, STATE_KEY, cluster_section, wait_connected
    portal, server = short_signin
    redis = RedisServer(tmp_path).start()
    try:
        creds = cluster_section(redis.url()) + user_cred(portal, server)
        section = harness.default_proxy_section(harness.free_port(), str(tmp_path / "login-state"))
        section["state_key"] = STATE_KEY
        conf = tmp_path / "login.conf"
        conf.write_text(harness.render_config(section, harness.default_log_section()) + creds)
        fleet = [proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1}, extra_config=creds) for _ in range(2)]
        wait_connected(fleet)
        assert "fleet's Redis" in login(conf)
        login_at = time.time()
        sessions = [requests.Session() for _ in fleet]
        for s in sessions:
            s.trust_env = False
        failures = []
        # Two due times (9 s after the login, 9 s after the first exchange), requests through both replicas.
        deadline = login_at + 21
        seen = []
        while time.time() < deadline:
            for p, s in zip(fleet, sessions):
                r = s.get(server.query_url() + "?f=json", proxies=p.proxies, timeout=30)
                if r.status_code != 200 or not r.json().get("features"):
                    failures.append((r.status_code, r.text[:200]))
            seen.append((time.time() - login_at, portal.stats()["refresh_exchanges"]))
            time.sleep(0.5)
        st = portal.stats()
        assert failures == [], failures
        assert st["refresh_exchanges"] == 2, (st["refresh_exchanges"], seen)
        assert st["refresh_exchange_repeats"] == 0 and st["token_failures"].get("invalid_refresh_token", 0) == 0, st
        # Exactly one replica made each exchange; the other took the new refresh token from Redis.
        made = [p.log_text().count("refresh token exchanged: the sign-in continues") for p in fleet]
        assert sum(made) == 2, made
        # The login was the one change of sign-in each replica saw: the exchanges continued it.
        assert [p.log_text().count("new refresh token in the fleet's store") for p in fleet] == [1, 1]
        for p in fleet:
            assert_no_refresh_token(portal, p.log_text())
        assert_no_refresh_token(portal, redis.cli("--scan"))
    finally:
        redis.stop()


@pytest.mark.long_running
@pytest.mark.timeout(600)
def test_a_one_minute_sign_in_serves_five_minutes_through_a_restart(proxy_factory, session, tmp_path):
    """The issue's case: a refresh token that lives 60 s, five minutes of requests, a restart in the middle, no
    new login."""
    portal = ArcGISServer(role="portal", ttl=20, refresh_ttl=60).start()
    server = ArcGISServer(role="server", ttl=20).start()
    try:
        federate(portal, server)
        state = tmp_path / "state"
        creds = user_cred(portal, server)
        login(write_conf(tmp_path, "login.conf", state, None, creds))
        p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
        failures = []
        serve_for(p, server, 150, session, failures)
        p.stop()
        log1 = p.log_text()
        p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
        serve_for(p, server, 150, session, failures)
        assert failures == [], failures
        st = portal.stats()
        assert st["refresh_exchanges"] >= 5 and st["refresh_exchange_repeats"] == 0, st["refresh_exchanges"]
        assert st["tokens_issued"]["oauth_authorization_code"] == 1
        assert_no_refresh_token(portal, log1 + p.log_text())
    finally:
        server.stop()
        portal.stop()
