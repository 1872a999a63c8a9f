"""[cluster]: a fleet of real authproxy replicas sharing their tokens through one real Redis (Debian's
redis-server, started here on loopback), against the ArcGIS test server."""
import concurrent.futures
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer

REDIS_PASSWORD = "fleet-redis-pass-7Qx"
STATE_KEY = "fleet-state-key-0123456789abcdef"
# Distinctive, so finding it in Redis cannot be chance (a short name could turn up inside base64).
CRED_NAME = "fleetcredQZ"
REPLICAS = int(os.environ.get("FLEET_REPLICAS", "5"))

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server (Debian package) is not installed")


class RedisServer:
    """redis-server on a free loopback port with its own directory, no persistence, a password."""

    def __init__(self, tmp, password=REDIS_PASSWORD):
        self.dir = tmp / "redis"
        self.dir.mkdir(exist_ok=True)
        self.password = password
        self.port = harness.free_port()
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--appendonly", "no", "--requirepass", self.password,
             "--logfile", str(self.dir / "redis.log"), "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.cli("PING").strip() == "PONG":
                return self
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start: " + (self.dir / "redis.log").read_text())

    def cli(self, *args):
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port), "-a", self.password,
                            "--no-auth-warning", *args], capture_output=True, text=True, timeout=10)
        return r.stdout

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def url(self, password=None):
        return "redis://:%s@127.0.0.1:%d/0" % (password or self.password, self.port)

    def keys(self):
        return [k for k in self.cli("--scan").split("\n") if k]


def port_is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class RedisRelay:
    """A loopback relay in front of Redis, for a replica to reach it through.

    - Armed (`armed = True`), it holds every lock attempt (`SET … NX`) back for `delay` seconds before passing it on
      (`delay_everything`: every command, a slow Redis). That widens the moment between a replica's look at the token
      key and its lock (two round trips, microseconds apart on an idle machine) so that another replica's whole
      token request can be made to fall inside it.
    - `cut()` cuts every connection and refuses new ones until `restore()`: one replica loses Redis (commands and
      notices) while the others keep it."""

    def __init__(self, redis_port, delay=0):
        self.redis_port = redis_port
        self.delay = delay
        self.armed = False
        self.delay_everything = False
        self.held = 0
        self.cut_off = False
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.socks = []

    def start(self):
        self.lsock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            if self.cut_off:
                c.close()
                continue
            u = socket.create_connection(("127.0.0.1", self.redis_port), timeout=10)
            u.settimeout(None)
            self.socks += [c, u]
            threading.Thread(target=self._pump, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, False), daemon=True).start()

    def _pump(self, src, dst, to_redis):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if to_redis and self.armed and (self.delay_everything or b"\r\n$2\r\nNX\r\n" in data):
                    self.held += 1
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.cut_off = True
        for s in self.socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.socks = []

    def restore(self):
        self.cut_off = False

    def stop(self):
        self.cut()
        self.lsock.close()


@pytest.fixture
def redis_server(tmp_path):
    r = RedisServer(tmp_path).start()
    yield r
    r.stop()


@pytest.fixture
def ags_fleet():
    s = ArcGISServer(role="server", ttl=600).start()
    yield s
    s.stop()


def cluster_section(redis_url, **extra):
    lines = ["[cluster]", 'redis = "%s"' % redis_url]
    for k, v in extra.items():
        lines.append("%s = %s" % (k, harness._toml_value(v)))
    return "\n".join(lines) + "\n"


def start_fleet(proxy_factory, ags, redis_url, n=REPLICAS, **cluster):
    extra = cluster_section(redis_url, **cluster) + cred(
        CRED_NAME, "arcgis-token", ags.server_root, username="alice", password="alice-pass")
    return [proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1}, extra_config=extra) for _ in range(n)]


def get(p, url, session=None):
    return (session or requests).get(url, proxies=p.proxies, timeout=30)


def wait_connected(fleet, times=1, timeout=15):
    deadline = time.time() + timeout
    for p in fleet:
        while p.log_text().count("Redis connected") < times:
            assert time.time() < deadline, p.log_text()[-2000:]
            time.sleep(0.05)


