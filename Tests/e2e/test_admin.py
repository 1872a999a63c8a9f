"""The admin listener: /metrics with exact counter values (parsed with prometheus-client's own parser),
/readyz with prefetching credentials, /healthz, the status page rendered by headless Chromium and status.json
(no secret anywhere), and the listener's access rules."""
import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

import harness
from harness import cred
from arcgis import ArcGISServer
from test_credentials import via


def admin_section(port, allow=None):
    s = '\n[admin]\nlisten = "127.0.0.1:%d"\n' % port
    if allow is not None:
        s += "allow = [%s]\n" % ", ".join(json.dumps(a) for a in allow)
    return s


def start_with_admin(proxy_factory, config, allow=None, **kw):
    for _ in range(3):
        port = harness.free_port()
        p = proxy_factory(extra_config=admin_section(port, allow) + config, **kw)
        if p.wait_for_log(lambda l: "admin listener" in l, timeout=5):
            p.admin = "http://127.0.0.1:%d" % port
            return p
    pytest.fail("admin listener did not start")


def admin_get(p, path, **kw):
    s = requests.Session()
    s.trust_env = False
    return s.get(p.admin + path, timeout=10, **kw)


def samples(p):
    """{(name, frozenset(labels.items())): value} of every sample in /metrics."""
    r = admin_get(p, "/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(smp, name, **labels):
    return smp.get((name, frozenset(labels.items())), 0.0)


def connect_from(source_ip, port):
    """Opens a connection to the proxy from `source_ip` and returns what the proxy did (b'' when it closed)."""
    s = socket.socket()
    s.bind((source_ip, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    try:
        s.sendall(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
        return s.recv(100)
    except (ConnectionResetError, BrokenPipeError):
        return b""
    finally:
        s.close()


# ---------------------------------------------------------------------------------------------------------
# /metrics
# ---------------------------------------------------------------------------------------------------------

def test_metrics_count_exactly_what_happened(proxy_factory, origin, ags, session):
    bad = ArcGISServer(role="server", ttl=60).start()
    try:
        config = (cred("k", "api-key", origin.url + "/echo", key="KEY-SECRET-1")
                  + "rate_limit = { requests = 3, per_seconds = 3600 }\n"
                  + cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass")
                  + cred("bad", "arcgis-token", bad.server_root, username="alice", password="wrong-pass"))
        p = start_with_admin(proxy_factory, config,
                             proxy={"allow_clients": ["127.0.0.1/32"]})
        before = samples(p)
        assert value(before, "authproxy_requests_total", credential="k", method="GET", status_class="2xx") == 0

        # 3 requests within the api-key credential's rate limit, then one refused (429).
        for _ in range(3):
            assert via(p, session, "GET", origin.url + "/echo?f=json").status_code == 200
        assert via(p, session, "GET", origin.url + "/echo?f=json").status_code == 429
        # An unmatched request.
        assert via(p, session, "POST", origin.url + "/json", data=b"x" * 1000).status_code == 200
        # arcgis-token: a token, then a 498 absorbed by a refresh and one retry.
        url = ags.query_url() + "?f=json"
        assert via(p, session, "GET", url).status_code == 200
        ags.expire_all()
        r = via(p, session, "GET", url)
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        # A credential whose token request fails (wrong password): 502.
        assert via(p, session, "GET", bad.query_url() + "?f=json").status_code == 502
        # A client address outside allow_clients: closed at accept.
        assert connect_from("127.0.0.2", int(p.authority.rsplit(":", 1)[1])) == b""

        deadline = time.time() + 5
        while True:
            m = samples(p)
            if value(m, "authproxy_denied_total", reason="client_address") >= 1 or time.time() > deadline:
                break
            time.sleep(0.1)
        assert value(m, "authproxy_requests_total", credential="k", method="GET", status_class="2xx") == 3
        assert value(m, "authproxy_requests_total", credential="k", method="GET", status_class="4xx") == 1
        assert value(m, "authproxy_rate_limited_total", credential="k", reason="rate") == 1
        assert value(m, "authproxy_requests_total", credential="none", method="POST", status_class="2xx") == 1
        assert value(m, "authproxy_requests_total", credential="gis", method="GET", status_class="2xx") == 2
        assert value(m, "authproxy_token_requests_total", credential="gis", result="success") == 2
        assert value(m, "authproxy_token_rejections_total", credential="gis") == 1
        assert value(m, "authproxy_retries_total", credential="gis", result="success") == 1
        assert value(m, "authproxy_token_requests_total", credential="bad", result="failure") == 1
        assert value(m, "authproxy_requests_total", credential="bad", method="GET", status_class="5xx") == 1
        assert value(m, "authproxy_denied_total", reason="client_address") == 1
        assert value(m, "authproxy_bytes_total", direction="upstream") >= 1000
        assert value(m, "authproxy_bytes_total", direction="downstream") > 0
        expiry = value(m, "authproxy_token_expiry_timestamp_seconds", credential="gis", root=ags.server_root)
        assert time.time() + 30 < expiry < time.time() + 3700, expiry
        assert value(m, "authproxy_request_duration_seconds_count", phase="total") == 9
        assert value(m, "authproxy_request_duration_seconds_count", phase="upstream_first_byte") >= 6
        # Labels never carry a path, a query or a secret.
        text = admin_get(p, "/metrics").text
        for forbidden in ["/echo", "f=json", "KEY-SECRET-1", "alice-pass", "wrong-pass", "query"]:
            assert forbidden not in text, forbidden
    finally:
        bad.stop()


def test_live_gauges_are_read_when_scraped(proxy_factory, origin, session):
    p = start_with_admin(proxy_factory, "")
    conns = [socket.create_connection(("127.0.0.1", int(p.authority.rsplit(":", 1)[1]))) for _ in range(3)]
    try:
        deadline = time.time() + 5
        while value(samples(p), "authproxy_client_connections") < 3 and time.time() < deadline:
            time.sleep(0.05)
        assert value(samples(p), "authproxy_client_connections") == 3
    finally:
        for c in conns:
            c.close()
    deadline = time.time() + 5
    while value(samples(p), "authproxy_client_connections") != 0 and time.time() < deadline:
        time.sleep(0.05)
    assert value(samples(p), "authproxy_client_connections") == 0
    assert value(samples(p), "authproxy_tunnels") == 0


# ---------------------------------------------------------------------------------------------------------
# /healthz, /readyz, prefetch
# ---------------------------------------------------------------------------------------------------------

def test_readyz_waits_for_prefetched_tokens(proxy_factory, ags):
    ags.set_password("alice", "other")  # the token service refuses alice-pass for now
    p = start_with_admin(proxy_factory, cred("gis", "arcgis-token", ags.server_root, username="alice",
                                              password="alice-pass", prefetch=True))
    assert admin_get(p, "/healthz").status_code == 200
    assert harness.healthz("127.0.0.1", int(p.authority.rsplit(":", 1)[1]))  # still on the proxy port too
    r = admin_get(p, "/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["ready"] is False and "gis" in body["reasons"][0], body
    assert "alice-pass" not in r.text
    # The token service accepts the password again: prefetching retries after its backoff, with no request.
    ags.set_password("alice", "alice-pass")
    deadline = time.time() + 10
    while admin_get(p, "/readyz").status_code != 200 and time.time() < deadline:
        time.sleep(0.2)
    assert admin_get(p, "/readyz").json() == {"ready": True}
    assert len(ags.token_calls()) >= 2  # refused, then accepted: fetched with no request
    calls = len(ags.token_calls())
    time.sleep(1.5)
    assert len(ags.token_calls()) == calls  # a valid token is not fetched again


def test_prefetch_with_a_host_alone_as_match_is_ready_and_warned(proxy_factory, tmp_path):
    """match = the origin alone (a host serving /arcgis and /portal): which root a request needs shows only in
    its path, so prefetch has nothing to fetch ahead. /readyz stayed 503 for ever ('…/rest/info answered HTTP
    404') while requests worked; now it is ready, check and serve say why nothing is prefetched, and the
    server root given as a second prefix is still prefetched."""
    s = ArcGISServer(role="both", ttl=600, federate_self=True).start()
    try:
        block = cred("gis", "arcgis-token", [s.url, s.server_root], username="alice", password="alice-pass",
                     prefetch=True)
        p = start_with_admin(proxy_factory, block)
        deadline = time.time() + 10
        while admin_get(p, "/readyz").status_code != 200 and time.time() < deadline:
            time.sleep(0.2)
        assert admin_get(p, "/readyz").json() == {"ready": True}
        assert len(s.token_calls()) >= 1            # the server root was prefetched
        assert p.wait_for_log(lambda l: "prefetch cannot fetch a token ahead" in l and s.url in l)
        conf = tmp_path / "check.conf"
        conf.write_text('[proxy]\nlisten = ["127.0.0.1:%d"]\n' % harness.free_port() + block)
        r = subprocess.run([harness.proxy_bin(), "check", "--config", str(conf)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert "prefetch cannot fetch a token ahead for match %s" % s.url in r.stderr, r.stderr
    finally:
        s.stop()


def test_prefetch_refreshes_before_expiry_without_requests(proxy_factory):
    s = ArcGISServer(role="server", ttl=2).start()  # 2-minute tokens: refresh margin 12 s
    try:
        p = start_with_admin(proxy_factory, cred("gis", "arcgis-token", s.server_root, username="alice",
                                                  password="alice-pass", prefetch=True, expiration_minutes=2))
        deadline = time.time() + 10
        while admin_get(p, "/readyz").status_code != 200 and time.time() < deadline:
            time.sleep(0.2)
        assert admin_get(p, "/readyz").status_code == 200
        assert len(s.token_calls()) == 1
        status = admin_get(p, "/status.json").json()
        gis = [c for c in status["credentials"] if c["name"] == "gis"][0]
        assert gis["tokens"][0]["state"] == "valid" and gis["tokens"][0]["validUntil"], gis
    finally:
        s.stop()


def test_readyz_is_503_once_shutdown_begins(proxy_factory, origin):
    p = start_with_admin(proxy_factory, "", proxy={"shutdown_grace_seconds": 5})
    # An open exchange keeps the proxy in its grace period.
    c = socket.create_connection(("127.0.0.1", int(p.authority.rsplit(":", 1)[1])))
    c.sendall(("GET %s/stall?s=3 HTTP/1.1\r\nHost: %s\r\n\r\n" % (origin.url, origin.authority)).encode())
    time.sleep(0.3)
    p.signal(15)
    deadline = time.time() + 3
    status = None
    while time.time() < deadline:
        try:
            status = admin_get(p, "/readyz").status_code
            if status == 503:
                break
        except requests.ConnectionError:
            break
        time.sleep(0.05)
    c.close()
    assert status == 503


# ---------------------------------------------------------------------------------------------------------
# Access to the admin listener
# ---------------------------------------------------------------------------------------------------------

def test_admin_listener_is_separate_and_honours_allow(proxy_factory, session):
    p = start_with_admin(proxy_factory, "", allow=["10.9.0.0/16"])
    with pytest.raises(requests.ConnectionError):
        admin_get(p, "/metrics")
    assert p.wait_for_log(lambda l: "admin connection refused" in l)
    # The proxy port does not serve the admin pages.
    port = int(p.authority.rsplit(":", 1)[1])
    r = session.get("http://127.0.0.1:%d/metrics" % port, timeout=5)
    assert r.status_code != 200 or "authproxy_requests_total" not in r.text


def test_admin_routes_and_methods(proxy_factory):
    p = start_with_admin(proxy_factory, "")
    assert admin_get(p, "/nope").status_code == 404
    s = requests.Session()
    s.trust_env = False
    r = s.post(p.admin + "/metrics", timeout=5)
    assert r.status_code == 405 and "GET" in r.headers["Allow"]
    r = s.head(p.admin + "/status.json", timeout=5)
    assert r.status_code == 200 and r.content == b""


def test_admin_address_must_differ_from_the_proxy_listener(proxy_binary, tmp_path):
    port = harness.free_port()
    cfg = tmp_path / "p.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:%d"]\n[admin]\nlisten = "127.0.0.1:%d"\n' % (port, port))
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode == 2 and "admin.listen" in (r.stderr + r.stdout)


def test_serve_listen_option_moves_the_proxy_off_the_admin_port(proxy_factory, tmp_path):
    """`serve --listen` replaces [proxy] listen, also for the admin port check: a file whose [proxy] listen shares
    the admin port starts when --listen moves the proxy elsewhere, and one that does not, when --listen takes
    the admin port, is refused naming --listen."""
    shared = harness.free_port()
    own = harness.free_port()
    text = '[proxy]\nlisten = ["127.0.0.1:%d"]\nstate_dir = "%s"\n[admin]\nlisten = "127.0.0.1:%d"\n' % (
        shared, tmp_path / "st", shared)
    cfg = tmp_path / "moved.toml"
    cfg.write_text(text)
    p = subprocess.Popen([harness.proxy_bin(), "serve", "--config", str(cfg), "--listen", "127.0.0.1:%d" % own],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=harness.clean_env(),
                         stdin=subprocess.DEVNULL)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                r = requests.get("http://127.0.0.1:%d/healthz" % shared, timeout=2)
                if r.status_code == 200:
                    break
            except requests.ConnectionError:
                assert p.poll() is None, p.stdout.read()
            time.sleep(0.1)
        assert requests.get("http://127.0.0.1:%d/healthz" % shared, timeout=2).status_code == 200
    finally:
        p.terminate()
        p.wait(timeout=20)
    other = tmp_path / "other.toml"
    other.write_text(text.replace('listen = ["127.0.0.1:%d"]' % shared, 'listen = ["127.0.0.1:%d"]' % own))
    r = subprocess.run([harness.proxy_bin(), "serve", "--config", str(other), "--listen", "127.0.0.1:%d" % shared],
                       capture_output=True, text=True, env=harness.clean_env(), stdin=subprocess.DEVNULL, timeout=20)
    assert r.returncode == 2 and "overlaps a --listen address" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------------
# The status page and status.json
# ---------------------------------------------------------------------------------------------------------

def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium is needed (Debian package chromium; scripts/test.sh installs it)")


def test_status_page_in_headless_chromium_shows_credentials_and_no_secret(proxy_factory, origin, ags, session, tmp_path):
    config = (cred("k", "api-key", origin.url + "/echo", key="KEY-SECRET-XYZ")
              + cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
    p = start_with_admin(proxy_factory, config)
    assert via(p, session, "GET", origin.url + "/echo?f=json").status_code == 200
    assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
    used_tokens = {e["token"] for e in ags.request_log() if e.get("token")}
    assert used_tokens

    shot = tmp_path / "status.png"
    browser = chromium()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-proxy-server", "--user-data-dir=%s" % (tmp_path / "chr")]
    subprocess.run([browser, *flags, "--window-size=1280,900", "--screenshot=%s" % shot, p.admin + "/"],
                   capture_output=True, timeout=120, check=True)
    assert shot.exists() and shot.stat().st_size > 5000
    dom = subprocess.run([browser, *flags, "--dump-dom", p.admin + "/"], capture_output=True, timeout=120,
                         check=True).stdout.decode()
    assert 'data-name="k"' in dom and 'data-name="gis"' in dom
    assert 'data-state="valid"' in dom
    assert ags.server_root in dom
    assert 'id="readiness" class="ok"' in dom

    status = admin_get(p, "/status.json")
    assert status.status_code == 200
    doc = status.json()
    gis = [c for c in doc["credentials"] if c["name"] == "gis"][0]
    assert gis["type"] == "arcgis-token" and gis["tokens"][0]["state"] == "valid"
    assert gis["requestsLast5Min"] == 1
    k = [c for c in doc["credentials"] if c["name"] == "k"][0]
    assert k["requestsLast5Min"] == 1 and k["match"] == [origin.url + "/echo"]
    # How many event loops run, and on how many usable CPUs (the default workers counts the affinity mask).
    # (a cgroup CPU limit on the test machine may count fewer than the affinity mask).
    m = re.match(r"(\d+) usable CPUs? \((\d+) online", doc["cpus"])
    assert m, doc["cpus"]
    usable = int(m.group(1))
    assert 1 <= usable <= len(os.sched_getaffinity(p.pid)) <= int(m.group(2)), doc["cpus"]
    assert doc["workers"] == harness.default_workers(usable), doc
    assert 'id="workers"' in dom and "%d event loops" % doc["workers"] in dom
    page = admin_get(p, "/").text
    for text in (dom, page, status.text):
        for secret in ["KEY-SECRET-XYZ", "alice-pass", *used_tokens]:
            assert secret not in text
            assert secret[:8] not in text  # not even a prefix


# ---------------------------------------------------------------------------------------------------------
# Network authentication outcomes (real Apache httpd: Basic, Digest, NTLM)
# ---------------------------------------------------------------------------------------------------------

from netauth.fixtures import netauth_rig  # noqa: E402,F401  (fixture)


def test_network_auth_outcomes_are_counted_and_shown(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    config = (cred("basic", "password", rig.basic.url, username="alice", password="alice-pw", allow_basic_over_http=True)
              + cred("digest", "password", rig.digest.url, username="alice", password="WRONG-PW")
              + cred("ntlm", "password", rig.ntlm.url, username="alice", password="alice-pw", domain="TESTDOM"))
    p = start_with_admin(proxy_factory, config)
    assert via(p, session, "GET", rig.basic.url + "secret").status_code == 200
    assert via(p, session, "GET", rig.ntlm.url + "secret").status_code == 200
    assert via(p, session, "GET", rig.digest.url + "secret").status_code == 401
    m = samples(p)
    assert value(m, "authproxy_network_auth_total", credential="basic", scheme="basic", result="success") == 1
    assert value(m, "authproxy_network_auth_total", credential="ntlm", scheme="ntlm", result="success") == 1
    assert value(m, "authproxy_network_auth_total", credential="digest", scheme="digest", result="failure") == 1
    assert value(m, "authproxy_requests_total", credential="digest", method="GET", status_class="4xx") == 1
    doc = admin_get(p, "/status.json").json()
    digest = [c for c in doc["credentials"] if c["name"] == "digest"][0]
    assert digest["networkAuth"] == [{"scheme": "digest", "successes": 0, "failures": 1,
                                      "last": digest["networkAuth"][0]["last"], "lastSucceeded": False}]
    page = admin_get(p, "/").text
    assert 'id="network-auth"' in page
    for secret in ("alice-pw", "WRONG-PW"):
        assert secret not in page and secret not in json.dumps(doc) and secret not in admin_get(p, "/metrics").text


# ---------------------------------------------------------------------------------------------------------
# POST /reload
# ---------------------------------------------------------------------------------------------------------

def test_post_reload_applies_or_rejects_and_is_counted(proxy_factory, origin, session):
    from test_reload import echo_token, rewrite
    p = start_with_admin(proxy_factory, cred("k", "api-key", origin.url + "/", key="FIRST-KEY"))
    assert echo_token(p, origin, session) == "FIRST-KEY"
    s = requests.Session()
    s.trust_env = False
    assert s.get(p.admin + "/reload", timeout=10).status_code == 405
    rewrite(p, p.config_text.replace("FIRST-KEY", "SECOND-KEY"))
    r = s.post(p.admin + "/reload", headers={"X-Authproxy-Reload": "1"}, timeout=10)
    assert r.status_code == 200 and r.json()["applied"] is True, r.text
    assert "changed k" in r.json()["message"] and "SECOND-KEY" not in r.text
    assert echo_token(p, origin, session) == "SECOND-KEY"
    rewrite(p, p.config_text + "\n[proxy]\nbogus = 1\n")
    r = s.post(p.admin + "/reload", headers={"X-Authproxy-Reload": "1"}, timeout=10)
    assert r.status_code == 422 and r.json()["applied"] is False, r.text
    assert "line" in r.json()["message"]
    assert echo_token(p, origin, session) == "SECOND-KEY"
    m = samples(p)
    assert value(m, "authproxy_config_reloads_total", result="applied") == 1
    assert value(m, "authproxy_config_reloads_total", result="rejected") == 1
    doc = admin_get(p, "/status.json").json()
    assert doc["lastReload"]["applied"] is False and "POST /reload" in doc["lastReload"]["message"]
    assert "SECOND-KEY" not in json.dumps(doc) and "FIRST-KEY" not in json.dumps(doc)
