"""WebSocket inside intercepted TLS, the ArcGIS stream-service case (issue 38): a client opens `wss://` to a matched
host through `CONNECT host:port`, the proxy intercepts the tunnel with its `[tls]` CA, puts the credential on the
handshake, relays the handshake upstream over TLS (verified with the host's `server-trust`), and after the `101`
relays the two TLS streams with back-pressure, half-close and `tunnel_idle_timeout_seconds`. The same through a
Squid parent, over the proxy-over-TLS listener, in absolute form (`GET wss://...`), and from Chromium; an
unmatched `wss://` host stays a blind tunnel.

The upstream is a token-checking TLS WebSocket echo server (wsecho.EchoServer) on 127.0.0.1, addressed as
`localhost` (its certificate carries DNS:localhost and IP:127.0.0.1)."""
import base64
import hashlib
import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

websockets = pytest.importorskip("websockets", minversion="15")
from websockets.sync.client import connect as ws_connect  # noqa: E402

import harness  # noqa: E402
from harness import cred  # noqa: E402
from arcgis import ArcGISServer  # noqa: E402
from parents.fixtures import parents_dir, squid_basic  # noqa: E402,F401
from parents import rig as parents_rig  # noqa: E402
from wsecho import FLOOD_FRAME, FLOOD_FRAMES, PATH, EchoServer, frame, handshake_bytes, read_frame  # noqa: E402

T = 30
KEY = "WSS-KEY"


class CA:
    def __init__(self, d):
        self.cert = os.path.join(str(d), "ca.pem")
        self.key = os.path.join(str(d), "ca.key")


@pytest.fixture(scope="module")
def ca(proxy_binary, tmp_path_factory):
    d = tmp_path_factory.mktemp("wss-ca") / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr + r.stdout
    return CA(d)


def server_context(tls_cert):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls_cert[0], tls_cert[1])
    return ctx


def trusting(cafile):
    """A client context that trusts only `cafile`."""
    return ssl.create_default_context(cafile=cafile)


@pytest.fixture
def upstream(tls_cert):
    s = EchoServer(accept=lambda t: t == KEY, ssl_context=server_context(tls_cert)).start()
    yield s
    s.stop()


def url(s, scheme="wss", path=PATH):
    return s.url(scheme, path, host="localhost")


def tls_section(ca):
    return '\n[tls]\nca_cert = %s\nca_key = %s\nintercept = "matched"\n' % (json.dumps(ca.cert), json.dumps(ca.key))


def intercepting(ca, s, tls_cert, key=KEY):
    """[tls] with the CA, an api-key for the server's stream services, and its server-trust."""
    return (tls_section(ca) + cred("stream", "api-key", "https://localhost:%d/arcgis" % s.port, key=key)
            + cred("trust", "server-trust", "https://localhost:%d" % s.port, ca_file=tls_cert[0]))


def issuer_cn(der):
    r = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-issuer"], input=der, capture_output=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


def pem_der(path):
    with open(path) as f:
        return ssl.PEM_cert_to_DER_cert(f.read())


def connect_tls(p, port, ctx, host="localhost"):
    """CONNECT host:port through the proxy on a raw socket, then TLS inside with `ctx` (ragged EOFs reported, so a
    missing close_notify shows)."""
    s = socket.create_connection((p.host, p.port), timeout=T)
    s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
    head = harness.read_head(s)
    assert head.startswith(b"HTTP/1.1 200"), head
    return ctx.wrap_socket(s, server_hostname=host, suppress_ragged_eofs=False)


def raw_handshake(sock, target, host):
    sock.sendall(handshake_bytes(target, host))
    head, _, rest = harness.read_head(sock).partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


# ---------------------------------------------------------------------------------------------------------
# Through interception: frames both ways, the token on the handshake, unseen by the client
# ---------------------------------------------------------------------------------------------------------