def generate_calls(ags):
    return len([c for c in ags.token_calls() if c["endpoint"].endswith("generateToken")])


def test_the_first_request_on_each_replica_makes_one_token_request_in_all(proxy_factory, ags_fleet, redis_server):
    fleet = start_fleet(proxy_factory, ags_fleet, redis_server.url())
    wait_connected(fleet)
    for p in fleet:
        r = get(p, ags_fleet.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    assert generate_calls(ags_fleet) == 1, ags_fleet.token_calls()
    logs = "".join(p.log_text() for p in fleet)
    assert logs.count("token taken from the fleet's shared store") == REPLICAS - 1


def test_after_a_forced_expiry_500_concurrent_requests_over_the_fleet_make_one_token_request(
        proxy_factory, ags_fleet, redis_server):
    fleet = start_fleet(proxy_factory, ags_fleet, redis_server.url())
    wait_connected(fleet)
    for p in fleet:
        assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200
    ags_fleet.expire_all()
    ags_fleet.reset_stats()
    sessions = [requests.Session() for _ in fleet]
    for s in sessions:
        s.trust_env = False

    def one(i):
        k = i % len(fleet)
        r = get(fleet[k], ags_fleet.query_url() + "?f=json&i=%d" % i, sessions[k] if False else None)
        return r.status_code, ("features" in r.json()) if r.status_code == 200 else r.text[:200]

    with concurrent.futures.ThreadPoolExecutor(max_workers=40) as pool:
        results = list(pool.map(one, range(500)))
    failed = [r for r in results if r != (200, True)]
    assert not failed, failed[:5]
    assert generate_calls(ags_fleet) == 1, ags_fleet.token_calls()


def test_a_lock_taken_just_after_another_replica_wrote_its_token_takes_that_token(
        proxy_factory, ags_fleet, redis_server):
    # Replica b reaches Redis through the relay: its lock attempts arrive 3 s late (its operation timeout allows it).
    relay = RedisRelay(redis_server.port, delay=3.0).start()
    try:
        via_relay = redis_server.url().replace(":%d/" % redis_server.port, ":%d/" % relay.port)
        [a] = start_fleet(proxy_factory, ags_fleet, redis_server.url(), n=1)
        [b] = start_fleet(proxy_factory, ags_fleet, via_relay, n=1, timeout_ms=10000)
        wait_connected([a, b])
        for p in (a, b):
            assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200
        assert generate_calls(ags_fleet) == 1, ags_fleet.token_calls()
        ags_fleet.expire_all()
        ags_fleet.reset_stats()
        relay.armed = True
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            # b meets the rejection, finds no token in Redis, and its lock attempt is held in the relay...
            later = pool.submit(get, b, ags_fleet.query_url() + "?f=json")
            deadline = time.time() + 10
            while relay.held < 1:
                assert time.time() < deadline, b.log_text()[-2000:]
                time.sleep(0.02)
            # ...while a takes the lock, fetches, writes its token and releases the lock.
            r = get(a, ags_fleet.query_url() + "?f=json")
            assert r.status_code == 200 and r.json().get("features"), r.text[:300]
            assert relay.held == 1  # b's lock has not reached Redis yet: it comes through only now
            r = later.result()
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
        # b's lock went through (nobody held it any more), yet a's token was there: no second token request.
        assert generate_calls(ags_fleet) == 1, ags_fleet.token_calls()
        assert b.log_text().count("token taken from the fleet's shared store") == 2, b.log_text()[-3000:]
    finally:
        relay.stop()


def test_a_revocation_seen_by_one_replica_reaches_every_replica_within_a_second(
        proxy_factory, ags_fleet, redis_server):
    fleet = start_fleet(proxy_factory, ags_fleet, redis_server.url())
    wait_connected(fleet)
    for p in fleet:
        assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200
    old = {e.get("token") for e in ags_fleet.request_log() if e.get("outcome") == "ok"}
    assert len(old) == 1, old
    ags_fleet.expire_all()
    ags_fleet.reset_stats()
    # One replica meets the rejection, refreshes and replays.
    r = get(fleet[0], ags_fleet.query_url() + "?f=json")
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    seen = time.time()
    time.sleep(1.0)
    for p in fleet[1:]:
        r = get(p, ags_fleet.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    late = [e for e in ags_fleet.request_log() if e["t"] > seen and e.get("token") in old]
    assert not late, late
    assert generate_calls(ags_fleet) == 1, ags_fleet.token_calls()
    # The newer token stays in Redis: the withdrawal deleted only the rejected one.
    assert len([k for k in redis_server.keys() if ":t:" in k]) == 1, redis_server.keys()
    for p in fleet[1:]:
        assert "token withdrawn by another replica" in p.log_text(), p.log_text()[-2000:]


def test_redis_killed_mid_run_then_restarted(proxy_factory, ags_fleet, redis_server):
    fleet = start_fleet(proxy_factory, ags_fleet, redis_server.url(), n=3)
    wait_connected(fleet)
    for p in fleet:
        assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200
    redis_server.kill()
    # Each replica goes on alone: requests succeed, a forced expiry costs each replica its own token request.
    ags_fleet.expire_all()
    for p in fleet:
        r = get(p, ags_fleet.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    for p in fleet:
        assert p.wait_for_log(lambda l: "Redis cannot be used" in l, timeout=5), p.log_text()[-2000:]
    # One line per change of state, not one per operation.
    for p in fleet:
        assert p.log_text().count("Redis cannot be used") == 1, p.log_text()[-3000:]
    redis_server.start()
    wait_connected(fleet, times=2, timeout=40)
    ags_fleet.expire_all()
    ags_fleet.reset_stats()
    for p in fleet:
        r = get(p, ags_fleet.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    assert generate_calls(ags_fleet) == 1, ags_fleet.token_calls()


def test_a_wrong_redis_password_is_one_clear_warning_and_the_replica_works_alone(
        proxy_factory, ags_fleet, redis_server):
    [p] = start_fleet(proxy_factory, ags_fleet, redis_server.url(password="not-the-password"), n=1)
    for _ in range(3):
        r = get(p, ags_fleet.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
        ags_fleet.expire_all()
    lines = [l for l in p.log_lines() if "Redis cannot be used" in l]
    assert len(lines) == 1, lines
    assert "WRONGPASS" in lines[0] and "password" in lines[0], lines[0]
    assert "not-the-password" not in p.log_text()


def test_a_wrong_password_with_required_makes_the_replica_not_ready(proxy_factory, ags_fleet, redis_server):
    extra = cluster_section(redis_server.url(password="not-the-password"), required=True) + cred(
        CRED_NAME, "arcgis-token", ags_fleet.server_root, username="alice", password="alice-pass")
    admin = harness.free_port()
    extra += '[admin]\nlisten = "127.0.0.1:%d"\n' % admin
    p = proxy_factory(proxy={"state_key": STATE_KEY}, extra_config=extra)
    assert p.wait_for_log(lambda l: "Redis cannot be used" in l and "error" in l.lower(), timeout=5)
    r = requests.get("http://127.0.0.1:%d/readyz" % admin, timeout=5)
    assert r.status_code == 503 and any("Redis" in x for x in r.json()["reasons"]), r.text
    # Still serving on its own.
    assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200


def test_nothing_readable_in_redis(proxy_factory, ags_fleet, redis_server):
    fleet = start_fleet(proxy_factory, ags_fleet, redis_server.url(), n=2)
    wait_connected(fleet)
    for p in fleet:
        assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200
    tokens = {e.get("token") for e in ags_fleet.request_log() if e.get("token")}
    assert tokens
    keys = redis_server.keys()
    assert keys, "nothing was shared"
    dump = "\n".join(keys)
    for k in keys:
        dump += "\n" + redis_server.cli("GET", k)
    for secret in list(tokens) + ["alice", "alice-pass", CRED_NAME, "127.0.0.1", str(ags_fleet.url.rsplit(":", 1)[1]),
                                  STATE_KEY]:
        assert secret not in dump, secret
    assert all(re.fullmatch(r"authproxy:([tlr]:[0-9a-f]{64}|x:[0-9a-f]{64}:[0-9a-f]{32})", k) for k in keys), keys


def test_login_once_serves_every_replica_and_signout_once_stops_them_all(proxy_factory, federation, redis_server, tmp_path):
    from test_token_state import login, last_user
    portal, server = federation
    creds = cluster_section(redis_server.url()) + cred(
        "me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
        portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())
    # `login` runs with a state directory of its own (another machine than any replica's).
    section = harness.default_proxy_section(harness.free_port(), str(tmp_path / "login-state"))
    section["state_key"] = STATE_KEY
    conf = tmp_path / "login.conf"
    conf.write_text(harness.render_config(section, harness.default_log_section()) + creds)
    fleet = [proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1}, extra_config=creds) for _ in range(3)]
    wait_connected(fleet)
    # Nobody signed in yet: every replica says so.
    for p in fleet:
        r = get(p, server.query_url() + "?f=json")
        assert r.status_code == 502 and "no refresh token" in r.text, r.text[:300]
    out = login(conf)
    assert "fleet's Redis" in out, out
    for p in fleet:
        r = get(p, server.query_url() + "?f=json")
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
        assert last_user(server) == "alice"
    # One refresh grant for the whole fleet (the lock): the other replicas took its tokens from Redis.
    refresh = [c for c in portal.token_calls("oauth2.token") if c["kind"] != "oauth_authorization_code"]
    assert len(refresh) == 1, portal.token_calls()
    r = harness.run_cli(["signout", "--config", str(conf), "--credential", "me"])
    assert r.returncode == 0 and "deleted from the fleet's Redis" in r.stdout, r.stdout + r.stderr
    for p in fleet:
        assert p.wait_for_log(lambda l: "refresh token removed from the fleet's store" in l, timeout=5), p.log_text()[-2000:]
        r = get(p, server.query_url() + "?f=json")
        assert r.status_code != 200 or not r.json().get("features"), r.text[:300]


def _tls_material(d):
    """A CA and a server certificate for 127.0.0.1, made with openssl."""
    def ssl(*args):
        r = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    ca_key, ca, key, csr, cert = (str(d / n) for n in ("ca.key", "ca.pem", "srv.key", "srv.csr", "srv.pem"))
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=fleet test CA", "-keyout", ca_key, "-out", ca)
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", key, "-out", csr)
    ext = d / "ext.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-days", "2",
        "-extfile", str(ext), "-out", cert)
    return ca, cert, key


def test_rediss_with_the_test_ca(proxy_factory, ags_fleet, tmp_path):
    ca, cert, key = _tls_material(tmp_path)
    port = harness.free_port()
    rdir = tmp_path / "redis-tls"
    rdir.mkdir()
    proc = subprocess.Popen(
        ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--dir", str(rdir),
         "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
         "--save", "", "--appendonly", "no", "--requirepass", REDIS_PASSWORD, "--daemonize", "no",
         "--logfile", str(rdir / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            r = subprocess.run(["redis-cli", "--tls", "--cacert", ca, "-h", "127.0.0.1", "-p", str(port), "-a",
                                REDIS_PASSWORD, "--no-auth-warning", "PING"], capture_output=True, text=True)
            if r.stdout.strip() == "PONG":
                break
            assert time.time() < deadline, (rdir / "redis.log").read_text()
            time.sleep(0.1)
        url = "rediss://:%s@127.0.0.1:%d/0" % (REDIS_PASSWORD, port)
        fleet = start_fleet(proxy_factory, ags_fleet, url, n=2, ca=ca)
        wait_connected(fleet)
        for p in fleet:
            assert get(p, ags_fleet.query_url() + "?where=1%3D1&f=json").status_code == 200
        assert generate_calls(ags_fleet) == 1, ags_fleet.token_calls()
        # Without the test CA the server's certificate is not trusted: the replica says so and works alone.
        alone = proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1}, extra_config=cluster_section(url) + cred(
            CRED_NAME, "arcgis-token", ags_fleet.server_root, username="alice", password="alice-pass"))
        assert get(alone, ags_fleet.query_url() + "?where=1%3D1&f=json").status_code == 200
        assert alone.wait_for_log(lambda l: "Redis" in l and ("certificate" in l or "TLS" in l or "verify" in l), timeout=10), \
            alone.log_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_rotating_refresh_tokens_are_never_spent_twice_by_the_fleet(proxy_factory, redis_server):
    """An OAuth provider that rotates refresh tokens and treats a reused one as theft (RFC 9700): five replicas
    refreshing together, again and again, never present a spent refresh token, and the fleet makes one refresh
    grant per expiry."""
    from oidc.server import OIDCProvider, ResourceServer
    idp = OIDCProvider(expires_in=60).start()
    ogc = ResourceServer(idp).start()
    try:
        idp.add_client("public-app", methods=["none"])
        seed = idp.issue_refresh_token("public-app")
        extra = cluster_section(redis_server.url()) + cred(
            "ogcfleet", "oauth2", ogc.base + "/ogc", token_url=idp.token_endpoint, client_id="public-app",
            token_endpoint_auth_method="none", grant="refresh_token", refresh_token=seed)
        fleet = [proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1}, extra_config=extra) for _ in range(REPLICAS)]
        wait_connected(fleet)
        for round_ in range(3):
            with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
                results = list(pool.map(lambda i: get(fleet[i % REPLICAS], ogc.items_url()).status_code, range(100)))
            assert results.count(200) == 100, (round_, [r for r in results if r != 200][:5], [(e["outcome"], e.get("error")) for e in idp.token_requests()], [l for p in fleet for l in p.log_text().splitlines() if "token" in l and "access" not in l][:30])
            idp.expire_all()
        log = idp.token_requests()
        assert not any(e.get("refresh_reused") for e in log), log
        assert [e["outcome"] for e in log] == ["ok"] * 3, log
    finally:
        ogc.stop()
        idp.stop()


