"""HTTPS interception (`[tls]`): the authproxy CA (`authproxy ca init/export`, name constraints), leaf
certificates minted per host, credentials injected and 498 retried inside intercepted CONNECT tunnels,
upstream verification with `server-trust` credentials (ca_file / pinned_public_key), `upgrade_to_https`,
`intercept = "none"`, blind tunnels for unmatched hosts, keep-alive / concurrency, 100 MB both ways with
bounded RSS.

Everything binds to 127.0.0.1 and is addressed as `localhost` (the upstream certificates carry
SAN DNS:localhost + IP:127.0.0.1). CAs and upstream certificates are made at test time with the binary and
openssl."""

import base64
import hashlib
import http.client
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
import urllib.parse

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer
from httpraw import RawConn, request_bytes, wait_until
from origin import iter_pattern, pattern_sha256

CA_CN = "authproxy interception CA"
T = 30  # default per-request timeout (s)


# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------



class CA:
    def __init__(self, d):
        self.dir = str(d)
        self.cert = os.path.join(self.dir, "ca.pem")
        self.key = os.path.join(self.dir, "ca.key")


def tls_section(ca, intercept="matched"):
    return '\n[tls]\nca_cert = %s\nca_key = %s\nintercept = "%s"\n' % (
        json.dumps(ca.cert), json.dumps(ca.key), intercept)