def test_wss_through_an_intercepted_connect_gets_the_token(proxy_factory, ca, upstream, tls_cert):
    p = proxy_factory(extra_config=intercepting(ca, upstream, tls_cert))
    with ws_connect(url(upstream), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T) as ws:
        # The client talks TLS with the proxy (a certificate of the proxy's CA), not with the server.
        assert "authproxy" in issuer_cn(ws.socket.getpeercert(binary_form=True))
        ws.send("ping over intercepted tls")
        assert ws.recv(timeout=T) == "ping over intercepted tls"
        ws.send(b"\x00\x01binary" * 5000)
        assert ws.recv(timeout=T) == b"\x00\x01binary" * 5000
        answer = str(ws.response.headers)
    assert upstream.tokens() == [KEY], upstream.handshakes
    assert KEY not in answer
    assert KEY not in p.log_text()
    assert p.wait_for_log(lambda l: "upgrade=websocket" in l, timeout=10)
    line = [l for l in p.log_lines() if "upgrade=websocket" in l][-1]
    kv = harness.parse_kv(line)
    assert kv["status"] == "101" and kv["credential"] == "stream", line
    assert kv["url"] == "https://localhost:%d%s" % (upstream.port, PATH), line


def ags_valid(ags):
    def accept(token):
        with ags.state.lock:
            t = ags.state.tokens.get(token)
            epoch = ags.state.expire_epoch
        return t is not None and not t.revoked and time.time() < t.expires and t.issued > epoch
    return accept


def test_a_revoked_token_is_refreshed_once_on_the_handshake(proxy_factory, ca, tls_cert):
    ags = ArcGISServer(role="server", ttl=60).start()
    s = EchoServer(accept=ags_valid(ags), status=498, ssl_context=server_context(tls_cert)).start()
    try:
        p = proxy_factory(extra_config=tls_section(ca)
                          + cred("stream", "arcgis-token", "https://localhost:%d/arcgis" % s.port, username="alice",
                                 password="alice-pass", token_url=ags.server_root + "/tokens/generateToken")
                          + cred("trust", "server-trust", "https://localhost:%d" % s.port, ca_file=tls_cert[0]))
        with ws_connect(url(s), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T) as ws:
            ws.send("one")
            assert ws.recv(timeout=T) == "one"
        first = s.tokens()[0]
        assert first and s.outcomes() == ["ok"], s.handshakes
        ags.revoke_all()  # the server now rejects the cached token with an ArcGIS 498
        with ws_connect(url(s), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T) as ws:
            ws.send("two")
            assert ws.recv(timeout=T) == "two"
        tokens = s.tokens()
        assert s.outcomes() == ["ok", "498", "ok"], s.handshakes
        assert tokens[1] == first and tokens[2] not in (None, first), tokens
        assert p.wait_for_log(lambda l: "token rejected, refreshing and retrying" in l)
    finally:
        s.stop()
        ags.stop()


# ---------------------------------------------------------------------------------------------------------
# Back-pressure: 50 MB to a slow reader
# ---------------------------------------------------------------------------------------------------------

def test_50_mb_to_a_slow_reader_keeps_memory_bounded(proxy_factory, ca, upstream, tls_cert):
    p = proxy_factory(extra_config=intercepting(ca, upstream, tls_cert))
    before = p.rss()
    t = connect_tls(p, upstream.port, trusting(ca.cert))
    got = 0
    try:
        head, buf = raw_handshake(t, PATH, "localhost:%d" % upstream.port)
        assert head.startswith("HTTP/1.1 101"), head
        t.sendall(frame(b"flood"))
        t.settimeout(60)
        deadline = time.monotonic() + 240
        for _ in range(FLOOD_FRAMES):
            assert time.monotonic() < deadline, "slow read took too long"
            op, payload, buf = read_frame(t, buf)
            assert op == 2
            got += len(payload)
            time.sleep(0.05)  # a slow reader: the server is far ahead, the proxy must hold it back
    finally:
        t.close()
    assert got == FLOOD_FRAMES * FLOOD_FRAME
    grew = p.hwm() - before
    assert grew < 24 * 1024 * 1024, "proxy peak RSS grew by %d bytes" % grew


# ---------------------------------------------------------------------------------------------------------
# Half-close and close, both ways; the idle timeout
# ---------------------------------------------------------------------------------------------------------

