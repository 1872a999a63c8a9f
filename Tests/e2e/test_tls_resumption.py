"""TLS session resumption where the proxy is the TLS server: a client that comes back through `CONNECT` to an
intercepted host (a new TCP connection) resumes its TLS session — a TLS 1.3 ticket, a TLS 1.2 ticket, or a
TLS 1.2 session ID — and skips the certificate and the key exchange's signature; a session made for one host's
minted certificate is never resumed on a connection to another host (it would carry the first host's identity);
the same on the proxy-over-TLS listener (`https://` proxy URLs).

Clients: Python's `ssl` (the `session=` of a second connection, `session_reused`) and `openssl s_client`
(`-sess_out` / `-sess_in`). Everything on 127.0.0.1; host A is `localhost` (SNI), host B is `127.0.0.1` (an IP
literal: no SNI, the CONNECT host names the certificate)."""

import http.client
import json
import os
import ssl
import subprocess
import urllib.parse

import pytest

from harness import cred
from httpraw import RawConn, request_bytes

T = 30

VERSIONS = {
    # name: (maximum_version, client refuses tickets → the server's session-ID cache)
    "tls1.3": (ssl.TLSVersion.TLSv1_3, False),
    "tls1.2-ticket": (ssl.TLSVersion.TLSv1_2, False),
    "tls1.2-session-id": (ssl.TLSVersion.TLSv1_2, True),
}


class CA:
    def __init__(self, d):
        self.dir = str(d)
        self.cert = os.path.join(self.dir, "ca.pem")
        self.key = os.path.join(self.dir, "ca.key")


def tls_section(ca):
    return '\n[tls]\nca_cert = %s\nca_key = %s\n' % (json.dumps(ca.cert), json.dumps(ca.key))


def self_signed(d, name):
    cert, key = os.path.join(str(d), name + ".pem"), os.path.join(str(d), name + ".key")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-sha256", "-days", "2", "-subj", "/CN=localhost/O=upstream-" + name,
                        "-keyout", key, "-out", cert,
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                        "-addext", "basicConstraints=critical,CA:TRUE"],
                       capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    return cert, key


@pytest.fixture(scope="module")
def ca(proxy_binary, tmp_path_factory):
    import harness
    d = tmp_path_factory.mktemp("rca") / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr + r.stdout
    return CA(d)


@pytest.fixture(scope="module")
def upstream_cert(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("rup"), "origin")


@pytest.fixture
def two_hosts(proxy_factory, origin_factory, ca, upstream_cert):
    """Two TLS origins, intercepted as `localhost:PA` and `127.0.0.1:PB`, each with its api-key; the proxy."""
    a = origin_factory(tls=upstream_cert)
    b = origin_factory(tls=upstream_cert)
    ua, ub = "https://localhost:%d" % a.port, "https://127.0.0.1:%d" % b.port
    p = proxy_factory(proxy={"connect_ports": [443, a.port, b.port]},
                      extra_config=tls_section(ca)
                      + cred("ka", "api-key", ua, key="KEY-A") + cred("kb", "api-key", ub, key="KEY-B")
                      + cred("t", "server-trust", [ua, ub], ca_file=upstream_cert[0]))
    return p, a, b


def client_context(cafile, version):
    maximum, no_ticket = VERSIONS[version]
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = maximum
    if no_ticket:
        ctx.options |= ssl.OP_NO_TICKET
    return ctx


def get_echo(t, authority, i):
    """One GET /echo inside the TLS connection `t`; returns the query the origin saw. Reading the response also
    takes in the TLS 1.3 tickets the server sent after its handshake."""
    t.sendall(request_bytes("GET", "/echo?i=%d" % i, [("Host", authority)]))
    r = http.client.HTTPResponse(t)
    r.begin()
    body = r.read()
    assert r.status == 200, (r.status, body[:300])
    return urllib.parse.parse_qs(json.loads(body)["query"])


def through_connect(p, host, port, ctx, session=None, i=0):
    """CONNECT host:port, TLS (SNI = host unless it is an IP literal), one request.
    Returns (session, session_reused, subjectAltName of the certificate, the query the origin saw)."""
    authority = "%s:%d" % (host, port)
    c = RawConn(p.host, p.port, timeout=T)
    try:
        c.send(request_bytes("CONNECT", authority, [("Host", authority)]))
        r = c.read_response(method="CONNECT")
        assert r.status == 200, r
        t = ctx.wrap_socket(c.sock, server_hostname=host, session=session)
        try:
            q = get_echo(t, authority, i)
            return t.session, t.session_reused, t.getpeercert().get("subjectAltName"), q
        finally:
            t.close()
    finally:
        c.close()


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_returning_client_resumes_its_session(two_hosts, ca, version):
    p, a, _ = two_hosts
    ctx = client_context(ca.cert, version)
    first, reused, san, q = through_connect(p, "localhost", a.port, ctx, i=1)
    assert not reused
    assert san == (("DNS", "localhost"),), san
    assert q.get("token") == ["KEY-A"], q
    assert first is not None and first.has_ticket == (version != "tls1.2-session-id"), first

    for i in range(2, 5):  # every return resumes (a resumed TLS 1.3 session also gets new tickets)
        again, reused, san, q = through_connect(p, "localhost", a.port, ctx, session=first, i=i)
        assert reused, "connection %d did a full handshake (%s)" % (i, version)
        assert san == (("DNS", "localhost"),), san
        assert q.get("token") == ["KEY-A"] and q.get("i") == [str(i)], q
    assert a.stats()["requests"] == 4


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_a_session_for_one_host_is_not_resumed_for_another(two_hosts, ca, version):
    p, a, b = two_hosts
    ctx = client_context(ca.cert, version)
    session_a, _, _, _ = through_connect(p, "localhost", a.port, ctx, i=1)

    # A's session offered on a CONNECT to B: a full handshake with B's own certificate.
    session_b, reused, san, q = through_connect(p, "127.0.0.1", b.port, ctx, session=session_a, i=2)
    assert not reused, "a session minted for localhost was resumed for 127.0.0.1 (%s)" % version
    assert san == (("IP Address", "127.0.0.1"),), san
    assert q.get("token") == ["KEY-B"], q

    # The same offer on A resumes, so the client did offer it; B's own session resumes on B.
    _, reused, _, _ = through_connect(p, "localhost", a.port, ctx, session=session_a, i=3)
    assert reused
    _, reused, san, _ = through_connect(p, "127.0.0.1", b.port, ctx, session=session_b, i=4)
    assert reused and san == (("IP Address", "127.0.0.1"),), san


