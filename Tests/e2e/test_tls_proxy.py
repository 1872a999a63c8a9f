"""The proxy over TLS (a "secure web proxy"): clients whose proxy URL is `https://` open TLS
to the proxy listener itself, and speak the proxy protocol inside it: absolute-form requests (credentials
injected), CONNECT (blind tunnels, and interception, which is then TLS inside TLS), and the `/proxy` endpoint.
Plain clients on the same port are unaffected.

Clients: curl (`--proxy https://… --proxy-cacert`), Python requests/urllib3 2 (an `https://` proxy URL), and
Esri's ArcGIS API for Python (`GIS(url, proxy_host=, proxy_port=)`, which makes `https://host:port` the proxy
for https URLs), run in a subprocess because the test server package `Tests/e2e/arcgis` shadows its name here.

Certificates: minted by the interception CA (`authproxy ca init`) for the address the client connects to, or
`[proxy] tls_cert`/`tls_key` files made with openssl. Everything on 127.0.0.1."""

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import urllib.parse

import pytest

import harness
from harness import cred
from arcgis import ArcGISServer

T = 30


class CA:
    def __init__(self, d):
        self.dir = str(d)
        self.cert = os.path.join(self.dir, "ca.pem")
        self.key = os.path.join(self.dir, "ca.key")


def tls_section(ca):
    return '\n[tls]\nca_cert = %s\nca_key = %s\n' % (json.dumps(ca.cert), json.dumps(ca.key))


def self_signed(d, name, cn="127.0.0.1"):
    cert, key = os.path.join(str(d), name + ".pem"), os.path.join(str(d), name + ".key")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-sha256", "-days", "2", "-subj", "/CN=%s/O=%s" % (cn, name),
                        "-keyout", key, "-out", cert,
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-addext", "basicConstraints=critical,CA:TRUE"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return cert, key


def proxy_url(p):
    return "https://%s" % p.authority


def query(resp_json):
    return urllib.parse.parse_qs(resp_json["query"])


