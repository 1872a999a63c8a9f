"""Windows identities from every client.

- A relayed 401 that offers NTLM, Negotiate or Kerberos says `Proxy-Support: Session-Based-Authentication` (with
  `Connection: Proxy-Support`, as Squid does): .NET's HTTP stack (ArcGIS Pro, PowerShell) tries a Windows login to
  an http:// origin through a proxy only then. A 401 offering Basic alone does not.
- `intercept = false` on a credential, or `[tls] no_intercept`, keeps a matched host a blind CONNECT tunnel: the
  client sees the origin's own certificate (IIS Extended Protection binds the login to it), although a token
  credential matches the host and [tls] interception is on.

Origins are scripted servers on 127.0.0.1 (ports picked at run time), addressed as localhost for TLS."""

import pytest

import harness
from harness import cred
from httpraw import RawConn, request_bytes
from test_interception import CA_CN, connect_tls, dn, lh, make_self_signed, pem_der, tls_section, CA


@pytest.fixture(scope="module")
def ca(proxy_binary, tmp_path_factory):
    d = tmp_path_factory.mktemp("wica") / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr + r.stdout
    return CA(d)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return make_self_signed(str(tmp_path_factory.mktemp("wcerts")), "iis")


CHALLENGES = {
    "/ntlm": ["NTLM"],
    "/negotiate": ["Negotiate", "NTLM"],
    "/kerberos": ["Kerberos"],
    "/mixed": ['Basic realm="corp", NTLM'],
    "/basic": ['Basic realm="corp"'],
    "/quoted": ['Basic realm="NTLM, Negotiate"'],
}


def answer_401(path):
    fields = "".join("WWW-Authenticate: %s\r\n" % c for c in CHALLENGES[path])
    return ("HTTP/1.1 401 Unauthorized\r\n%sContent-Type: text/plain\r\nContent-Length: 6\r\n\r\ndenied" % fields).encode()


@pytest.mark.parametrize("client", ["native", "libcurl"])
def test_relayed_windows_challenges_announce_session_based_authentication(proxy_factory, client):
    origin = harness.ScriptedBackend(answer_401)
    try:
        p = proxy_factory(proxy={"http_client": client})
        for path, announced in [("/ntlm", True), ("/negotiate", True), ("/kerberos", True), ("/mixed", True),
                                ("/basic", False), ("/quoted", False)]:
            r, body = harness.fetch(p, "GET", origin.url(path))
            assert r.status == 401 and body == b"denied", (path, r.status, body)
            assert r.getheader("WWW-Authenticate"), path  # the challenge itself is relayed unchanged
            if announced:
                assert r.getheader("Proxy-Support") == "Session-Based-Authentication", (path, r.getheaders())
                connection = [t.strip().lower() for v in r.msg.get_all("Connection") or [] for t in v.split(",")]
                assert "proxy-support" in connection, (path, r.getheaders())
            else:
                assert r.getheader("Proxy-Support") is None, (path, r.getheaders())
        # Not a 401: nothing added (a 200 may carry Negotiate's mutual-authentication token).
        ok = harness.ScriptedBackend(lambda path: b"HTTP/1.1 200 OK\r\nWWW-Authenticate: Negotiate oYGz\r\nContent-Length: 2\r\n\r\nok")
        try:
            r, body = harness.fetch(p, "GET", ok.url("/"))
            assert (r.status, body) == (200, b"ok")
            assert r.getheader("Proxy-Support") is None
        finally:
            ok.close()
    finally:
        origin.close()


def tls_origin(cert):
    """An https origin with its own self-signed certificate, answering every request with 200."""
    return harness.RawBackend(tls=cert)


@pytest.mark.parametrize("how", ["credential", "password-credential", "no_intercept"])
def test_hosts_kept_out_of_interception_are_blind_tunnels(proxy_factory, ca, cert, how):
    o = tls_origin(cert)
    try:
        token = cred("k", "api-key", lh(o), key="K", **({"intercept": False} if how == "credential" else {}))
        extra = ""
        if how == "password-credential":
            # Another credential for the same host says intercept = false: it wins over the token credential.
            extra = cred("win", "password", lh(o), username="u", password="p", intercept=False)
        tls = tls_section(ca)
        if how == "no_intercept":
            tls += 'no_intercept = ["localhost:%d"]\n' % o.port
        p = proxy_factory(proxy={"connect_ports": [443, o.port]}, extra_config=tls + token + extra)
        der, info = connect_tls(p, "localhost", o.port, cafile=cert[0])
        assert der == pem_der(cert[0])  # the origin's own certificate: nothing minted by the interception CA
        assert dn(info, "issuer").get("organizationName") == "upstream-iis", info
        assert not [l for l in p.log_lines() if "minted certificate" in l]
    finally:
        o.stop()


def test_without_the_setting_the_same_host_is_intercepted(proxy_factory, ca, cert):
    o = tls_origin(cert)
    try:
        p = proxy_factory(proxy={"connect_ports": [443, o.port]}, extra_config=tls_section(ca) + cred("k", "api-key", lh(o), key="K"))
        der, info = connect_tls(p, "localhost", o.port, cafile=ca.cert)
        assert der != pem_der(cert[0])
        assert dn(info, "issuer").get("commonName") == CA_CN, info
    finally:
        o.stop()


def test_blind_by_choice_only_on_connect_ports(proxy_factory, ca, cert):
    o = tls_origin(cert)
    try:
        p = proxy_factory(extra_config=tls_section(ca) + cred("k", "api-key", lh(o), key="K", intercept=False))
        c = RawConn(p.host, p.port, timeout=10)
        try:
            target = "localhost:%d" % o.port
            c.send(request_bytes("CONNECT", target, [("Host", target)]))
            r = c.read_response(method="CONNECT")
            assert r.status == 403, r
            assert b"connect_ports" in r.body, r.body
        finally:
            c.close()
    finally:
        o.stop()
