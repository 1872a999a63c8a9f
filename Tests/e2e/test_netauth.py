"""Network authentication through the real binary against real servers (Tests/e2e/netauth: Apache httpd with
Basic, Digest, NTLM via gss-ntlmssp, Kerberos via an MIT KDC, an IIS-like Negotiate+NTLM vhost, and mutual
TLS). Clients know nothing about authentication: the proxy answers every challenge."""
import hashlib
import os
import subprocess
import threading
import time

import pytest

import harness
from httpraw import RawConn, request_bytes, wait_until
from netauth.fixtures import netauth_big_file, netauth_rig  # noqa: F401  (fixtures)
from harness import cred
from test_credentials import via


def _user(r):
    return r.headers.get("X-Remote-User")


def test_basic_digest_ntlm_with_right_and_wrong_password(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    good = (cred("basic", "password", rig.basic.url, username="alice", password="alice-pw", allow_basic_over_http=True)
            + cred("digest", "password", rig.digest.url, username="alice", password="alice-pw")
            + cred("ntlm", "password", rig.ntlm.url, username="alice", password="alice-pw", domain="TESTDOM"))
    p = proxy_factory(extra_config=good)
    for vhost, user in ((rig.basic, "alice"), (rig.digest, "alice"), (rig.ntlm, "TESTDOM\\alice")):
        r = via(p, session, "GET", vhost.url + "secret")
        assert r.status_code == 200, (vhost.url, r.status_code, r.text[:200])
        assert _user(r) == user
    assert "alice-pw" not in p.log_text()
    # The access log names the network credential applied, as the metrics do.
    for name in ("basic", "digest", "ntlm"):
        assert p.wait_for_log(lambda l: "access" in l and "credential=%s " % name in l + " "), name

    bad = (cred("basic", "password", rig.basic.url, username="alice", password="WRONG", allow_basic_over_http=True)
           + cred("ntlm-wrong", "password", rig.ntlm.url, username="alice", password="WRONG", domain="TESTDOM"))
    q = proxy_factory(extra_config=bad)
    for vhost in (rig.basic, rig.ntlm):
        r = via(q, session, "GET", vhost.url + "secret")
        assert r.status_code == 401, (vhost.url, r.status_code)
        assert r.headers.get("WWW-Authenticate")
    assert q.wait_for_log(lambda l: "upstream refused the network credential" in l and "ntlm-wrong" in l)
    assert "WRONG" not in q.log_text()


def test_basic_is_not_sent_over_http_by_default(proxy_factory, netauth_rig, session):
    """Basic would put the password on the wire in clear: over http it needs allow_basic_over_http."""
    rig = netauth_rig
    p = proxy_factory(extra_config=cred("basic", "password", rig.basic.url, username="alice", password="alice-pw"))
    r = via(p, session, "GET", rig.basic.url + "secret?marker=nobasic")
    assert r.status_code == 401
    # Apache writes its access log after sending the response: wait for the line.
    lines = wait_until(lambda: [l for l in rig.apache.access_log_lines() if "marker=nobasic" in l], 5)
    assert lines and all('auth="Basic' not in l for l in lines), lines
    # The log says why, instead of blaming the password.
    assert p.wait_for_log(lambda l: "cannot answer the upstream's challenge" in l and "allow_basic_over_http" in l)
    assert "upstream refused the network credential" not in p.log_text()


def test_password_settings_do_not_follow_a_reused_easy_handle(proxy_factory, origin):
    """libcurl easy handles are pooled per event loop and reused without a reset when they carried no
    credential. One client connection stays on one loop, and the pool hands back the handle the last request
    used, so these requests alternate on the same handle: the one matched by a Basic credential (which libcurl
    sends at once) and the one that is not must never carry its Authorization, nor a later HEAD or POST."""
    p = proxy_factory(extra_config=cred("pw", "password", origin.url + "/echo", username="alice",
                                        password="alice-pw", schemes=["basic"], allow_basic_over_http=True))
    host = origin.url.split("//", 1)[1]

    def authorization(c, method, path, body=b""):
        headers = [("Host", host)] + ([("Content-Length", str(len(body)))] if body else [])
        c.send(request_bytes(method, origin.url + path, headers, body))
        r = c.read_response(method=method)
        assert r.status == 200, r
        seen = origin.request_log()[-1]
        assert (seen["method"], seen["target"]) == (method, path)
        return [v for k, v in seen["headers"] if k.lower() == "authorization"]

    with RawConn(p.host, p.port) as c:
        for _ in range(3):
            assert authorization(c, "GET", "/echo?n=1") == ["Basic YWxpY2U6YWxpY2UtcHc="]
            assert authorization(c, "GET", "/upload?n=2") == []
            assert authorization(c, "GET", "/echo?n=3") == ["Basic YWxpY2U6YWxpY2UtcHc="]
            assert authorization(c, "POST", "/upload?n=4", b"x=1") == []
            assert authorization(c, "HEAD", "/upload?n=5") == []


def test_no_credential_passes_the_challenge_through(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    p = proxy_factory()
    r = via(p, session, "GET", rig.iis.url + "secret")
    assert r.status_code == 401
    offers = r.raw.headers.getlist("WWW-Authenticate") if hasattr(r.raw.headers, "getlist") else [r.headers["WWW-Authenticate"]]
    assert any(o.startswith("Negotiate") for o in offers) and any(o.startswith("NTLM") for o in offers), offers


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_a_clients_own_ntlm_login_never_serves_another_client(proxy_factory, netauth_rig, client):
    """No credential of the proxy matches: client A does NTLM itself through the proxy (the 401 reaches it).
    The NTLM-authenticated upstream connection is A's alone: A's later requests on its proxy connection go over
    it, and no other client (here: one without any Authorization) is ever served as A over a pooled connection.
    Before the fix, 2 of 8 such requests of another client were answered 200 as TESTDOM\\alice."""
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": client})
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    baseline = len(os.listdir("/proc/%d/fd" % p.pid))
    # Two URLs in one curl run: the second goes over the same proxy connection (curl redoes NTLM per transfer
    # only when the connection changed), so both are served as alice through A's own upstream connection.
    a = subprocess.run(["curl", "-sS", "-x", p.url, "--ntlm", "-u", "TESTDOM\\alice:alice-pw",
                        "-o", "/dev/null", "-w", "%{http_code} ", rig.iis.url + "a1", "-o", "/dev/null", rig.iis.url + "a2"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert a.stdout.split() == ["200", "200"], (a.stdout, a.stderr)
    # A's own upstream connections closed with its proxy connection.
    assert wait_until(lambda: len(os.listdir("/proc/%d/fd" % p.pid)) <= baseline, 5), os.listdir("/proc/%d/fd" % p.pid)
    leaked = []
    for i in range(8):
        b = subprocess.run(["curl", "-sS", "-x", p.url, "-D", "-", "-o", "/dev/null", rig.iis.url + "%s-leak-b%d" % (client, i)],
                           capture_output=True, text=True, env=env, timeout=60)
        status = b.stdout.split(" ", 2)[1] if b.stdout.startswith("HTTP/") else b.stdout[:40]
        if status != "401":
            leaked.append((i, status, [l for l in b.stdout.splitlines() if l.lower().startswith("x-remote-user")]))
    assert not leaked, leaked
    lines = wait_until(lambda: [l for l in rig.apache.access_log_lines() if '"GET /%s-leak-b' % client in l], 5)
    assert lines and all('user="-"' in l for l in lines), lines


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_a_client_doing_ntlm_whose_response_is_cut_does_not_take_the_proxy_down(proxy_factory, client):
    """The upstream cuts a response mid-body for a client that does NTLM itself: the connection ends from inside
    the transfer's completion, and its own libcurl multi handle used to be torn down right there, while libcurl's
    message loop went on reading from it (use after free). The proxy keeps serving."""
    def answer(c):
        if b"/cut" in harness.read_head(c).split(b"\r\n", 1)[0]:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        c.close()

    upstream = harness.ScriptedUpstream(answer)
    port = upstream.port
    try:
        p = proxy_factory(proxy={"http_client": client})
        for i in range(20):
            with RawConn(p.host, p.port, timeout=5) as c:
                c.send(request_bytes("GET", "http://127.0.0.1:%d/cut%d" % (port, i),
                                     headers=[("Authorization", "NTLM TlRMTVNTUAABAAAAB4IIogAAAAAAAAAAAAAAAAAAAAAGAbEdAAAADw==")]))
                try:
                    c.read_to_eof()
                except OSError:
                    pass
        assert p.alive()
        import requests
        r = requests.get("http://127.0.0.1:%d/after" % port, proxies=p.proxies, timeout=10)
        assert r.status_code == 200 and r.text == "ok"
    finally:
        upstream.close()


def _curl_codes(proxy, args, urls, env=None):
    env = env or {k: v for k, v in os.environ.items()
                  if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    outputs = [a for u in urls for a in ("-o", "/dev/null", u)]
    r = subprocess.run(["curl", "-sS", "-x", proxy.url, "-w", "%{http_code} "] + args + outputs,
                       capture_output=True, text=True, env=env, timeout=60)
    return r.stdout.split()


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_a_clients_own_ntlm_login_made_with_head_requests(proxy_factory, netauth_rig, client):
    """curl -I --ntlm: the handshake's 401 answers a HEAD, and connections that answered HEAD were never reused,
    so the Type-3 went out on a new connection (401). A client's own connections carry on after HEAD."""
    rig = netauth_rig
    p = proxy_factory(proxy={"http_client": client})
    assert _curl_codes(p, ["-I", "--ntlm", "-u", "TESTDOM\\alice:alice-pw"], [rig.iis.url + "h1", rig.ntlm.url + "h2"]) == ["200", "200"]


def test_a_clients_own_ntlm_login_survives_a_full_idle_pool(proxy_factory, netauth_rig):
    """The own client's pool keeps at most 256 idle connections per loop: with it full of other clients'
    connections, the one a client's NTLM login lived on was closed between the handshake's steps (401)."""
    import asyncio
    import http.server
    rig = netauth_rig

    class Slow(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            time.sleep(0.5)  # every filler request in flight at once: 320 upstream connections
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 512

    servers = []
    for _ in range(5):
        srv = Server(("127.0.0.1", 0), Slow)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
    ports = [srv.server_address[1] for srv in servers]
    try:
        p = proxy_factory(proxy={"workers": 1})

        async def fill():
            async def one(pt, i):
                r, w = await asyncio.open_connection(p.host, p.port)
                w.write(("GET http://127.0.0.1:%d/f%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (pt, i, pt)).encode())
                await w.drain()
                data = await r.readuntil(b"\r\n\r\nok")
                w.close()
                return b" 200 " in data
            return sum(await asyncio.gather(*[one(pt, i) for pt in ports for i in range(64)]))

        assert asyncio.run(fill()) == 320
        time.sleep(0.3)
        assert _curl_codes(p, ["--ntlm", "-u", "TESTDOM\\alice:alice-pw"],
                           [rig.iis.url + "full%d" % i for i in range(3)]) == ["200"] * 3
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()


def test_a_clients_own_authorization_wins_over_the_proxys_network_credential(proxy_factory, netauth_rig):
    """A client that sends its own Authorization to a host with a password credential logs in itself: before,
    a client's NTLM beside the proxy's gave 401 and a client's Basic silently overrode the configured user;
    now the proxy's credential stays out of that request, and applies to requests without one."""
    rig = netauth_rig
    p = proxy_factory(extra_config=cred("ntlm-alice", "password", rig.ntlm.url, username="alice", password="alice-pw",
                                        domain="TESTDOM")
                      + cred("basic-alice", "password", rig.basic.url, username="alice", password="alice-pw",
                             allow_basic_over_http=True))
    import requests
    s = requests.Session()
    s.trust_env = False
    assert _user(s.get(rig.ntlm.url + "own0", proxies=p.proxies, timeout=30)) == "TESTDOM\\alice"
    assert _curl_codes(p, ["--ntlm", "-u", "TESTDOM\\bob:bob-pw"], [rig.ntlm.url + "own1"]) == ["200"]
    assert _curl_codes(p, ["-u", "bob:bob-pw"], [rig.basic.url + "own2"]) == ["200"]
    assert _curl_codes(p, ["-u", "bob:wrong"], [rig.basic.url + "own3"]) == ["401"]
    assert _user(s.get(rig.basic.url + "own4", proxies=p.proxies, timeout=30)) == "alice"
    lines = wait_until(lambda: [l for l in rig.apache.access_log_lines() if "/own" in l and '"GET /own0' not in l], 5)
    # Apache's log writes the backslash of DOMAIN\\user escaped.
    users = {l.split('"GET /')[1].split(" ")[0]: l.split('user="')[1].split('"')[0].replace("\\\\", "\\")
             for l in lines if '" 200 ' in l}
    assert users.get("own1") == "TESTDOM\\bob" and users.get("own2") == "bob", lines


def test_iis_like_negotiate_plus_ntlm_falls_back_to_ntlm(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    p = proxy_factory(extra_config=cred("iwa", "password", rig.iis.url, username="alice", password="alice-pw", domain="TESTDOM"))
    r = via(p, session, "GET", rig.iis.url + "secret")
    assert r.status_code == 200, r.text[:200]
    assert _user(r) == "TESTDOM\\alice"
    assert r.headers.get("X-Auth-Type") == "NTLM"


@pytest.mark.parametrize("mode", ["keytab", "password"])
def test_kerberos_negotiate(proxy_factory, netauth_rig, session, mode, tmp_path):
    rig = netauth_rig
    extra = {"keytab": rig.realm.client_keytab} if mode == "keytab" else {"password": "alice-pw"}
    p = proxy_factory(proxy={"state_dir": str(tmp_path / "krb")},
                      env={"KRB5_CONFIG": rig.realm.krb5_config},
                      extra_config=cred("krb", "kerberos", rig.kerberos.url, principal=rig.realm.principal, **extra))
    r = via(p, session, "GET", rig.kerberos.url + "secret")
    assert r.status_code == 200, (r.status_code, p.log_text()[-1500:])
    assert _user(r) == rig.realm.principal
    assert r.headers.get("X-Auth-Type") == "Negotiate"
    assert os.path.exists(tmp_path / "krb" / "krb5cc_authproxy")


def test_two_kerberos_identities_are_refused(netauth_rig, tmp_path):
    rig = netauth_rig
    conf = tmp_path / "k.conf"
    conf.write_text(cred("a", "kerberos", rig.kerberos.url, principal="alice@NETAUTH.TEST", password="x")
                    + cred("b", "kerberos", rig.iis.url, principal="bob@NETAUTH.TEST", password="y"))
    r = harness.run_cli(["check", "--config", str(conf)])
    assert r.returncode != 0 and "one Kerberos identity" in r.stderr


@pytest.mark.parametrize("scheme", ["ntlm", "digest"])
def test_20mb_post_survives_the_handshake(proxy_factory, netauth_rig, netauth_big_file, session, scheme):
    rig = netauth_rig
    vhost = getattr(rig, scheme)
    extra = {"domain": "TESTDOM"} if scheme == "ntlm" else {}
    p = proxy_factory(extra_config=cred("pw", "password", vhost.url, username="alice", password="alice-pw", **extra))
    path, size, sha = netauth_big_file

    def gen():
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    return
                yield b

    r = via(p, session, "POST", vhost.url + "upload", data=gen(), timeout=120,
            headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text[:300]
    assert int(r.headers["X-Body-Size"]) == size
    assert r.headers["X-Body-Sha256"] == sha


def test_two_ntlm_identities_never_mix(proxy_factory, netauth_rig):
    rig = netauth_rig
    p = proxy_factory(extra_config=cred("a", "password", rig.ntlm.url + "alice", username="alice", password="alice-pw", domain="TESTDOM")
                      + cred("b", "password", rig.ntlm.url + "bob", username="bob", password="bob-pw", domain="TESTDOM"))
    wrong, errors, done = [], [], [0]
    lock = threading.Lock()

    def worker(k):
        import requests
        s = requests.Session()
        s.trust_env = False
        try:
            for i in range(15):
                who = ("alice", "bob", "nobody")[(k + i) % 3]
                r = s.get(rig.ntlm.url + "%s/x" % who, proxies=p.proxies, timeout=30)
                got = r.headers.get("X-Remote-User")
                expected = {"alice": "TESTDOM\\alice", "bob": "TESTDOM\\bob", "nobody": None}[who]
                ok = (r.status_code == 200 and got == expected) if expected else (r.status_code == 401 and got is None)
                with lock:
                    done[0] += 1
                    if not ok:
                        wrong.append((who, r.status_code, got))
        except Exception as e:  # noqa: BLE001 - a hang, reset or refusal is a failure, reported below
            with lock:
                errors.append("worker %d: %r" % (k, e))
        finally:
            s.close()

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    [t.start() for t in ts]
    [t.join(120) for t in ts]
    assert not any(t.is_alive() for t in ts), "workers still running after 120 s"
    assert not errors, errors[:10]
    assert not wrong, wrong[:10]
    assert done[0] == 6 * 15, "%d of %d requests completed" % (done[0], 6 * 15)


def test_token_and_ntlm_on_the_same_url(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    p = proxy_factory(extra_config=cred("iwa", "password", rig.ntlm.url, username="alice", password="alice-pw", domain="TESTDOM")
                      + cred("key", "api-key", rig.ntlm.url, key="APIKEY1"))
    r = via(p, session, "GET", rig.ntlm.url + "arcgis/rest/info?f=json")
    assert r.status_code == 200
    assert _user(r) == "TESTDOM\\alice"
    assert "token=APIKEY1" in r.json()["path"]


def _mtls_conf(rig, certificate_fields, match_host="localhost"):
    m = rig.mtls
    return (cred("trust", "server-trust", "https://%s:%d" % (match_host, m.port), ca_file=rig.pki.server_ca)
            + cred("pki", "certificate", "http://%s:%d" % (match_host, m.port), upgrade_to_https=True, **certificate_fields))


def test_client_certificates_pem_and_p12(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    m = rig.mtls
    p = proxy_factory(extra_config=_mtls_conf(rig, {"cert": rig.pki.alice_cert, "key": rig.pki.alice_key}))
    r = via(p, session, "GET", "http://localhost:%d/secret" % m.port)
    assert r.status_code == 200, r.text[:300]
    assert "CN=alice" in r.headers["X-Client-Subject"]
    q = proxy_factory(extra_config=_mtls_conf(rig, {"file": rig.pki.bob_p12, "password": rig.pki.bob_p12_password}))
    r = via(q, session, "GET", "http://localhost:%d/secret" % m.port)
    assert r.status_code == 200, r.text[:300]
    assert "CN=bob" in r.headers["X-Client-Subject"]
    e = proxy_factory(extra_config=_mtls_conf(rig, {"cert": rig.pki.alice_cert, "key": rig.pki.alice_key_encrypted,
                                                    "key_password": rig.pki.alice_key_password}))
    assert via(e, session, "GET", "http://localhost:%d/secret" % m.port).status_code == 200


def test_host_without_certificate_credential_gets_none(proxy_factory, netauth_rig, session):
    rig = netauth_rig
    m = rig.mtls
    # The certificate applies to localhost only; 127.0.0.1 (same server) is trusted but gets no certificate.
    conf = _mtls_conf(rig, {"cert": rig.pki.alice_cert, "key": rig.pki.alice_key}) + cred(
        "trust127", "server-trust", "https://127.0.0.1:%d" % m.port, ca_file=rig.pki.server_ca) + cred(
        "up127", "server-trust", "http://127.0.0.1:%d" % m.port, ca_file=rig.pki.server_ca, upgrade_to_https=True)
    p = proxy_factory(extra_config=conf)
    # Repeated: the refused handshake hands libcurl's connection to the own client just as the server's alert
    # arrives, which once lost the descriptor's epoll registration (a hang until the timeout, ~1 run in 10).
    for _ in range(10):
        r = via(p, session, "GET", "http://127.0.0.1:%d/secret" % m.port, timeout=15)
        assert r.status_code == 502, r.text[:300]
    assert via(p, session, "GET", "http://localhost:%d/secret" % m.port).status_code == 200


def test_client_certificate_through_interception(proxy_factory, netauth_rig, tmp_path):
    rig = netauth_rig
    m = rig.mtls
    ca_dir = tmp_path / "ca"
    subprocess.run([harness.proxy_bin(), "ca", "init", "--dir", str(ca_dir)], check=True, capture_output=True)
    conf = (cred("trust", "server-trust", "https://localhost:%d" % m.port, ca_file=rig.pki.server_ca)
            + cred("pki", "certificate", "https://localhost:%d" % m.port, file=rig.pki.bob_p12, password=rig.pki.bob_p12_password)
            + '\n[tls]\nca_cert = "%s/ca.pem"\nca_key = "%s/ca.key"\n' % (ca_dir, ca_dir))
    p = proxy_factory(proxy={"connect_ports": [443, m.port]}, extra_config=conf)
    c = harness.curl("-x", p.url, "--cacert", str(ca_dir / "ca.pem"), "-D", "-", "-o", "/dev/null",
                     "https://localhost:%d/secret" % m.port)
    assert c.returncode == 0, c.stderr
    assert b"CN=bob" in c.stdout


def test_bad_p12_password_fails_check_naming_the_file(netauth_rig, tmp_path):
    rig = netauth_rig
    conf = tmp_path / "bad.conf"
    conf.write_text(cred("pki", "certificate", "https://localhost:1", file=rig.pki.bob_p12, password="not-the-password"))
    r = harness.run_cli(["check", "--config", str(conf)])
    assert r.returncode != 0
    assert rig.pki.bob_p12 in r.stderr and "wrong password" in r.stderr
    assert "not-the-password" not in r.stderr + r.stdout