def test_a_replica_that_reconnects_drops_a_token_withdrawn_while_it_was_away(proxy_factory, ags_fleet, redis_server):
    relay = RedisRelay(redis_server.port).start()
    try:
        a = start_fleet(proxy_factory, ags_fleet, redis_server.url(), n=1)[0]
        b = proxy_factory(proxy={"state_key": STATE_KEY, "workers": 1}, log={"level": "debug"}, extra_config=cluster_section(
            "redis://:%s@127.0.0.1:%d/0" % (REDIS_PASSWORD, relay.port)) + cred(
            CRED_NAME, "arcgis-token", ags_fleet.server_root, username="alice", password="alice-pass"))
        wait_connected([a, b])
        for p in (a, b):
            assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200
        old = {e.get("token") for e in ags_fleet.request_log() if e.get("outcome") == "ok"}
        assert len(old) == 1, old
        relay.cut()
        time.sleep(1.0)  # the notice connection has seen its end
        # Meanwhile the token is revoked; the replica still connected meets it, refreshes and withdraws it.
        ags_fleet.expire_all()
        r = get(a, ags_fleet.query_url() + "?f=json")
        assert r.status_code == 200, r.text[:300]
        relay.restore()
        # The withdrawal's notice was published while B could not hear it: B finds the mark when its notice
        # connection is back (its backoff is a second or two here).
        assert b.wait_for_log(lambda l: "token withdrawn by another replica" in l, timeout=20), (
            redis_server.keys(), [l for l in b.log_text().splitlines() if "Redis" in l or "notice" in l.lower()])
        back = time.time()
        r = get(b, ags_fleet.query_url() + "?f=json")
        assert r.status_code == 200, r.text[:300]
        late = [e for e in ags_fleet.request_log() if e["t"] > back and e.get("token") in old]
        assert not late, late
    finally:
        relay.stop()