def test_a_session_is_not_resumed_under_another_sni_on_the_same_tunnel(two_hosts, ca):
    """The certificate is minted for the SNI name: a session for `localhost` offered with SNI `b.localhost` on the
    same CONNECT target is a full handshake with a `b.localhost` leaf (TLS 1.3 does not bind SNI to a session;
    the proxy does)."""
    p, a, _ = two_hosts
    ctx = client_context(ca.cert, "tls1.3")
    first, _, _, _ = through_connect(p, "localhost", a.port, ctx, i=1)
    authority = "localhost:%d" % a.port
    c = RawConn(p.host, p.port, timeout=T)
    try:
        c.send(request_bytes("CONNECT", authority, [("Host", authority)]))
        assert c.read_response(method="CONNECT").status == 200
        t = ctx.wrap_socket(c.sock, server_hostname="b.localhost", session=first)
        try:
            assert not t.session_reused
            assert t.getpeercert().get("subjectAltName") == (("DNS", "b.localhost"),)
        finally:
            t.close()
    finally:
        c.close()


def s_client(p, authority, ca, *extra, timeout=30):
    req = "GET /echo?via=s_client HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % authority
    r = subprocess.run(["openssl", "s_client", "-proxy", p.authority, "-connect", authority,
                        "-servername", authority.rsplit(":", 1)[0], "-CAfile", ca.cert, "-verify_return_error",
                        "-ign_eof"] + list(extra),
                       input=req.encode(), capture_output=True, timeout=timeout)
    return r.returncode, r.stdout.decode("latin-1"), r.stderr.decode("latin-1")


@pytest.mark.parametrize("proto", ["-tls1_3", "-tls1_2"])
def test_openssl_s_client_resumes_with_sess_in(two_hosts, ca, tmp_path, proto):
    p, a, _ = two_hosts
    authority = "localhost:%d" % a.port
    sess = str(tmp_path / "sess.pem")
    code, out, err = s_client(p, authority, ca, proto, "-sess_out", sess)
    assert code == 0, err[-2000:]
    assert "\nNew, " in out and "token=KEY-A" in out, out[-3000:]
    assert os.path.getsize(sess) > 0
    code, out, err = s_client(p, authority, ca, proto, "-sess_in", sess)
    assert code == 0, err[-2000:]
    assert "\nReused, " in out, out[-3000:]
    assert "token=KEY-A" in out, out[-3000:]


# ---------------------------------------------------------------------------------------------------------
# The proxy over TLS (an https:// proxy URL): the listener's own TLS resumes too
# ---------------------------------------------------------------------------------------------------------

def to_listener(p, ctx, server_hostname, origin, session=None):
    """TLS to the proxy listener itself, then one absolute-form request through it."""
    c = RawConn(p.host, p.port, timeout=T)
    try:
        t = ctx.wrap_socket(c.sock, server_hostname=server_hostname, session=session)
        try:
            url = "http://127.0.0.1:%d/echo" % origin.port
            t.sendall(request_bytes("GET", url, [("Host", "127.0.0.1:%d" % origin.port)]))
            r = http.client.HTTPResponse(t)
            r.begin()
            body = r.read()
            assert r.status == 200, (r.status, body[:300])
            return t.session, t.session_reused, t.getpeercert().get("subjectAltName")
        finally:
            t.close()
    finally:
        c.close()


@pytest.mark.parametrize("version", ["tls1.3", "tls1.2-ticket"])
def test_proxy_listener_with_minted_certificates_resumes_per_name(proxy_factory, origin, ca, version):
    p = proxy_factory(extra_config=tls_section(ca))
    ctx = client_context(ca.cert, version)
    first, reused, san = to_listener(p, ctx, "localhost", origin)
    assert not reused and san == (("DNS", "localhost"),), san
    _, reused, _ = to_listener(p, ctx, "localhost", origin, session=first)
    assert reused
    # Offered without SNI (an IP literal: the listener's address names the certificate), it is not resumed.
    _, reused, san = to_listener(p, ctx, "127.0.0.1", origin, session=first)
    assert not reused and san == (("IP Address", "127.0.0.1"),), san


@pytest.mark.parametrize("version", ["tls1.3", "tls1.2-ticket", "tls1.2-session-id"])
def test_proxy_listener_with_certificate_files_resumes(proxy_factory, origin, tls_cert, version):
    cert, key = tls_cert
    p = proxy_factory(proxy={"tls_cert": cert, "tls_key": key})
    ctx = client_context(cert, version)
    first, reused, _ = to_listener(p, ctx, "localhost", origin)
    assert not reused
    for _ in range(2):
        _, reused, _ = to_listener(p, ctx, "localhost", origin, session=first)
        assert reused