def wait_closes(server, timeout=10):
    """The server's record of how its connections ended, once there is one (its handler ends after the TCP close)."""
    deadline = time.monotonic() + timeout
    while not server.closes and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.closes


def test_the_server_closing_reaches_the_client_as_a_close_notify(proxy_factory, ca, upstream, tls_cert):
    p = proxy_factory(extra_config=intercepting(ca, upstream, tls_cert))
    t = connect_tls(p, upstream.port, trusting(ca.cert))
    try:
        head, buf = raw_handshake(t, PATH, "localhost:%d" % upstream.port)
        assert head.startswith("HTTP/1.1 101"), head
        t.sendall(frame(b"bye"))
        op, payload, buf = read_frame(t, buf)
        assert op == 8 and payload[:2] == (4001).to_bytes(2, "big"), (op, payload)
        t.sendall(frame(payload[:2], opcode=8))  # the client's answer to the close
        # The server closes its TCP connection: the proxy passes the end on as TLS close_notify (a ragged EOF would
        # raise SSLEOFError here) while the client's side is still open.
        t.settimeout(T)
        assert t.recv(100) == b""
    finally:
        t.close()
    assert p.wait_for_log(lambda l: "upgrade=websocket" in l, timeout=10)
    assert wait_closes(upstream) == [4001]


def test_the_client_closing_ends_the_tunnel(proxy_factory, ca, upstream, tls_cert):
    p = proxy_factory(proxy={"tunnel_idle_timeout_seconds": 60}, extra_config=intercepting(ca, upstream, tls_cert))
    with ws_connect(url(upstream), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T) as ws:
        ws.send("x")
        assert ws.recv(timeout=T) == "x"
        started = time.monotonic()
        ws.close()
    # Both ends were passed on (not the idle timeout): the relay logs its line at once.
    assert p.wait_for_log(lambda l: "upgrade=websocket" in l, timeout=10)
    assert time.monotonic() - started < 10
    assert wait_closes(upstream) == [1000]


def test_an_idle_websocket_is_closed_after_the_tunnel_idle_timeout(proxy_factory, ca, upstream, tls_cert):
    p = proxy_factory(proxy={"tunnel_idle_timeout_seconds": 2}, extra_config=intercepting(ca, upstream, tls_cert))
    with ws_connect(url(upstream), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T, ping_interval=None) as ws:
        ws.send("x")
        assert ws.recv(timeout=T) == "x"
        started = time.monotonic()
        with pytest.raises(websockets.exceptions.ConnectionClosed):
            ws.recv(timeout=20)
        waited = time.monotonic() - started
    assert 1.5 < waited < 10, waited
    assert p.wait_for_log(lambda l: "upgrade=websocket" in l, timeout=10)


# ---------------------------------------------------------------------------------------------------------
# Through a parent proxy (Squid)
# ---------------------------------------------------------------------------------------------------------

def test_wss_through_interception_and_a_squid_parent(proxy_factory, squid_basic, ca, upstream, tls_cert):
    sq = squid_basic
    corp = ('\n[[credential]]\nname = "corp"\ntype = "password"\nusername = "alice"\npassword = %s\n'
            % json.dumps(parents_rig.USERS["alice"]))
    p = proxy_factory(proxy={"upstream_proxy": sq.url, "upstream_proxy_credential": "corp"},
                      extra_config=intercepting(ca, upstream, tls_cert) + corp)
    with ws_connect(url(upstream), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T) as ws:
        ws.send("via squid")
        assert ws.recv(timeout=T) == "via squid"
    assert upstream.tokens() == [KEY], upstream.handshakes
    # The handshake went upstream through a CONNECT tunnel of Squid's (logged when it closes).
    authority = "localhost:%d" % upstream.port
    lines = sq.wait_access(lambda l: "TCP_TUNNEL/200" in l and " CONNECT %s " % authority in l, timeout=10)
    assert [parents_rig.parse_access_line(l)["user"] for l in lines] == ["alice"], sq.access_log_lines()[-5:]


