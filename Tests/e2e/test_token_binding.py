"""Token binding that survives a fleet and a failover (issue 36, item 3): an `arcgis-token` credential without a
`referer` asks generateToken for `client=referer` with a synthetic referer of its own, and sends that `Referer`
with every request its token goes on, so the token works from any egress address. The ArcGIS test server enforces
both bindings (a requestip token from another source address is a 498). Egress addresses differ through parent
forward proxies whose outgoing sockets bind other 127.x addresses."""
import concurrent.futures
import shutil

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer, federate
from forwarding_proxy import ForwardingProxy
from test_fleet import RedisServer, cluster_section, wait_connected

CRED = "bindcredQZ"
SYNTHETIC = "app://authproxy/" + CRED
CLIENT_REFERER = "https://client-app.example/map.html"


def generate_calls(ags):
    return [c for c in ags.token_calls() if c["endpoint"].endswith("generateToken")]


def queries(ags):
    return [e for e in ags.request_log() if e["kind"] == "query"]


def get(p, url, session=None):
    return (session or requests).get(url, proxies=p.proxies, timeout=30, headers={"Referer": CLIENT_REFERER})


@pytest.fixture
def ags():
    s = ArcGISServer(role="server", ttl=600).start()
    yield s
    s.stop()


@pytest.fixture
def parents():
    made = []

    def make(source):
        p = ForwardingProxy("parent-" + source, source=source).start()
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server (Debian package) is not installed")
def test_three_replicas_behind_three_egress_addresses_share_one_token(proxy_factory, ags, parents, tmp_path):
    redis = RedisServer(tmp_path).start()
    try:
        fleet = []
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            parent = parents(source)
            fleet.append(proxy_factory(
                proxy={"state_key": "binding-state-key-0123456789abcdef", "workers": 1,
                       "upstream_proxy": "http://" + parent.address},
                extra_config=cluster_section(redis.url()) + cred(
                    CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass")))
        wait_connected(fleet)
        sessions = [requests.Session() for _ in fleet]
        for s in sessions:
            s.trust_env = False

        def one(i):
            k = i % len(fleet)
            r = get(fleet[k], ags.query_url() + "?f=json&i=%d" % i, sessions[k])
            return r.status_code, "features" in r.text, r.text[:200]

        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(one, range(300)))
        failed = [r for r in results if r[:2] != (200, True)]
        assert not failed, failed[:5]
        # One token for the whole fleet, used from three addresses, never rejected.
        assert len(generate_calls(ags)) == 1, ags.token_calls()
        stats = ags.stats()
        assert stats["rejected_498"] == 0 and stats["rejected_499"] == 0, stats
        seen = queries(ags)
        assert len(seen) == 300
        assert {e["client"] for e in seen} == {"127.0.0.2", "127.0.0.3", "127.0.0.4"}, {e["client"] for e in seen}
        assert len({e["token"] for e in seen}) == 1
        # The token's referer replaced the client's on every request.
        assert {e["referer"] for e in seen} == {SYNTHETIC}, {e["referer"] for e in seen}
        for p in fleet:
            assert "alice-pass" not in p.log_text()
    finally:
        redis.stop()


def failover_run(proxy_factory, ags, parents, **binding):
    """One replica with two parents leaving by different addresses; the first dies half-way. Returns the answers."""
    first, second = parents("127.0.0.2"), parents("127.0.0.3")
    p = proxy_factory(
        proxy={"upstream_proxy": ["http://" + first.address, "http://" + second.address]},
        extra_config=cred(CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass", **binding))
    answers = []
    with requests.Session() as s:
        s.trust_env = False
        for i in range(40):
            if i == 20:
                first.stop()
            r = get(p, ags.query_url() + "?f=json&i=%d" % i, s)
            answers.append((r.status_code, r.text if r.status_code != 200 or '"features"' not in r.text else "features"))
    return p, answers


def test_a_parent_failover_keeps_the_referer_bound_token(proxy_factory, ags, parents):
    p, answers = failover_run(proxy_factory, ags, parents)
    assert all(s == 200 and "features" in t for s, t in answers), [a for a in answers if a[0] != 200][:3]
    assert not any("498" in t or "Invalid token" in t for _, t in answers)
    seen = queries(ags)
    assert {e["client"] for e in seen} == {"127.0.0.2", "127.0.0.3"}
    # The same token before and after the failover: no rejection, no second token request.
    assert len({e["token"] for e in seen}) == 1
    assert ags.stats()["rejected_498"] == 0, ags.stats()
    assert len(generate_calls(ags)) == 1, ags.token_calls()


def test_with_requestip_the_same_failover_invalidates_the_token(proxy_factory, ags, parents):
    """The failure mode the referer binding removes: the requestip token dies with the first parent."""
    p, answers = failover_run(proxy_factory, ags, parents, client="requestip")
    reasons = [e.get("reason") for e in queries(ags) if e["outcome"] == "498"]
    assert "ip_mismatch" in reasons, queries(ags)[-5:]
    assert len(generate_calls(ags)) == 2, ags.token_calls()
    # (The proxy's refresh and replay hide it from this client; in a fleet sharing the token it is a 498 loop.)
    assert all(s == 200 for s, _ in answers)


def test_federated_server_tokens_keep_the_credentials_referer(proxy_factory):
    """A password login at the portal and the exchange for the server's token: both bound to the synthetic referer;
    the exchange itself carries the portal token's Referer (the test portal checks it as any use of the token)."""
    portal = ArcGISServer(role="portal", ttl=600).start()
    server = ArcGISServer(role="server", ttl=600).start()
    try:
        federate(portal, server)
        p = proxy_factory(extra_config=cred(
            CRED, "arcgis-token", [server.server_root, portal.portal_url], username="alice", password="alice-pass"))
        for i in range(3):
            r = get(p, server.query_url() + "?f=json&i=%d" % i)
            assert r.status_code == 200 and "features" in r.text, r.text[:300]
        calls = portal.token_calls()
        assert [c["kind"] for c in calls if c["ok"]] == ["generate_password", "generate_federated"], calls
        assert not [c for c in calls if not c["ok"]], calls
        assert {e["referer"] for e in queries(server)} == {SYNTHETIC}
        # The portal token works at the portal with that referer too.
        r = get(p, portal.sharing_url + "/portals/self?f=json")
        assert r.status_code == 200 and "error" not in r.json(), r.text[:300]
    finally:
        server.stop()
        portal.stop()


def test_a_configured_referer_is_used_as_before(proxy_factory, ags):
    p = proxy_factory(extra_config=cred(
        CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass",
        referer="https://maps.example.com/viewer"))
    r = get(p, ags.query_url() + "?f=json")
    assert r.status_code == 200 and "features" in r.text, r.text[:300]
    assert {e["referer"] for e in queries(ags)} == {"https://maps.example.com/viewer"}


def check(tmp_path, extra, proxy=None):
    psec = harness.default_proxy_section(harness.free_port(), str(tmp_path / "state"))
    psec["state_key"] = "binding-state-key-0123456789abcdef"
    psec.update(proxy or {})
    cfg = tmp_path / "check.toml"
    cfg.write_text(harness.render_config(psec, harness.default_log_section()) + extra)
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_check_warns_when_requestip_meets_a_fleet_or_several_parents(proxy_binary, tmp_path):
    ip = cred(CRED, "arcgis-token", "https://gis.example.com/arcgis", username="u", password="p", client="requestip")
    bound = cred(CRED, "arcgis-token", "https://gis.example.com/arcgis", username="u", password="p")
    fleet = cluster_section("redis://127.0.0.1:6399/0")

    r = check(tmp_path, fleet + ip)
    assert "warning: credential '%s': client = \"requestip\"" % CRED in r.stderr, r.stderr
    assert "[cluster]" in r.stderr
    r = check(tmp_path, ip, proxy={"upstream_proxy": ["http://127.0.0.1:1", "http://127.0.0.1:2"]})
    assert "client = \"requestip\"" in r.stderr and "upstream_proxy" in r.stderr, r.stderr
    # No warning without a fleet or a second parent, nor for the referer binding.
    assert "requestip" not in check(tmp_path, ip, proxy={"upstream_proxy": "http://127.0.0.1:1"}).stderr
    r = check(tmp_path, fleet + bound, proxy={"upstream_proxy": ["http://127.0.0.1:1", "http://127.0.0.1:2"]})
    assert "requestip" not in r.stderr, r.stderr
    # The summary says what the tokens are bound to.
    assert "client=referer (referer %s, synthetic)" % SYNTHETIC in r.stdout, r.stdout


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_the_bound_referer_goes_on_every_path_the_token_takes(proxy_factory, client):
    """A long GET sent as a form, a GET the front end refuses 414 and that goes again as a form, a POST replayed with
    a fresh token after a 498, and the /proxy endpoint of browser apps: each request that carried the token carried
    the credential's referer instead of the client's, and the server (which enforces it) accepted each."""
    ags = ArcGISServer(role="server", ttl=600, max_url_bytes=3000).start()
    app = "http://maps.example.test:8080"
    try:
        p = proxy_factory(
            proxy={"http_client": client, "allowed_origins": [app], "get_as_post_above_bytes": 2000},
            extra_config=cred(CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
        with requests.Session() as s:
            s.trust_env = False
            long_where = "OBJECTID IN (%s)" % ",".join(str(i) for i in range(600))
            r = s.get(ags.query_url(), params={"where": long_where, "f": "json"}, proxies=p.proxies, timeout=30,
                      headers={"Referer": CLIENT_REFERER})
            assert r.status_code == 200 and "features" in r.text, r.text[:300]
            ags.expire_all()
            r = s.post(ags.query_url(), data={"where": "1=1", "f": "json"}, proxies=p.proxies, timeout=30,
                       headers={"Referer": CLIENT_REFERER})
            assert r.status_code == 200 and "features" in r.text, r.text[:300]
            r = s.get(p.url + "/proxy?" + ags.query_url() + "?f=json&where=1%3D1", timeout=30,
                      headers={"Origin": app, "Referer": app + "/index.html"})
            assert r.status_code == 200 and "features" in r.text, r.text[:300]
        seen = queries(ags)
        assert [e["method"] for e in seen] == ["POST", "POST", "POST", "GET"], seen
        assert [e["outcome"] for e in seen] == ["ok", "498", "ok", "ok"], seen
        assert {e["referer"] for e in seen if e.get("token")} == {SYNTHETIC}, seen
        assert len(generate_calls(ags)) == 2
    finally:
        ags.stop()


def test_the_414_resend_carries_the_referer(proxy_factory):
    ags = ArcGISServer(role="server", ttl=600, max_url_bytes=3000).start()
    try:
        p = proxy_factory(proxy={"get_as_post_above_bytes": 100000}, extra_config=cred(
            CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
        long_where = "OBJECTID IN (%s)" % ",".join(str(i) for i in range(600))
        r = requests.get(ags.query_url(), params={"where": long_where, "f": "json"}, proxies=p.proxies, timeout=30,
                         headers={"Referer": CLIENT_REFERER})
        assert r.status_code == 200 and "features" in r.text, r.text[:300]
        seen = queries(ags)
        assert [(e["method"], e["referer"]) for e in seen] == [("POST", SYNTHETIC)], seen
        assert [e for e in ags.request_log() if e.get("status") == 414], ags.request_log()
    finally:
        ags.stop()


def test_a_token_saved_with_requestip_is_not_reused_after_the_binding_changes(proxy_factory, ags, tmp_path):
    """Upgrading (or removing client = "requestip") changes the binding: the saved token is bound to an address, so
    the restarted proxy fetches a referer-bound one instead of sending the old one with a referer."""
    state = tmp_path / "binding-state"
    state.mkdir()
    old = proxy_factory(proxy={"state_dir": str(state)}, extra_config=cred(
        CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass", client="requestip"))
    assert get(old, ags.query_url() + "?f=json").status_code == 200
    old.stop()
    assert CRED in (state / "tokens.json").read_text()
    new = proxy_factory(proxy={"state_dir": str(state)}, extra_config=cred(
        CRED, "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
    r = get(new, ags.query_url() + "?f=json")
    assert r.status_code == 200 and "features" in r.text, r.text[:300]
    seen = queries(ags)
    assert len(generate_calls(ags)) == 2, ags.token_calls()
    assert [e["outcome"] for e in seen] == ["ok", "ok"] and seen[0]["token"] != seen[1]["token"], seen
    assert [e["referer"] for e in seen] == [CLIENT_REFERER, SYNTHETIC], seen