def run(cmd, timeout=60, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def openssl(*args, timeout=60, input=None):
    r = subprocess.run(["openssl"] + list(args), capture_output=True, timeout=timeout, input=input)
    return r


def cert_text(path, inform="PEM"):
    r = openssl("x509", "-inform", inform, "-in", path, "-noout", "-text")
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


def make_self_signed(d, name):
    """Self-signed (EC P-256) upstream certificate for localhost / 127.0.0.1 -> (cert, key)."""
    cert, key = os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")
    r = openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-sha256", "-days", "2", "-subj", "/CN=localhost/O=upstream-" + name,
                "-keyout", key, "-out", cert,
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-addext", "basicConstraints=critical,CA:TRUE")
    assert r.returncode == 0, r.stderr
    return cert, key


def spki_pin(cert):
    """sha256//BASE64 of the DER SubjectPublicKeyInfo, computed with openssl."""
    pub = openssl("x509", "-in", cert, "-pubkey", "-noout")
    assert pub.returncode == 0, pub.stderr
    der = openssl("pkey", "-pubin", "-outform", "der", input=pub.stdout)
    assert der.returncode == 0, der.stderr
    dg = openssl("dgst", "-sha256", "-binary", input=der.stdout)
    assert dg.returncode == 0, dg.stderr
    return "sha256//" + base64.b64encode(dg.stdout).decode()


def pem_der(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def lh(srv):
    """https://localhost:PORT of an origin / ArcGIS server listening on 127.0.0.1."""
    return "https://localhost:%d" % srv.port


def connect_tls(proxy, host, port, cafile=None, sni=True, timeout=15):
    """CONNECT host:port through the proxy, then TLS over the tunnel.
    Returns (DER of the certificate presented, getpeercert() dict or {} when not verified)."""
    target = "%s:%d" % (host, port)
    c = RawConn(proxy.host, proxy.port, timeout=timeout)
    try:
        c.send(request_bytes("CONNECT", target, [("Host", target)]))
        r = c.read_response(method="CONNECT")
        assert r.status == 200, r
        assert not c.buf, bytes(c.buf)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if cafile:
            ctx.load_verify_locations(cafile)
            ctx.check_hostname = sni
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        t = ctx.wrap_socket(c.sock, server_hostname=host if sni else None)
        try:
            return t.getpeercert(binary_form=True), (t.getpeercert() or {})
        finally:
            t.close()
    finally:
        c.close()


def dn(info, which):
    return {k: v for rdn in info.get(which, ()) for k, v in rdn}


def query_of(resp):
    return urllib.parse.parse_qs(resp.json()["query"])


def minted_lines(proxy, host):
    return [l for l in proxy.log_lines()
            if "minted certificate" in l and harness.parse_kv(l).get("host") == host]


def new_session():
    s = requests.Session()
    s.trust_env = False
    return s


# ---------------------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ca(proxy_binary, tmp_path_factory):
    """A fresh (unconstrained) authproxy CA made by `authproxy ca init`."""
    d = tmp_path_factory.mktemp("ica") / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr + r.stdout
    return CA(d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Three unrelated self-signed upstream certificates: name -> (cert, key)."""
    d = str(tmp_path_factory.mktemp("upstream-certs"))
    return {n: make_self_signed(d, n) for n in ("a", "b", "c")}


@pytest.fixture
def https_ags(certs):
    """ArcGIS Server test instance over https with a self-signed certificate, advertising its URLs (rest/info
    tokenServicesUrl, server_root) under https://localhost:PORT."""
    s = ArcGISServer(role="server", ttl=60, tls=certs["c"])
    s.httpd.base_url = "https://localhost:%d" % s.port
    s.start()
    yield s
    s.stop()


def ags_proxy(proxy_factory, ca, s, certs):
    return proxy_factory(
        proxy={"connect_ports": [443, s.port]},
        extra_config=tls_section(ca)
        + cred("gis", "arcgis-token", s.server_root, username="alice", password="alice-pass")
        + cred("trust", "server-trust", lh(s), ca_file=certs["c"][0]))


# ---------------------------------------------------------------------------------------------------------
# 1. ArcGIS over https through interception: curl, requests, GDAL; 498 retried once
# ---------------------------------------------------------------------------------------------------------

def test_arcgis_https_token_injected_for_curl_requests_gdal(proxy_factory, ca, https_ags, certs, session):
    s = https_ags
    assert s.server_root == "https://localhost:%d/arcgis" % s.port
    p = ags_proxy(proxy_factory, ca, s, certs)
    url = s.query_url() + "?where=1%3D1&outFields=*&f=json"

    r = session.get(url, proxies=p.proxies, verify=ca.cert, timeout=T)
    assert r.status_code == 200, r.text[:500]
    assert len(r.json()["features"]) == 3, r.text[:500]

    c = harness.curl("-x", p.url, "--cacert", ca.cert, url)
    assert c.returncode == 0, c.stderr
    assert len(json.loads(c.stdout)["features"]) == 3

    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority, "GDAL_CURL_CA_BUNDLE": ca.cert,
                             "CURL_CA_BUNDLE": ca.cert, "GDAL_HTTP_TIMEOUT": "30"})
    g = run(["ogrinfo", "-ro", "-al", "-so", url], env=env, timeout=60)
    assert g.returncode == 0, g.stderr
    assert b"Feature Count: 3" in g.stdout, g.stdout

    st = s.stats()
    assert st["tokens_issued"].get("generate_password") == 1, st  # one token for all three clients
    assert st["tokens_issued_total"] == 1, st
    assert st["rejected_498"] == 0 and st["rejected_499"] == 0, st
    queries = [e for e in s.request_log() if e["kind"] == "query"]
    assert len(queries) >= 3, queries
    assert all(e["outcome"] == "ok" and e["token_count"] == 1 for e in queries), queries
    # Inside the intercepted tunnel too, the token's bound referer replaces whatever the client sent (issue 36).
    assert all(e["referer"] and e["referer"].startswith("app://authproxy/") for e in queries), queries
    text = p.log_text()
    assert "alice-pass" not in text
    assert len(minted_lines(p, "localhost")) == 1, text[-3000:]


def test_arcgis_https_forced_expiry_retried_once(proxy_factory, ca, https_ags, certs, session):
    s = https_ags
    p = ags_proxy(proxy_factory, ca, s, certs)
    url = s.query_url() + "?where=1%3D1&f=json"
    r = session.get(url, proxies=p.proxies, verify=ca.cert, timeout=T)
    assert r.status_code == 200, r.text[:500]
    s.expire_all()
    s.reset_stats()
    r = session.get(url, proxies=p.proxies, verify=ca.cert, timeout=T)
    assert r.status_code == 200, r.text[:500]
    assert len(r.json()["features"]) == 3, r.text[:500]
    st = s.stats()
    assert st["rejected_498"] == 1, st
    assert st["tokens_issued"].get("generate_password") == 1 and st["tokens_issued_total"] == 1, st
    outcomes = [e["outcome"] for e in s.request_log() if e["kind"] == "query"]
    assert outcomes == ["498", "ok"], outcomes


# ---------------------------------------------------------------------------------------------------------
# 2. Minted certificate for matched hosts, the origin's own for unmatched ones
# ---------------------------------------------------------------------------------------------------------

def test_minted_certificate_for_matched_host_real_one_for_unmatched(proxy_factory, ca, origin_factory, certs,
                                                                     tmp_path):
    matched = origin_factory(tls=certs["a"])
    other = origin_factory(tls=certs["b"])
    p = proxy_factory(proxy={"connect_ports": [443, matched.port, other.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", lh(matched), key="K")
                      + cred("t", "server-trust", lh(matched), ca_file=certs["a"][0]))

    der, info = connect_tls(p, "localhost", matched.port, cafile=ca.cert)
    assert der != pem_der(certs["a"][0])
    assert dn(info, "issuer").get("commonName") == CA_CN, info
    assert info.get("subjectAltName") == (("DNS", "localhost"),), info
    life = ssl.cert_time_to_seconds(info["notAfter"]) - ssl.cert_time_to_seconds(info["notBefore"])
    assert 29 * 86400 <= life <= 31 * 86400 + 7200, info
    leaf = tmp_path / "leaf.der"
    leaf.write_bytes(der)
    text = cert_text(str(leaf), "DER")
    assert "TLS Web Server Authentication" in text, text
    assert "CA:FALSE" in text, text

    # No SNI: the certificate is minted for the CONNECT host.
    der2, info2 = connect_tls(p, "localhost", matched.port, cafile=ca.cert, sni=False)
    assert info2.get("subjectAltName") == (("DNS", "localhost"),), info2
    assert der2 == der  # cached leaf
    assert len(minted_lines(p, "localhost")) == 1, p.log_text()[-3000:]

    # Unmatched host (port no credential covers): blind tunnel, the origin's own certificate.
    der3, info3 = connect_tls(p, "localhost", other.port, cafile=certs["b"][0])
    assert der3 == pem_der(certs["b"][0])
    assert dn(info3, "issuer").get("commonName") == "localhost", info3
    assert dn(info3, "issuer").get("organizationName") == "upstream-b", info3
    assert wait_until(lambda: other.stats()["connections"] == 1, 5), other.stats()
    assert matched.stats()["connections"] == 0  # nothing was requested inside the intercepted sessions


# ---------------------------------------------------------------------------------------------------------
# 3. A client that does not trust the CA fails; no fallback to a tunnel
# ---------------------------------------------------------------------------------------------------------

def test_client_without_ca_fails_verification(proxy_factory, ca, origin_factory, certs, session):
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", lh(o), key="K")
                      + cred("t", "server-trust", lh(o), ca_file=certs["a"][0]))
    c = harness.curl("-x", p.url, lh(o) + "/echo")  # system CAs only
    assert c.returncode == 60, (c.returncode, c.stderr)
    assert p.wait_for_log("client did not trust the authproxy CA", timeout=5), p.log_text()[-3000:]
    with pytest.raises(requests.exceptions.SSLError):
        session.get(lh(o) + "/echo", proxies=p.proxies, verify=True, timeout=T)
    # Trusting only the origin's own certificate does not help either: the proxy never tunnels blindly.
    with pytest.raises(requests.exceptions.SSLError):
        session.get(lh(o) + "/echo", proxies=p.proxies, verify=certs["a"][0], timeout=T)
    time.sleep(0.3)
    assert o.stats()["connections"] == 0, "the proxy reached the origin for a client that refused its certificate"
    assert len(p.wait_for_log("client did not trust the authproxy CA", timeout=3)) >= 2
    assert "without a request" not in p.log_text()  # the OpenSSL clients above said why (an alert)


def test_gnutls_client_without_ca_gets_a_hint_in_the_log(proxy_factory, ca, origin_factory, certs):
    """GDAL on Debian/Ubuntu uses libcurl-gnutls: it completes the handshake, then checks the certificate and
    closes without an alert. The proxy cannot see a refusal, but logs that the client closed after the handshake
    without a request, with the likely cause (found by a README walk-through)."""
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", lh(o), key="K")
                      + cred("t", "server-trust", lh(o), ca_file=certs["a"][0]))
    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority, "GDAL_HTTP_TIMEOUT": "20",
                             "GDAL_HTTP_MAX_RETRY": "0"})
    g = run(["ogrinfo", "-ro", "-al", "-so", lh(o) + "/json"], env=env, timeout=60)
    assert g.returncode != 0
    lines = p.wait_for_log("without a request", timeout=5)
    assert lines and "may not trust the authproxy CA" in lines[0], p.log_text()[-3000:]
    assert o.stats()["connections"] == 0
    # A client that does trust the CA and sends its request gets no such line.
    env["GDAL_CURL_CA_BUNDLE"] = ca.cert
    before = len(p.wait_for_log("without a request", timeout=0.1))
    ok = run(["ogrinfo", "-ro", "-al", "-so", lh(o) + "/json"], env=env, timeout=60)
    # The control must have worked: GDAL read the layer through the proxy, so the origin saw its request.
    assert ok.returncode == 0, (ok.returncode, ok.stdout[-1000:], ok.stderr[-1000:])
    assert o.stats()["requests"] >= 1, o.stats()
    time.sleep(0.5)
    assert len(p.wait_for_log("without a request", timeout=0.1)) == before, p.log_text()[-3000:]


