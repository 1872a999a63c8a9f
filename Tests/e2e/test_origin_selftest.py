"""Sanity checks of the test origin itself (no proxy involved).  They make sure
that the counters and payloads the proxy tests rely on are trustworthy."""

import hashlib
import http.client
import json
import os
import subprocess
import sys

import harness
from httpraw import RawConn, request_bytes, wait_until
from origin import COOKIES, ESRI_DOC, GZIP_BODY, JSON_DOC, pattern, pattern_sha256


def test_origin_basic_endpoints(origin):
    c = http.client.HTTPConnection("127.0.0.1", origin.port, timeout=10)
    c.request("GET", "/json")
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read()) == JSON_DOC
    c.request("GET", "/esri/query?f=json")
    r = c.getresponse()
    doc = json.loads(r.read())
    assert doc == ESRI_DOC and len(doc["features"]) == 3
    c.request("GET", "/cookies")
    r = c.getresponse()
    r.read()
    assert r.msg.get_all("Set-Cookie") == COOKIES
    c.request("GET", "/gzip")
    r = c.getresponse()
    assert r.read() == GZIP_BODY and r.getheader("Content-Encoding") == "gzip"
    c.request("POST", "/echo?x=1", body=b"hello", headers={"X-A": "1"})
    r = c.getresponse()
    e = json.loads(r.read())
    assert e["method"] == "POST" and e["query"] == "x=1" and e["body_length"] == 5
    assert e["body_sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert e["conn_requests"] == 4 + 1
    c.close()
    s = origin.stats()
    assert s["connections"] == 1 and s["requests"] == 5


def test_origin_stream_framings(origin):
    n = 1_000_003
    for path, te in (("/bytes", None), ("/chunked", "chunked"), ("/close", None)):
        with RawConn("127.0.0.1", origin.port) as c:
            c.send(request_bytes("GET", "%s?n=%d" % (path, n), [("Host", origin.authority)]))
            r = c.read_response()
            assert r.status == 200
            assert r.get("Transfer-Encoding") == te
            assert len(r.body) == n and hashlib.sha256(r.body).hexdigest() == pattern_sha256(n)
    assert pattern(300) == bytes(i % 251 for i in range(300))


def test_origin_counts_aborted_transfers(origin):
    with RawConn("127.0.0.1", origin.port) as c:
        c.send(request_bytes("GET", "/bytes?n=%d" % (1 << 30), [("Host", origin.authority)]))
        c.read_response(body=False)
        c.read_exact(1 << 20)
    assert wait_until(lambda: origin.stats()["aborted"] == 1, 5), origin.stats()
    assert origin.stats()["body_bytes_sent"] < 200 * harness.MB


def test_origin_subprocess_tls(tls_cert):
    here = os.path.dirname(os.path.abspath(__file__))
    p = subprocess.Popen([sys.executable, os.path.join(here, "origin.py"), "--port", "0",
                          "--print-port", "--tls", tls_cert[0], tls_cert[1]],
                         stdout=subprocess.PIPE, text=True)
    try:
        port = int(p.stdout.readline())
        r = subprocess.run(["curl", "-sS", "--noproxy", "*", "--max-time", "10", "--cacert",
                            tls_cert[0], "https://127.0.0.1:%d/json" % port],
                           capture_output=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == JSON_DOC
    finally:
        p.terminate()
        p.wait(10)


def test_localhost_servers_hold_their_port_on_ipv6_too(tls_cert):
    """Tests address the origin, the ArcGIS server and the WebSocket echo server as `localhost`, which resolves to ::1
    first. A release-build CI run once hung 30 s in a `wss://localhost:PORT` test: the port the kernel gave the echo
    server on 127.0.0.1 was in use on ::1 by another listener, which took the proxy's TLS connection and never
    answered. Each of them now holds [::1]:PORT (bound, not listening), so a connect there is refused and the client
    goes on to 127.0.0.1."""
    import socket
    import ssl

    from arcgis import ArcGISServer
    from origin import OriginServer
    from wsecho import EchoServer

    if not harness.ipv6_available():
        import pytest
        pytest.skip("::1 not available")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*tls_cert)
    servers = [OriginServer().start(), ArcGISServer(role="server").start(), EchoServer(ssl_context=ctx).start()]
    try:
        for s in servers:
            other = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            try:
                other.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    other.bind(("::1", s.port))
                    other.listen(1)
                    raise AssertionError("%s: [::1]:%d was free for another listener" % (type(s).__name__, s.port))
                except OSError as e:
                    assert e.errno == 98, e  # EADDRINUSE
            finally:
                other.close()
            with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as c6:
                c6.settimeout(5)
                assert c6.connect_ex(("::1", s.port)) != 0  # refused at once: nothing listens there
            with socket.create_connection(("localhost", s.port), timeout=5) as c:
                assert c.getpeername()[0] == "127.0.0.1"
    finally:
        for s in servers:
            s.stop()
