"""CONNECT tunnels."""

import hashlib
import json
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest

import harness
from httpraw import RawConn, request_bytes
from origin import JSON_DOC, pattern, pattern_sha256

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def tls_origin_process(tls_cert):
    """HTTPS origin run as a subprocess (exercises origin.py's CLI mode)."""
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "origin.py"), "--port", "0",
                          "--print-port", "--tls", tls_cert[0], tls_cert[1]],
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        port = int(p.stdout.readline())
        yield port
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def _connect(proxy, target, timeout=10):
    c = RawConn(proxy.host, proxy.port, timeout=timeout)
    c.send(request_bytes("CONNECT", target, [("Host", target)]))
    r = c.read_response(method="CONNECT")
    return c, r


def test_curl_https_through_connect(proxy_factory, tls_origin_process, tls_cert, tmp_path):
    port = tls_origin_process
    p = proxy_factory(proxy={"connect_ports": [port]})
    body = tmp_path / "b"
    r = harness.curl("-x", p.url, "--cacert", tls_cert[0], "-o", str(body), "-w", "%{http_code}",
                     "https://127.0.0.1:%d/json" % port)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"200"
    assert json.loads(body.read_bytes()) == JSON_DOC
    # localhost name + SAN
    r = harness.curl("-x", p.url, "--cacert", tls_cert[0], "https://localhost:%d/json" % port)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == JSON_DOC


def test_requests_https_through_connect(proxy_factory, origin_factory, tls_cert, session):
    o = origin_factory(tls=tls_cert)
    p = proxy_factory(proxy={"connect_ports": [443, o.port]})
    r = session.get(o.url + "/echo?x=1", proxies=p.proxies, verify=tls_cert[0], timeout=15)
    assert r.status_code == 200
    e = r.json()
    assert e["query"] == "x=1"
    # blind tunnel: the proxy cannot (and must not) touch headers inside TLS
    assert not [v for k, v in e["headers"] if k.lower() == "via"]
    n = 5_000_000
    r = session.get(o.url + "/bytes?n=%d" % n, proxies=p.proxies, verify=tls_cert[0], timeout=30)
    assert len(r.content) == n and hashlib.sha256(r.content).hexdigest() == pattern_sha256(n)
    r = session.post(o.url + "/upload", data=pattern(n), proxies=p.proxies,
                     verify=tls_cert[0], timeout=30)
    assert r.json()["sha256"] == pattern_sha256(n)


def test_connect_raw_status_line_and_tls(proxy_factory, origin_factory, tls_cert):
    o = origin_factory(tls=tls_cert)
    p = proxy_factory(proxy={"connect_ports": [o.port]})
    c, r = _connect(p, "127.0.0.1:%d" % o.port)
    with c:
        assert r.status == 200, r
        assert r.version == "HTTP/1.1"
        assert r.reason.lower() == "connection established", r.reason
        assert not r.has("Transfer-Encoding") and r.get("Content-Length", "0") == "0", r.headers
        assert not c.buf, "bytes after the CONNECT response head: %r" % bytes(c.buf)
        ctx = ssl.create_default_context(cafile=tls_cert[0])
        with ctx.wrap_socket(c.sock, server_hostname="localhost") as t:
            t.sendall(b"GET /json HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                b = t.recv(65536)
                if not b:
                    break
                data += b
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        assert json.loads(body) == JSON_DOC


def test_connect_tunnel_half_close(proxy_factory, halfclose_server):
    p = proxy_factory(proxy={"connect_ports": [halfclose_server.port]})
    payload = pattern(8 * 1024 * 1024 + 3)
    c, r = _connect(p, "127.0.0.1:%d" % halfclose_server.port, timeout=20)
    with c:
        assert r.status == 200, r
        c.send(payload)
        c.sock.shutdown(socket.SHUT_WR)  # half-close: server must see EOF, we keep reading
        data = c.read_to_eof()
    line, _, rest = data.partition(b"\n")
    assert line == b"got %d %s" % (len(payload), hashlib.sha256(payload).hexdigest().encode()), line[:200]
    assert rest == payload, "tunnel did not relay the reply after client half-close"


def test_connect_disallowed_port_403(proxy, origin):
    # default connect_ports = [443]; the origin's port is not allowed
    c, r = _connect(proxy, "127.0.0.1:%d" % origin.port)
    c.close()
    err = harness.assert_error_json(r.status, r.get, r.body, 403)
    assert err
    time.sleep(0.3)
    assert origin.stats()["connections"] == 0, "proxy connected to a disallowed port"


def test_connect_allowed_but_refused_502(proxy_factory):
    port = harness.closed_port()
    p = proxy_factory(proxy={"connect_ports": [port]})
    c, r = _connect(p, "127.0.0.1:%d" % port)
    c.close()
    harness.assert_error_json(r.status, r.get, r.body, 502)