# ---------------------------------------------------------------------------------------------------------
# 4. Upstream verification: self-signed upstream, server-trust ca_file / pinned_public_key
# ---------------------------------------------------------------------------------------------------------

def test_self_signed_upstream_without_trust_is_502(proxy_factory, ca, origin_factory, certs, session):
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", lh(o), key="K"))
    r = session.get(lh(o) + "/echo?f=json", proxies=p.proxies, verify=ca.cert, timeout=T)
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "certificate" in err["message"].lower(), err
    assert "server-trust" in err["message"] + " ".join(err.get("details", [])), err
    assert o.stats()["requests"] == 0


@pytest.mark.parametrize("kind", ["ca_file", "pinned_public_key"])
def test_server_trust_admits_only_its_host(proxy_factory, ca, origin_factory, certs, session, kind):
    a = origin_factory(tls=certs["a"])
    b = origin_factory(tls=certs["b"])  # another self-signed host, no trust for it
    trust = {"ca_file": certs["a"][0]} if kind == "ca_file" else {"pinned_public_key": spki_pin(certs["a"][0])}
    # One event loop, so a and b share one pool of libcurl easy handles (handles with trust settings are pooled
    # apart and only reused for the same settings).
    p = proxy_factory(proxy={"connect_ports": [443, a.port, b.port], "workers": 1},
                      extra_config=tls_section(ca)
                      + cred("ka", "api-key", lh(a), key="KEY-A")
                      + cred("ta", "server-trust", lh(a), **trust)
                      + cred("kb", "api-key", lh(b), key="KEY-B"))
    for order in range(2):  # b before and after a: nothing carries over through reused handles/connections
        if order == 1:
            r = session.get(lh(a) + "/echo?f=json", proxies=p.proxies, verify=ca.cert, timeout=T)
            assert r.status_code == 200, r.text[:500]
            q = query_of(r)
            assert q.get("token") == ["KEY-A"] and q.get("f") == ["json"], q
        r = session.get(lh(b) + "/echo?f=json", proxies=p.proxies, verify=ca.cert, timeout=T)
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
        assert "certificate" in err["message"].lower(), err
    assert b.stats()["requests"] == 0
    assert a.stats()["requests"] == 1