def test_the_status_page_and_metrics_show_the_fleet(proxy_factory, ags_fleet, redis_server):
    from test_admin import admin_get, start_with_admin
    config = cluster_section(redis_server.url()) + cred(
        CRED_NAME, "arcgis-token", ags_fleet.server_root, username="alice", password="alice-pass")
    p = start_with_admin(proxy_factory, config, proxy={"state_key": STATE_KEY, "workers": 1})
    wait_connected([p])
    assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200

    def cluster_state():
        return admin_get(p, "/status.json").json()["cluster"]

    def metric(name):
        for line in admin_get(p, "/metrics").text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    c = cluster_state()
    assert c["connected"] is True and "127.0.0.1:%d" % redis_server.port in c["redis"], c
    assert REDIS_PASSWORD not in admin_get(p, "/status.json").text
    assert metric("authproxy_cluster_connected") == 1
    assert "Redis" in admin_get(p, "/").text  # the HTML status page has the fleet's line
    redis_server.kill()
    assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200  # from memory
    ags_fleet.expire_all()
    assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200  # refreshed alone
    deadline = time.time() + 10
    while cluster_state()["connected"] and time.time() < deadline:
        time.sleep(0.2)
    c = cluster_state()
    assert c["connected"] is False and c["problem"], c
    assert metric("authproxy_cluster_connected") == 0
    errors = [l for l in admin_get(p, "/metrics").text.splitlines() if l.startswith("authproxy_cluster_errors_total{")]
    assert errors and any(float(l.rsplit(" ", 1)[1]) > 0 for l in errors), errors