def served_certificate(p, sni=None):
    """DER of the certificate the proxy listener shows a TLS client (not verified)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((p.host, p.port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname=sni) as t:
            return t.getpeercert(binary_form=True)


def pem_der(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


@pytest.fixture(scope="module")
def ca(proxy_binary, tmp_path_factory):
    d = tmp_path_factory.mktemp("tlsproxy-ca") / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr + r.stdout
    return CA(d)


@pytest.fixture(scope="module")
def upstream_cert(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tlsproxy-up"), "upstream", cn="localhost")


def test_curl_over_tls_http_origin_and_connect_blind_and_intercepted(proxy_factory, origin_factory, ca,
                                                                        upstream_cert):
    plain = origin_factory()
    matched = origin_factory(tls=upstream_cert)
    blind = origin_factory(tls=upstream_cert)
    p = proxy_factory(proxy={"connect_ports": [443, matched.port, blind.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", plain.url + "/echo", key="PLAINKEY")
                      + cred("m", "api-key", "https://localhost:%d/echo" % matched.port, key="TLSKEY")
                      + cred("t", "server-trust", "https://localhost:%d" % matched.port, ca_file=upstream_cert[0]))
    # An http:// origin, absolute form inside the TLS to the proxy: the token is injected.
    c = harness.curl("-sS", "--proxy", proxy_url(p), "--proxy-cacert", ca.cert, plain.url + "/echo?f=json")
    assert c.returncode == 0, c.stderr
    assert query(json.loads(c.stdout))["token"] == ["PLAINKEY"]
    # CONNECT to a matched host, intercepted: TLS inside TLS, the token injected inside.
    c = harness.curl("-sS", "--proxy", proxy_url(p), "--proxy-cacert", ca.cert, "--cacert", ca.cert,
                     "https://localhost:%d/echo?f=json" % matched.port)
    assert c.returncode == 0, c.stderr
    assert query(json.loads(c.stdout))["token"] == ["TLSKEY"]
    # CONNECT to an unmatched host: a blind tunnel inside the TLS to the proxy (the origin's own certificate).
    c = harness.curl("-sS", "--proxy", proxy_url(p), "--proxy-cacert", ca.cert, "--cacert", upstream_cert[0],
                     "https://localhost:%d/echo?f=json" % blind.port)
    assert c.returncode == 0, c.stderr
    assert "token" not in query(json.loads(c.stdout))
    # A larger body both ways through both layers (records split across reads).
    c = harness.curl("-sS", "--proxy", proxy_url(p), "--proxy-cacert", ca.cert, "--cacert", upstream_cert[0],
                     "-o", "/dev/null", "-w", "%{size_download}", "https://localhost:%d/bytes?n=3000000" % blind.port)
    assert c.returncode == 0 and c.stdout.strip() == b"3000000", (c.stdout, c.stderr)
    text = p.log_text()
    assert "PLAINKEY" not in text and "TLSKEY" not in text
    # The certificate minted for the listener's address (curl sends no SNI for an IP literal).
    assert any("minted certificate" in l and "host=127.0.0.1" in l for l in p.log_lines()), text[-3000:]


def test_requests_with_an_https_proxy_url(proxy_factory, origin_factory, ca, upstream_cert, session):
    plain = origin_factory()
    matched = origin_factory(tls=upstream_cert)
    p = proxy_factory(proxy={"connect_ports": [443, matched.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", plain.url, key="K1")
                      + cred("m", "api-key", "https://localhost:%d" % matched.port, key="K2")
                      + cred("t", "server-trust", "https://localhost:%d" % matched.port, ca_file=upstream_cert[0]))
    proxies = {"http": proxy_url(p), "https": proxy_url(p)}
    # urllib3 2 verifies the proxy with the same CA bundle as the origin: both are minted by the authproxy CA.
    for _ in range(2):  # kept-alive connections to the proxy carry the next request
        r = session.get(plain.url + "/echo?f=json", proxies=proxies, verify=ca.cert, timeout=T)
        assert r.status_code == 200, r.text[:300]
        assert query(r.json())["token"] == ["K1"]
        r = session.get("https://localhost:%d/echo?f=json" % matched.port, proxies=proxies, verify=ca.cert, timeout=T)
        assert r.status_code == 200, r.text[:300]
        assert query(r.json())["token"] == ["K2"]
    body = os.urandom(1_500_000)
    r = session.post("https://localhost:%d/upload" % matched.port, data=body, proxies=proxies, verify=ca.cert,
                     timeout=T)
    assert r.status_code == 200, r.text[:300]
    import hashlib
    assert r.json()["sha256"] == hashlib.sha256(body).hexdigest()


def test_plain_clients_on_the_same_port_unchanged(proxy_factory, origin_factory, ca, upstream_cert, session):
    plain = origin_factory()
    tls_origin = origin_factory(tls=upstream_cert)
    p = proxy_factory(proxy={"connect_ports": [443, tls_origin.port]},
                      extra_config=tls_section(ca) + cred("k", "api-key", plain.url, key="K1"))
    r = session.get(plain.url + "/echo?f=json", proxies=p.proxies, timeout=T)
    assert r.status_code == 200 and query(r.json())["token"] == ["K1"]
    r = session.get("https://localhost:%d/echo" % tls_origin.port, proxies=p.proxies, verify=upstream_cert[0],
                    timeout=T)
    assert r.status_code == 200, r.text[:300]
    c = harness.curl("-sS", "-x", p.url, plain.url + "/json")
    assert c.returncode == 0, c.stderr
    # And TLS right after, on the same listener.
    c = harness.curl("-sS", "--proxy", proxy_url(p), "--proxy-cacert", ca.cert, plain.url + "/json")
    assert c.returncode == 0, c.stderr


def test_tls_cert_files_proxy_endpoint_and_reload(proxy_factory, origin, tmp_path, session):
    cert, key = self_signed(tmp_path, "first")
    app = "https://maps.example.test"
    p = proxy_factory(proxy={"tls_cert": cert, "tls_key": key, "allowed_origins": [app]},
                      extra_config=cred("k", "api-key", origin.url, key="JSKEY"))
    assert served_certificate(p) == pem_der(cert)
    c = harness.curl("-sS", "--proxy", proxy_url(p), "--proxy-cacert", cert, origin.url + "/echo")
    assert c.returncode == 0, c.stderr
    assert query(json.loads(c.stdout))["token"] == ["JSKEY"]
    # An https web app calls the /proxy endpoint directly (no TLS terminator in front).
    r = session.get("https://%s/proxy?%s/echo?f=json" % (p.authority, origin.url), headers={"Origin": app},
                    verify=cert, timeout=T)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["Access-Control-Allow-Origin"] == app
    assert query(r.json())["token"] == ["JSKEY"]
    # A renewed certificate at the same paths is picked up on reload.
    new_cert, new_key = self_signed(tmp_path, "second")
    os.replace(new_cert, cert)
    os.replace(new_key, key)
    p.signal(signal.SIGHUP)
    assert p.wait_for_log("configuration reloaded", timeout=10), p.log_text()[-3000:]
    second = pem_der(cert)
    assert served_certificate(p) == second
    c = harness.curl("-sS", "--proxy", proxy_url(p), "--proxy-cacert", cert, origin.url + "/echo")
    assert c.returncode == 0, c.stderr
    # A key that does not belong to the certificate: the reload is rejected, the running one stays.
    other_cert, _ = self_signed(tmp_path, "third")
    os.replace(other_cert, cert)
    p.signal(signal.SIGHUP)
    lines = p.wait_for_log("configuration reload rejected", timeout=10)
    assert lines and "does not belong" in lines[0], p.log_text()[-3000:]
    assert served_certificate(p) == second


def test_no_certificate_source_closes_a_client_hello_and_names_the_setting(proxy_factory, origin, session):
    p = proxy_factory()
    ctx = ssl.create_default_context()
    with socket.create_connection((p.host, p.port), timeout=10) as s:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            ctx.wrap_socket(s, server_hostname="localhost")
    lines = p.wait_for_log("opened TLS to the proxy", timeout=5)
    assert lines, p.log_text()[-3000:]
    assert "tls_cert" in lines[0] and "[tls]" in lines[0], lines[0]
    # The listener keeps serving plain clients.
    r = session.get(origin.url + "/json", proxies=p.proxies, timeout=T)
    assert r.status_code == 200


def test_check_says_whether_and_how_the_listener_serves_tls(proxy_binary, tmp_path, ca):
    cert, key = self_signed(tmp_path, "chk")
    base = '[proxy]\nlisten = ["127.0.0.1:3128"]\nstate_dir = %s\n' % json.dumps(str(tmp_path / "state"))
    cases = [
        (base, "off: a client that opens TLS"),
        (base + tls_section(ca), "minted by the interception CA"),
        (base.replace("[proxy]\n", "[proxy]\ntls_cert = %s\ntls_key = %s\n" % (json.dumps(cert), json.dumps(key)))
         + tls_section(ca), "certificate %s" % cert),
    ]
    for i, (text, expected) in enumerate(cases):
        f = tmp_path / ("c%d.toml" % i)
        f.write_text(text)
        r = harness.run_cli(["check", "--config", str(f)])
        assert r.returncode == 0, r.stderr
        line = [l for l in r.stdout.splitlines() if "proxy over TLS" in l]
        assert line and expected in line[0], r.stdout
    f = tmp_path / "half.toml"
    f.write_text(base.replace("[proxy]\n", "[proxy]\ntls_cert = %s\n" % json.dumps(cert)))
    r = harness.run_cli(["check", "--config", str(f)])
    assert r.returncode != 0 and "proxy.tls_key" in r.stderr, r.stderr


def _arcgis_api_available():
    r = subprocess.run([sys.executable, "-c", "import arcgis.gis, arcgis.features"], capture_output=True,
                       cwd="/", timeout=120, env=harness.clean_env())
    return r.returncode == 0, r.stderr.decode(errors="replace")[-300:]


ARCGIS_CLIENT = textwrap.dedent("""
    import json, sys
    from arcgis.gis import GIS
    from arcgis.features import FeatureLayer
    portal, layer, host, port, mode = sys.argv[1:6]
    if mode == "proxy_host":
        # As Esri's documentation shows: the library makes https://host:port the proxy for https URLs.
        gis = GIS(portal, proxy_host=host, proxy_port=int(port), trust_env=True)
    else:
        gis = GIS(portal, proxy={"http": "http://%s:%s" % (host, port), "https": "http://%s:%s" % (host, port)},
                  trust_env=True)
    print(json.dumps({"features": len(FeatureLayer(layer, gis=gis).query(where="1=1").features)}))