def test_wrong_pin_is_502(proxy_factory, ca, origin_factory, certs, session):
    a = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, a.port]},
                      extra_config=tls_section(ca) + cred("ka", "api-key", lh(a), key="KEY-A")
                      + cred("ta", "server-trust", lh(a), pinned_public_key=spki_pin(certs["b"][0])))
    r = session.get(lh(a) + "/echo", proxies=p.proxies, verify=ca.cert, timeout=T)
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert a.stats()["requests"] == 0


# ---------------------------------------------------------------------------------------------------------
# 5. Name-constrained CA
# ---------------------------------------------------------------------------------------------------------

def sign_leaf(ca, d, name, san):
    """A leaf for `name` signed with the CA key by openssl (not by the proxy) -> path."""
    key, csr, crt, ext = (os.path.join(d, name + s) for s in (".key", ".csr", ".pem", ".ext"))
    r = openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", csr, "-subj", "/CN=" + name)
    assert r.returncode == 0, r.stderr
    with open(ext, "w") as f:
        f.write("subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n" % san)
    r = openssl("x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-set_serial", "0x%x" % (
        int.from_bytes(os.urandom(8), "big")), "-days", "1", "-sha256", "-extfile", ext, "-out", crt)
    assert r.returncode == 0, r.stderr
    return crt


def verify_leaf(ca, leaf):
    r = openssl("verify", "-CAfile", ca.cert, leaf)
    return r.returncode, (r.stdout + r.stderr).decode()


def constrained_ca(tmp_path, creds, name):
    """`authproxy ca init --constrain` for a configuration holding `creds` -> CA."""
    conf = tmp_path / (name + ".toml")
    conf.write_text(harness.render_config(harness.default_proxy_section(harness.free_port(), str(tmp_path / "st")),
                                          harness.default_log_section()) + creds)
    d = tmp_path / name
    r = harness.run_cli(["ca", "init", "--dir", str(d), "--constrain", "--config", str(conf)])
    assert r.returncode == 0, r.stderr + r.stdout
    return CA(d)