# ---------------------------------------------------------------------------------------------------------
# An unmatched wss:// host: a blind tunnel
# ---------------------------------------------------------------------------------------------------------

def test_an_unmatched_wss_host_stays_a_blind_tunnel(proxy_factory, ca, tls_cert):
    s = EchoServer(ssl_context=server_context(tls_cert)).start()
    try:
        other = harness.free_port()
        p = proxy_factory(proxy={"connect_ports": [s.port]},
                          extra_config=tls_section(ca) + cred("elsewhere", "api-key",
                                                              "https://localhost:%d/arcgis" % other, key="NOPE"))
        # The client trusts only the server's own certificate: a minted one would fail its check.
        with ws_connect(url(s), proxy=p.url, ssl=trusting(tls_cert[0]), open_timeout=T) as ws:
            assert ws.socket.getpeercert(binary_form=True) == pem_der(tls_cert[0])
            ws.send("blind")
            assert ws.recv(timeout=T) == "blind"
        assert s.tokens() == [None], s.handshakes
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------------------------
# The proxy-over-TLS listener, and the absolute form
# ---------------------------------------------------------------------------------------------------------

def test_wss_inside_the_proxy_over_tls_listener(proxy_factory, ca, upstream, tls_cert):
    p = proxy_factory(extra_config=intercepting(ca, upstream, tls_cert))
    # TLS to the proxy (its certificate minted by the CA), a CONNECT inside, and intercepted TLS inside that.
    with ws_connect(url(upstream), proxy="https://%s" % p.authority, proxy_ssl=trusting(ca.cert),
                    ssl=trusting(ca.cert), open_timeout=T) as ws:
        ws.send("tls in tls")
        assert ws.recv(timeout=T) == "tls in tls"
        ws.send("flood")
        for _ in range(FLOOD_FRAMES):
            assert len(ws.recv(timeout=T)) == FLOOD_FRAME
    assert upstream.tokens() == [KEY], upstream.handshakes


@pytest.mark.parametrize("listener", ["plain", "tls"])
def test_absolute_form_get_wss(proxy_factory, ca, upstream, tls_cert, listener):
    p = proxy_factory(extra_config=intercepting(ca, upstream, tls_cert))
    s = socket.create_connection((p.host, p.port), timeout=T)
    if listener == "tls":
        s = trusting(ca.cert).wrap_socket(s, server_hostname=p.host)
    try:
        head, buf = raw_handshake(s, url(upstream), "localhost:%d" % upstream.port)
        assert head.startswith("HTTP/1.1 101"), head
        s.sendall(frame(b"absolute"))
        op, payload, buf = read_frame(s, buf)
        assert (op, payload) == (1, b"absolute")
    finally:
        s.close()
    assert upstream.tokens() == [KEY], upstream.handshakes


def test_the_proxy_endpoint_relays_wss(proxy_factory, ca, upstream, tls_cert):
    """A web app's `new WebSocket("ws://proxy/proxy?wss://host/...")` (the `/proxy` endpoint, its origin allowed)."""
    app = "http://app.example.test"
    p = proxy_factory(proxy={"allowed_origins": [app]}, extra_config=intercepting(ca, upstream, tls_cert))
    s = socket.create_connection((p.host, p.port), timeout=T)
    try:
        hs = handshake_bytes("/proxy?" + url(upstream), p.authority).replace(
            b"\r\n\r\n", b"\r\nOrigin: %s\r\n\r\n" % app.encode())
        s.sendall(hs)
        head, _, buf = harness.read_head(s).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        s.sendall(frame(b"through /proxy"))
        op, payload, buf = read_frame(s, buf)
        assert (op, payload) == (1, b"through /proxy")
    finally:
        s.close()
    assert upstream.tokens() == [KEY], upstream.handshakes


# ---------------------------------------------------------------------------------------------------------
# Chromium
# ---------------------------------------------------------------------------------------------------------

PAGE = """<!doctype html><title>wss</title><script>
const ws = new WebSocket(%s);
ws.onopen = () => ws.send("from chromium");
ws.onmessage = (e) => { fetch("/report?echo=" + encodeURIComponent(e.data)); ws.close(); };
ws.onerror = () => fetch("/report?error=1");
</script>"""