@pytest.mark.parametrize("mode", ["readonly", "cluster"])
def test_a_read_only_replica_or_a_cluster_mode_endpoint_is_named_and_the_replica_works_alone(
        proxy_factory, ags_fleet, redis_server, tmp_path, mode):
    """READONLY (a replica after a failover) and a cluster-mode endpoint: one clear warning naming the cause, and
    requests still served."""
    port = harness.free_port()
    if mode == "cluster":
        # A cluster node also listens on port + 10000 (its bus): an ephemeral port above 55535 has none, and
        # redis-server exits at once.
        while port > 55535 or not port_is_free(port + 10000):
            port = harness.free_port()
    d = tmp_path / ("redis-" + mode)
    d.mkdir()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", "",
            "--appendonly", "no", "--requirepass", REDIS_PASSWORD, "--daemonize", "no"]
    if mode == "readonly":
        args += ["--replicaof", "127.0.0.1", str(redis_server.port), "--masterauth", REDIS_PASSWORD]
    else:
        args += ["--cluster-enabled", "yes", "--cluster-config-file", str(d / "nodes.conf")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "-a", REDIS_PASSWORD, "--no-auth-warning", "PING"],
                             capture_output=True, text=True).stdout.strip() != "PONG":
            assert proc.poll() is None, "redis-server exited: %s" % proc.stderr.read().decode(errors="replace")
            assert time.time() < deadline
            time.sleep(0.05)
        p = start_fleet(proxy_factory, ags_fleet, "redis://:%s@127.0.0.1:%d/0" % (REDIS_PASSWORD, port), n=1)[0]
        assert get(p, ags_fleet.query_url() + "?f=json").status_code == 200
        want = "read-only replica" if mode == "readonly" else "cluster mode is not supported"
        assert p.wait_for_log(lambda l: "Redis cannot be used" in l and want in l, timeout=10), p.log_text()[-2000:]
        assert len([l for l in p.log_lines() if "Redis cannot be used" in l]) == 1, p.log_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_slow_redis_is_given_timeout_ms_and_the_replica_goes_on_alone(proxy_factory, ags_fleet, redis_server):
    """Every Redis operation has `timeout_ms`: a Redis that answers late (here: each command held back 2 s by a
    relay) costs a request at most about that much, and the replica serves on its own."""
    relay = RedisRelay(redis_server.port, delay=5.0).start()
    try:
        url = "redis://:%s@127.0.0.1:%d/0" % (REDIS_PASSWORD, relay.port)
        p = start_fleet(proxy_factory, ags_fleet, url, n=1, timeout_ms=200)[0]
        wait_connected([p])
        relay.armed = True
        relay.delay_everything = True
        t = time.monotonic()
        r = get(p, ags_fleet.query_url() + "?f=json")
        took = time.monotonic() - t
        assert r.status_code == 200 and r.json().get("features"), r.text[:300]
        assert took < 3.5, took  # one command waited out would be 5 s (timeout_ms is 0.2 s)
        assert p.wait_for_log(lambda l: "Redis cannot be used" in l, timeout=5), p.log_text()[-2000:]
    finally:
        relay.stop()