def test_name_constrained_ca(proxy_factory, ca, origin_factory, certs, session, tmp_path):
    o = origin_factory(tls=certs["a"])
    creds = (cred("k", "api-key", lh(o), key="NC-KEY")
             + cred("t", "server-trust", lh(o), ca_file=certs["a"][0]))
    cca = constrained_ca(tmp_path, creds, "cca")
    text = cert_text(cca.cert)
    assert "Name Constraints" in text and "DNS:localhost" in text, text
    assert "IP:0.0.0.0/0.0.0.0" in text or "IP:0.0.0.0/255.255.255.255" in text, text

    # The proxy's leaf for localhost is accepted by a client (OpenSSL enforces name constraints).
    p = proxy_factory(proxy={"connect_ports": [443, o.port]}, extra_config=tls_section(cca) + creds)
    r = session.get(lh(o) + "/echo?f=json", proxies=p.proxies, verify=cca.cert, timeout=T)
    assert r.status_code == 200, r.text[:500]
    assert query_of(r).get("token") == ["NC-KEY"]
    c = harness.curl("-x", p.url, "--cacert", cca.cert, lh(o) + "/json")
    assert c.returncode == 0, c.stderr

    # Leaves the test signs with the constrained CA key: localhost verifies, anything else does not.
    wd = str(tmp_path)
    rc, out = verify_leaf(cca, sign_leaf(cca, wd, "localhost", "DNS:localhost"))
    assert rc == 0 and "OK" in out, out
    rc, out = verify_leaf(cca, sign_leaf(cca, wd, "evil.example", "DNS:evil.example"))
    assert rc != 0, out
    assert "subtree" in out.lower() or "name constraint" in out.lower(), out
    rc, out = verify_leaf(cca, sign_leaf(cca, wd, "ip127", "IP:127.0.0.1"))
    assert rc != 0, out  # IP names are limited to 0.0.0.0/32 and ::/128
    # Control: the unconstrained CA signs evil.example just fine.
    ud = tmp_path / "u"
    ud.mkdir()
    rc, out = verify_leaf(ca, sign_leaf(ca, str(ud), "evil.example", "DNS:evil.example"))
    assert rc == 0, out


def test_name_constrained_ca_for_ip_hosts_only_also_limits_dns_names(proxy_factory, origin_factory, certs,
                                                                     session, tmp_path):
    """A configuration that matches only IP literals: the CA must not leave DNS names unconstrained (RFC 5280: a
    name type without a permitted subtree is not limited), yet the proxy's own leaf for the IP still verifies."""
    o = origin_factory(tls=certs["a"])
    ip = "https://127.0.0.1:%d" % o.port
    creds = cred("k", "api-key", ip, key="NC-IP-KEY") + cred("t", "server-trust", ip, ca_file=certs["a"][0])
    cca = constrained_ca(tmp_path, creds, "ipca")
    text = cert_text(cca.cert)
    assert "IP:127.0.0.1/255.255.255.255" in text and "DNS:invalid" in text, text

    p = proxy_factory(proxy={"connect_ports": [443, o.port]}, extra_config=tls_section(cca) + creds)
    r = session.get(ip + "/echo?f=json", proxies=p.proxies, verify=cca.cert, timeout=T)
    assert r.status_code == 200, r.text[:500]
    assert query_of(r).get("token") == ["NC-IP-KEY"]
    c = harness.curl("-x", p.url, "--cacert", cca.cert, ip + "/json")
    assert c.returncode == 0, c.stderr

    wd = str(tmp_path)
    rc, out = verify_leaf(cca, sign_leaf(cca, wd, "ip127", "IP:127.0.0.1"))
    assert rc == 0 and "OK" in out, out
    # OpenSSL checks a CN that looks like a host name against the DNS constraints: the proxy's leaves for IP
    # addresses carry no CN (the request above verified), a CN of "127.0.0.1" would not.
    rc, out = verify_leaf(cca, sign_leaf(cca, wd, "127.0.0.1", "IP:127.0.0.1"))
    assert rc != 0, out
    rc, out = verify_leaf(cca, sign_leaf(cca, wd, "evil.example", "DNS:evil.example"))
    assert rc != 0, out
    assert "subtree" in out.lower() or "name constraint" in out.lower(), out


# ---------------------------------------------------------------------------------------------------------
# 6. Keep-alive and concurrency inside interception; one leaf per host
# ---------------------------------------------------------------------------------------------------------