class PageOrigin:
    """A loopback origin serving the page that opens the WebSocket, and collecting its report."""

    def __init__(self, ws_url):
        self.reports = []
        page = (PAGE % json.dumps(ws_url)).encode()
        reports = self.reports

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.startswith("/report"):
                    reports.append(self.path)
                body = page if self.path == "/" else b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/html" if self.path == "/" else "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def minted_spki(p, port):
    """base64 SHA-256 of the public key the proxy's minted certificates carry (Chromium's
    --ignore-certificate-errors-spki-list)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    t = connect_tls(p, port, ctx)
    try:
        der = t.getpeercert(binary_form=True)
    finally:
        t.close()
    pub = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-pubkey"], input=der, capture_output=True,
                         timeout=30, check=True).stdout
    spki = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=pub, capture_output=True,
                          timeout=30, check=True).stdout
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def test_chromium_opens_wss_from_a_page_through_the_proxy(proxy_factory, ca, upstream, tls_cert, tmp_path):
    from test_admin import chromium
    p = proxy_factory(extra_config=intercepting(ca, upstream, tls_cert))
    page = PageOrigin(url(upstream))
    browser = None
    try:
        spki = minted_spki(p, upstream.port)
        browser = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=%s" % (tmp_path / "chr"),
             "--proxy-server=%s" % p.url, "--proxy-bypass-list=<-loopback>",
             "--ignore-certificate-errors-spki-list=%s" % spki, "--remote-debugging-port=0",
             "http://127.0.0.1:%d/" % page.port],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not page.reports and time.monotonic() < deadline and browser.poll() is None:
            time.sleep(0.2)
        assert page.reports == ["/report?echo=from%20chromium"], (page.reports, upstream.handshakes)
    finally:
        if browser is not None:
            browser.terminate()
            try:
                browser.wait(10)
            except subprocess.TimeoutExpired:
                browser.kill()
                browser.wait(10)
        page.stop()
    assert upstream.tokens() == [KEY], upstream.handshakes


def test_wss_to_a_server_that_wants_a_client_certificate_presents_the_credential(proxy_factory, ca, tls_cert,
                                                                                  tmp_path):
    """A `certificate` credential on a WebSocket host: the connector's TLS presents it in the handshake to the server,
    which refuses any connection without one signed by its client CA."""
    d = tmp_path / "clients"
    d.mkdir()

    def openssl(*args):
        r = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", "/CN=client-ca", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=stream-reader",
            "-keyout", str(d / "client.key"), "-out", str(d / "client.csr"))
    openssl("x509", "-req", "-in", str(d / "client.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-days", "2", "-out", str(d / "client.pem"))
    ctx = server_context(tls_cert)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(str(d / "ca.pem"))
    s = EchoServer(ssl_context=ctx).start()
    try:
        conf = (tls_section(ca)
                + cred("pki", "certificate", "https://localhost:%d" % s.port, cert=str(d / "client.pem"),
                       key=str(d / "client.key"))
                + cred("trust", "server-trust", "https://localhost:%d" % s.port, ca_file=tls_cert[0]))
        p = proxy_factory(extra_config=conf)
        with ws_connect(url(s), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T) as ws:
            ws.send("with a client certificate")
            assert ws.recv(timeout=T) == "with a client certificate"
        assert p.wait_for_log(lambda l: "upgrade=websocket" in l and "credential=pki" in l and "status=101" in l,
                              timeout=10)
        # Without the credential the server refuses the TLS handshake: the certificate is what let it in.
        p.stop()
        p = proxy_factory(extra_config=tls_section(ca) + cred(
            "trust", "server-trust", "https://localhost:%d" % s.port, ca_file=tls_cert[0]))
        with pytest.raises(Exception):
            with ws_connect(url(s), proxy=p.url, ssl=trusting(ca.cert), open_timeout=T) as ws:
                ws.send("without")
                ws.recv(timeout=T)
    finally:
        s.stop()