""")


@pytest.mark.parametrize("mode", ["proxy_host", "proxy_dict"])
def test_arcgis_api_for_python_reads_a_secured_layer_anonymously(proxy_factory, ca, upstream_cert, tmp_path, mode):
    ok, why = _arcgis_api_available()
    if not ok:
        pytest.skip("the ArcGIS API for Python (PyPI arcgis) is not installed: %s" % why)
    s = ArcGISServer(role="both", ttl=60, tls=upstream_cert, federate_self=True)
    s.httpd.base_url = "https://localhost:%d" % s.port
    s.start()
    try:
        p = proxy_factory(proxy={"connect_ports": [443, s.port]},
                          extra_config=tls_section(ca)
                          + cred("gis", "arcgis-token", [s.portal_url, s.server_root], username="alice",
                                 password="alice-pass")
                          + cred("trust", "server-trust", "https://localhost:%d" % s.port, ca_file=upstream_cert[0]))
        script = tmp_path / "client.py"
        script.write_text(ARCGIS_CLIENT)
        layer = s.query_url().rsplit("/query", 1)[0]
        # The client trusts the authproxy CA (for the proxy's certificate and the intercepted portal) through
        # REQUESTS_CA_BUNDLE, which the library reads with trust_env=True.
        env = harness.clean_env({"REQUESTS_CA_BUNDLE": ca.cert})
        r = subprocess.run([sys.executable, str(script), s.portal_url, layer, p.host, str(p.port), mode],
                           capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=180)
        assert r.returncode == 0, r.stderr[-3000:] + p.log_text()[-3000:]
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert out["features"] == 3, out
        st = s.stats()
        assert st["rejected_498"] == 0 and st["rejected_499"] == 0, st
        assert st["tokens_issued_total"] >= 1, st
        queries = [e for e in s.request_log() if e["kind"] == "query"]
        assert queries and all(e["outcome"] == "ok" for e in queries), queries
        minted_for_proxy = any("minted certificate" in l and "host=127.0.0.1" in l for l in p.log_lines())
        # proxy_host makes the library speak TLS to the proxy; the proxy dict with http:// does not.
        assert minted_for_proxy == (mode == "proxy_host"), p.log_text()[-3000:]
        assert "alice-pass" not in p.log_text()
    finally:
        s.stop()