def test_keepalive_500_and_50_concurrent_clients_one_mint(proxy_factory, ca, origin_factory, certs):
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", lh(o), key="KA-KEY")
                      + cred("t", "server-trust", lh(o), ca_file=certs["a"][0]))

    # 50 concurrent clients first (every loop races to mint the same leaf).
    results, errors = [], []
    lock = threading.Lock()
    start = threading.Barrier(50)

    def client(i):
        s = new_session()
        try:
            start.wait(10)
            for j in range(4):
                r = s.get(lh(o) + "/echo?c=%d&j=%d" % (i, j), proxies=p.proxies, verify=ca.cert, timeout=60)
                ok = r.status_code == 200 and query_of(r).get("token") == ["KA-KEY"]
                with lock:
                    results.append(ok)
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(repr(e))
        finally:
            s.close()

    ts = [threading.Thread(target=client, args=(i,)) for i in range(50)]
    [t.start() for t in ts]
    [t.join(90) for t in ts]
    assert not errors, errors[:5]
    assert results.count(True) == 200, (len(results), results.count(False))

    # 500 sequential requests over ONE intercepted client connection. (The test origin answers most
    # endpoints with two writes and so pays ~40 ms of Nagle/delayed-ACK per response even without a proxy;
    # /status/204 is a single write, so most requests use it and every 50th one is a full /echo.)
    ctx = ssl.create_default_context(cafile=ca.cert)
    conn = http.client.HTTPSConnection(p.host, p.port, context=ctx, timeout=30)
    conn.set_tunnel("localhost", o.port)
    before = o.stats()["requests"]
    try:
        sock = None
        for i in range(500):
            echo = i % 50 == 0
            conn.request("GET", ("/echo?i=%d" if echo else "/status/204?i=%d") % i)
            r = conn.getresponse()
            body = r.read()
            assert r.status == (200 if echo else 204), (i, r.status, body[:300])
            if echo:
                q = urllib.parse.parse_qs(json.loads(body)["query"])
                assert q.get("i") == [str(i)] and q.get("token") == ["KA-KEY"], (i, q)
            if sock is None:
                sock = conn.sock
            assert conn.sock is sock, "the intercepted connection was closed after %d requests" % i
    finally:
        conn.close()
    assert o.stats()["requests"] - before == 500
    tail = [e["target"] for e in o.request_log()[-150:]]
    assert all("token=KA-KEY" in t for t in tail), [t for t in tail if "token=KA-KEY" not in t][:3]
    assert tail[-1].endswith("i=499") or "i=499" in tail[-1], tail[-1]

    lines = minted_lines(p, "localhost")
    assert len(lines) == 1, lines
    assert harness.parse_kv(lines[0]).get("minted_total") == "1", lines
    assert len([l for l in p.log_lines() if "minted certificate" in l]) == 1


# ---------------------------------------------------------------------------------------------------------
# 7. 100 MB both ways through interception, bounded RSS
# ---------------------------------------------------------------------------------------------------------

def test_100mb_download_and_upload_bounded_rss(proxy_factory, ca, origin_factory, certs, session):
    n = 100 * 1024 * 1024
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", lh(o), key="BIG")
                      + cred("t", "server-trust", lh(o), ca_file=certs["a"][0]))
    h = hashlib.sha256()
    got = 0
    with session.get(lh(o) + "/bytes?n=%d" % n, proxies=p.proxies, verify=ca.cert, stream=True,
                     timeout=60) as r:
        assert r.status_code == 200, r.text[:300]
        for chunk in r.iter_content(1 << 20):
            h.update(chunk)
            got += len(chunk)
    assert got == n
    assert h.hexdigest() == pattern_sha256(n)

    def body():
        buf = bytearray()
        for c in iter_pattern(n):
            buf += c
            if len(buf) >= 1 << 20:
                yield bytes(buf)
                buf.clear()
        if buf:
            yield bytes(buf)

    r = session.post(lh(o) + "/upload", data=body(), proxies=p.proxies, verify=ca.cert, timeout=90,
                     headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text[:300]
    info = r.json()
    assert info["size"] == n and info["sha256"] == pattern_sha256(n), info
    assert urllib.parse.parse_qs(info["query"]).get("token") == ["BIG"]
    hwm = p.hwm()
    print("proxy peak RSS after 100 MB down + 100 MB up through interception: %.1f MB" % (hwm / harness.MB))
    assert hwm < 100 * harness.MB, "peak RSS %.1f MB" % (hwm / harness.MB)


# ---------------------------------------------------------------------------------------------------------
# 8. upgrade_to_https
# ---------------------------------------------------------------------------------------------------------

def test_upgrade_to_https(proxy_factory, origin_factory, certs, session):
    o = origin_factory(tls=certs["a"])  # https only
    p = proxy_factory(extra_config=cred("k", "api-key", "http://localhost:%d" % o.port, key="UP-KEY",
                                        upgrade_to_https=True)
                      + cred("t", "server-trust", lh(o), ca_file=certs["a"][0]))
    r = session.get("http://localhost:%d/echo?f=json" % o.port, proxies=p.proxies, timeout=T)
    assert r.status_code == 200, r.text[:500]
    q = query_of(r)
    assert q.get("token") == ["UP-KEY"] and q.get("f") == ["json"], q
    assert o.stats()["requests"] == 1


def test_upgrade_to_https_redirects_keep_the_client_on_http(proxy_factory, certs):
    """The server redirects with its own scheme (ArcGIS Server's REST root, trailing-slash redirects):
    `Location: https://host:port/arcgis/rest/services/`. Relayed as is, it took a client of upgrade_to_https off
    the proxy's upgrade: with only HTTP_PROXY set, requests followed it straight to the server, without the key.
    A redirect to the upgraded origin now goes back as the http:// URL the client used (when that URL is upgraded
    too); one to a place outside the upgraded prefix stays as the server wrote it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*certs["a"])
    seen = []

    def serve(c):
        t = ctx.wrap_socket(c, server_side=True)
        while True:
            head = harness.read_head(t)
            if not head:
                return
            target = head.split(b" ")[1]
            seen.append(target.decode())
            path = target.split(b"?")[0]
            if path == b"/arcgis/rest/services":
                loc = b"https://LOCALHOST:%d/arcgis/rest/services/?" % port + target.split(b"?", 1)[1]
                t.sendall(b"HTTP/1.1 301 Moved Permanently\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % loc)
            elif path == b"/arcgis/login":
                t.sendall(b"HTTP/1.1 302 Found\r\nLocation: https://localhost:%d/portal/home/\r\n"
                          b"Content-Length: 0\r\n\r\n" % port)
            else:
                t.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    upstream = harness.ScriptedUpstream(serve)
    port = upstream.port
    try:
        base = "http://localhost:%d/arcgis" % port
        p = proxy_factory(extra_config=cred("k", "api-key", base, key="UP-KEY", upgrade_to_https=True)
                          + cred("t", "server-trust", "https://localhost:%d" % port, ca_file=certs["a"][0]))
        s = requests.Session()
        s.trust_env = False
        r = s.get(base + "/rest/services?f=json", proxies={"http": p.url}, allow_redirects=False, timeout=T)
        assert r.status_code == 301
        assert r.headers["Location"] == base + "/rest/services/?f=json", r.headers
        # A client that follows it stays on the proxy, and the key is injected again.
        r = s.get(base + "/rest/services?f=json", proxies={"http": p.url}, timeout=T)
        assert r.status_code == 200 and r.url == base + "/rest/services/?f=json", (r.status_code, r.url)
        assert seen[-1] == "/arcgis/rest/services/?f=json&token=UP-KEY", seen
        # Outside the upgraded prefix: left as the server wrote it (never sent to plain http).
        r = s.get(base + "/login", proxies={"http": p.url}, allow_redirects=False, timeout=T)
        assert r.headers["Location"] == "https://localhost:%d/portal/home/" % port
    finally:
        upstream.close()


# ---------------------------------------------------------------------------------------------------------
# 9. intercept = "none"
# ---------------------------------------------------------------------------------------------------------

def test_intercept_none_is_blind(proxy_factory, ca, origin_factory, certs, session):
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]},
                      extra_config=tls_section(ca, intercept="none") + cred("k", "api-key", lh(o), key="NONE-KEY")
                      + cred("t", "server-trust", lh(o), ca_file=certs["a"][0]))
    der, info = connect_tls(p, "localhost", o.port, cafile=certs["a"][0])
    assert der == pem_der(certs["a"][0])
    assert dn(info, "issuer").get("organizationName") == "upstream-a", info
    r = session.get(lh(o) + "/echo?f=json", proxies=p.proxies, verify=certs["a"][0], timeout=T)
    assert r.status_code == 200, r.text[:300]
    assert "token" not in query_of(r)  # nothing can be injected into a blind tunnel
    with pytest.raises(requests.exceptions.SSLError):
        session.get(lh(o) + "/echo", proxies=p.proxies, verify=ca.cert, timeout=T)
    assert not [l for l in p.log_lines() if "minted certificate" in l]


# ---------------------------------------------------------------------------------------------------------
# 10. ca init / ca export
# ---------------------------------------------------------------------------------------------------------

def test_ca_init_and_export(proxy_binary, tmp_path):
    d = tmp_path / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr
    c = CA(d)
    assert oct(os.stat(c.key).st_mode & 0o777) == "0o600"
    text = cert_text(c.cert)
    assert "CN = " + CA_CN in text or "CN=" + CA_CN in text, text
    assert "CA:TRUE, pathlen:0" in text, text
    assert "Certificate Sign" in text, text
    assert "P-256" in text or "prime256v1" in text, text
    assert "Name Constraints" not in text
    k = openssl("pkey", "-in", c.key, "-noout")
    assert k.returncode == 0, k.stderr

    e = harness.run_cli(["ca", "export", "--dir", str(d)])
    assert e.returncode == 0, e.stderr
    with open(c.cert) as f:
        pem = f.read()
    assert e.stdout.strip() == pem.strip()
    assert pem_der(c.cert) == ssl.PEM_cert_to_DER_cert(e.stdout)

    before = (open(c.cert).read(), open(c.key).read())
    again = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert again.returncode != 0, again.stdout
    assert (open(c.cert).read(), open(c.key).read()) == before

    # --constrain without a config that names hosts is refused.
    nc = harness.run_cli(["ca", "init", "--dir", str(tmp_path / "nc"), "--constrain"])
    assert nc.returncode != 0
    assert not os.path.exists(tmp_path / "nc" / "ca.key")


def test_upstream_tls_failure_does_not_break_the_client_session(proxy_factory, ca, origin_factory, certs, session):
    """libcurl's failed upstream handshake leaves errors in the thread's OpenSSL error queue; the client's
    TLS session on the same event loop must not mistake them for its own (it used to be dropped)."""
    b = origin_factory(tls=certs["b"])
    p = proxy_factory(proxy={"connect_ports": [443, b.port], "workers": 1},
                      extra_config=tls_section(ca) + cred("kb", "api-key", lh(b), key="KEY-B"))
    # Five requests over ONE intercepted client connection: each gets its 502 and the connection stays open
    # (a dropped session would make the next request fail, or, with a client that reconnects on its own, show
    # up as a new socket).
    conn = http.client.HTTPSConnection(p.host, p.port, context=ssl.create_default_context(cafile=ca.cert),
                                       timeout=T)
    conn.set_tunnel("localhost", b.port)
    try:
        sock = None
        for i in range(5):
            conn.request("GET", "/echo?f=json&i=%d" % i)
            r = conn.getresponse()
            harness.assert_error_json(r.status, r.getheader, r.read(), 502)
            assert not r.will_close, "the proxy closed the client's connection after the 502 of request %d" % i
            sock = sock or conn.sock
            assert conn.sock is sock, "the client's connection was replaced after %d requests" % i
    finally:
        conn.close()
    assert "TLS error from client" not in p.log_text()


def test_matched_host_without_tls_section_is_tunnelled_and_logged_once(proxy_factory, origin_factory, certs, session):
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]}, extra_config=cred("k", "api-key", lh(o), key="K"))
    for _ in range(3):
        r = session.get(lh(o) + "/echo?f=json", proxies=p.proxies, verify=certs["a"][0], timeout=T)
        assert r.status_code == 200
        assert "token" not in query_of(r)  # blind: the client talked TLS to the origin itself
    notices = [l for l in p.log_lines() if "credentials cannot be applied without [tls]" in l]
    assert len(notices) == 1, notices


def test_http2_is_refused_politely(proxy_factory, ca, origin_factory, certs):
    o = origin_factory(tls=certs["a"])
    p = proxy_factory(proxy={"connect_ports": [443, o.port]},
                      extra_config=tls_section(ca) + cred("ta", "server-trust", lh(o), ca_file=certs["a"][0]))
    c = harness.curl("--http2", "-x", p.url, "--cacert", ca.cert, "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                     lh(o) + "/json")
    assert c.returncode == 0, c.stderr
    assert c.stdout == b"1.1 200", c.stdout


def test_upgrade_to_https_gets_its_token_over_https(proxy_factory, certs):
    """With upgrade_to_https the password goes to the token service over https too (the https-only ArcGIS
    test server would not answer plain http at all)."""
    srv = ArcGISServer(role="server", tls=certs["a"], host="127.0.0.1")
    srv.httpd.base_url = "https://localhost:%d" % srv.port
    srv.start()
    try:
        root_http = "http://localhost:%d/arcgis" % srv.port
        p = proxy_factory(extra_config=cred("gis", "arcgis-token", root_http, username="alice", password="alice-pass",
                                            upgrade_to_https=True)
                          + cred("ta", "server-trust", "https://localhost:%d" % srv.port, ca_file=certs["a"][0]))
        s = requests.Session()
        s.trust_env = False
        r = s.get(root_http + "/rest/services/Secure/Points/FeatureServer/0/query?f=json", proxies=p.proxies, timeout=T)
        assert r.status_code == 200, r.text[:300]
        assert len(r.json()["features"]) == 3
        assert srv.stats()["tokens_issued"].get("generate_password") == 1
    finally:
        srv.stop()
