"""Self-tests of the netauth rig, with curl as the client (no proxy, no authproxy binary).

Run from the repo root:
    python3 -m pytest Tests/e2e/netauth -q -p no:cacheprovider
"""

import json
import os
import socket
import subprocess
import time

import pytest

import harness

from netauth import rig

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
# libcurl 7.88's NTLM Type-1 message (32 bytes, no Version field)
CURL_TYPE1 = "TlRMTVNTUAABAAAABoIIAAAAAAAAAAAAAAAAAAAAAAA="


class Result:
    def __init__(self, proc, headers_text, body):
        self.rc = proc.returncode
        self.stderr = proc.stderr.decode(errors="replace")
        self.body = body
        # every response of the exchange (401s, 100 Continue, final)
        self.responses = []
        for block in headers_text.replace("\r\n", "\n").split("\n\n"):
            lines = [l for l in block.split("\n") if l.strip()]
            if not lines or not lines[0].startswith("HTTP/"):
                continue
            status = int(lines[0].split()[1])
            hdrs = []
            for l in lines[1:]:
                k, _, v = l.partition(":")
                hdrs.append((k.strip(), v.strip()))
            self.responses.append((status, hdrs))
        final = [r for r in self.responses if r[0] >= 200]
        self.status, self.headers = final[-1] if final else (None, [])

    def header(self, name):
        vals = self.all(name)
        return vals[-1] if vals else None

    def all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<curl rc=%s status=%s headers=%r stderr=%r body=%r>" % (
            self.rc, self.status, self.headers, self.stderr[-500:], self.body[:300])


def curl(*args, env=None, tmp=None, timeout=60):
    """curl -sS --noproxy '*' ... -> Result (headers of all responses, body of the last)."""
    import tempfile
    d = tmp or tempfile.mkdtemp(prefix="netauth-curl-")
    hfile, bfile = os.path.join(d, "h.txt"), os.path.join(d, "b.bin")
    for f in (hfile, bfile):
        if os.path.exists(f):
            os.unlink(f)
    cmd = ["curl", "-sS", "--noproxy", "*", "--max-time", str(timeout - 5),
           "-D", hfile, "-o", bfile] + list(args)
    p = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                       env=env if env is not None else rig.clean_env())
    htext = open(hfile, encoding="latin-1").read() if os.path.exists(hfile) else ""
    body = open(bfile, "rb").read() if os.path.exists(bfile) else b""
    return Result(p, htext, body)


def assert_ok(res, user, method="GET"):
    assert res.rc == 0 and res.status == 200, res
    assert res.header("X-Remote-User") == user, res
    assert res.header("X-Request-Method") == method, res
    doc = res.json()
    assert doc["user"] == user and doc["method"] == method, doc
    return doc


def assert_401(res, *offers):
    assert res.rc == 0 and res.status == 401, res
    if offers:
        assert res.all("WWW-Authenticate") == list(offers), res


# ---------------------------------------------------------------------------
# Basic
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("user", ["alice", "bob"])
def test_basic_users(netauth_rig, tmp_path, user):
    r = curl("-u", "%s:%s" % (user, netauth_rig.users[user]), netauth_rig.basic.url + "x?y=1",
             tmp=str(tmp_path))
    doc = assert_ok(r, user)
    assert r.header("X-Auth-Type") == "Basic"
    assert doc["path"] == "/x?y=1" and doc["vhost"] == "basic"
    assert r.header("X-Body-Sha256") == EMPTY_SHA256 and r.header("X-Body-Size") == "0"


def test_basic_rejects(netauth_rig, tmp_path):
    challenge = 'Basic realm="%s"' % rig.BASIC_REALM
    assert_401(curl("-u", "alice:wrong", netauth_rig.basic.url, tmp=str(tmp_path)), challenge)
    assert_401(curl("-u", "carol:alice-pw", netauth_rig.basic.url, tmp=str(tmp_path)), challenge)
    assert_401(curl(netauth_rig.basic.url, tmp=str(tmp_path)), challenge)
    # the unprotected path of every vhost
    r = curl(netauth_rig.basic.url + "public/x", tmp=str(tmp_path))
    assert r.status == 200 and r.header("X-Remote-User") == "", r


def test_post_body_echo(netauth_rig, tmp_path):
    body = b"hello netauth\n" * 100
    f = tmp_path / "body.bin"
    f.write_bytes(body)
    import hashlib
    r = curl("-u", "bob:bob-pw", "--data-binary", "@%s" % f, "-H", "Content-Type: application/octet-stream",
             netauth_rig.basic.url + "upload", tmp=str(tmp_path))
    doc = assert_ok(r, "bob", "POST")
    assert doc["body_size"] == len(body) and r.header("X-Body-Size") == str(len(body))
    assert doc["body_sha256"] == hashlib.sha256(body).hexdigest() == r.header("X-Body-Sha256")
    assert doc["headers"]["Content-Type"] == "application/octet-stream"


# ---------------------------------------------------------------------------
# Digest
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("user", ["alice", "bob"])
def test_digest_users(netauth_rig, tmp_path, user):
    r = curl("--digest", "-u", "%s:%s" % (user, netauth_rig.users[user]), netauth_rig.digest.url,
             tmp=str(tmp_path))
    assert_ok(r, user)
    assert r.header("X-Auth-Type") == "Digest"
    assert r.responses[0][0] == 401  # challenge first


def test_digest_rejects(netauth_rig, tmp_path):
    r = curl("--digest", "-u", "alice:wrong", netauth_rig.digest.url, tmp=str(tmp_path))
    assert_401(r)
    [www] = r.all("WWW-Authenticate")
    assert www.startswith('Digest realm="%s", nonce="' % rig.DIGEST_REALM), www
    assert 'algorithm=MD5' in www and 'qop="auth"' in www
    assert_401(curl(netauth_rig.digest.url, tmp=str(tmp_path)))


# ---------------------------------------------------------------------------
# NTLM
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("user", ["alice", "bob"])
def test_ntlm_users(netauth_rig, tmp_path, user):
    r = curl("--ntlm", "-u", "%s:%s" % (netauth_rig.ntlm_user(user), netauth_rig.users[user]),
             netauth_rig.ntlm.url, tmp=str(tmp_path))
    assert_ok(r, "TESTDOM\\" + user)
    assert r.header("X-Auth-Type") == "NTLM"
    # Type-2 challenge first, on the same connection
    assert r.responses[0][0] == 401
    assert [v for k, v in r.responses[0][1] if k.lower() == "www-authenticate"][0].startswith("NTLM TlRMTVNTUAAC")


def test_ntlm_rejects(netauth_rig, tmp_path):
    # NTLM-only server: a bare "NTLM" offer, no "Negotiate"
    assert_401(curl(netauth_rig.ntlm.url, tmp=str(tmp_path)), "NTLM")
    assert_401(curl("--ntlm", "-u", "TESTDOM\\alice:wrong", netauth_rig.ntlm.url, tmp=str(tmp_path)), "NTLM")
    assert_401(curl("--ntlm", "-u", "OTHERDOM\\alice:alice-pw", netauth_rig.ntlm.url, tmp=str(tmp_path)), "NTLM")


def test_ntlm_connection_bound_keepalive(netauth_rig, tmp_path):
    """One handshake per connection; later requests on it need no Authorization."""
    u = netauth_rig.ntlm.url
    before = len(netauth_rig.apache.access_log_lines())
    r = curl("--ntlm", "-u", "TESTDOM\\alice:alice-pw", u + "a", u + "b", tmp=str(tmp_path))
    assert r.rc == 0, r
    oks = [resp for resp in r.responses if resp[0] == 200]
    assert len(oks) == 2 and len([resp for resp in r.responses if resp[0] == 401]) == 1, r.responses
    ports = {v for st, h in oks for k, v in h if k == "X-Remote-Port"}
    assert len(ports) == 1, ports
    # Apache writes the access-log line after it sent the response: on a loaded machine the client can be faster.
    deadline = time.monotonic() + 10
    while True:
        lines = [l for l in netauth_rig.apache.access_log_lines()[before:] if '"GET /b ' in l]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert lines and 'auth="-"' in lines[-1] and 'user="TESTDOM\\\\alice"' in lines[-1], lines


class PerRequestRelay:
    """Plain-HTTP relay that sends every request of a client connection upstream on
    a NEW connection (HTTP/1.0, read to EOF, re-framed with Content-Length): a
    proxy that does not pin upstream connections to client connections."""

    def __init__(self, upstream_port):
        import threading
        self.upstream_port = upstream_port
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.port = self.srv.getsockname()[1]
        self.upstream_connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import threading
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _read_head(sock, buf):
        while b"\r\n\r\n" not in buf:
            d = sock.recv(65536)
            if not d:
                return None, buf
            buf += d
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head.decode("latin-1"), rest

    def _serve(self, c):
        buf = b""
        with c:
            while True:
                head, buf = self._read_head(c, buf)
                if head is None:
                    return
                lines = head.split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                hdrs = [l for l in lines[1:] if l.split(":")[0].strip().lower() not in ("connection", "keep-alive")]
                n = 0
                for l in hdrs:
                    if l.lower().startswith("content-length:"):
                        n = int(l.split(":")[1])
                while len(buf) < n:
                    buf += c.recv(65536)
                body, buf = buf[:n], buf[n:]
                up = socket.create_connection(("127.0.0.1", self.upstream_port))
                self.upstream_connections += 1
                with up:
                    up.sendall(("%s %s HTTP/1.0\r\n%s\r\nConnection: close\r\n\r\n"
                                % (method, target, "\r\n".join(hdrs))).encode("latin-1") + body)
                    resp = b""
                    while True:
                        d = up.recv(65536)
                        if not d:
                            break
                        resp += d
                rhead, _, rbody = resp.partition(b"\r\n\r\n")
                rlines = rhead.decode("latin-1").split("\r\n")
                keep = [l for l in rlines[1:] if l.split(":")[0].strip().lower()
                        not in ("connection", "keep-alive", "content-length", "transfer-encoding")]
                status = rlines[0].replace("HTTP/1.0", "HTTP/1.1", 1)
                c.sendall(("%s\r\n%s\r\nContent-Length: %d\r\n\r\n"
                           % (status, "\r\n".join(keep), len(rbody))).encode("latin-1") + rbody)

    def close(self):
        self.srv.close()


def test_ntlm_type3_on_new_connection_fails(netauth_rig, tmp_path):
    """A relay that opens a new upstream connection per request breaks NTLM (the
    Type-3 lands on a connection without the Type-1/Type-2 context), while
    Basic through the same relay works."""
    relay = PerRequestRelay(netauth_rig.ntlm.port)
    try:
        r = curl("--ntlm", "-u", "TESTDOM\\alice:alice-pw", "http://127.0.0.1:%d/" % relay.port,
                 tmp=str(tmp_path))
        assert r.status == 401, r
        offers = [v for st, h in r.responses for k, v in h if k.lower() == "www-authenticate"]
        assert offers[0].startswith("NTLM TlRMTVNTUAAC"), offers   # the Type-2 challenge came
        assert relay.upstream_connections == 2, relay.upstream_connections  # Type-1, Type-3
    finally:
        relay.close()
    relay = PerRequestRelay(netauth_rig.basic.port)
    try:
        r = curl("-u", "alice:alice-pw", "http://127.0.0.1:%d/" % relay.port, tmp=str(tmp_path))
        assert_ok(r, "alice")
    finally:
        relay.close()


def test_ntlm_unmodified_stack_rejects_libcurl(netauth_rig, tmp_path):
    """gss-ntlmssp 1.2.0 as packaged refuses libcurl's 32-byte Type-1 message."""
    r = curl("--ntlm", "-u", "TESTDOM\\alice:alice-pw", netauth_rig.ntlm_raw.url, tmp=str(tmp_path))
    assert_401(r, "Negotiate", "NTLM")
    # no Type-2 challenge was ever sent
    assert all(not v.startswith("NTLM ") for st, h in r.responses for k, v in h
               if k.lower() == "www-authenticate"), r.responses
    assert "Invalid token was supplied" in netauth_rig.apache.error_log_text()


def test_ntlm_type1_with_expect_closes_connection(netauth_rig):
    """Server fact: a Type-1 request that announces a body with Expect: 100-continue
    gets its Type-2 challenge with Connection: close (the handshake cannot go on),
    while one that sends the body without Expect keeps the connection."""
    def type1(expect):
        s = socket.create_connection(("127.0.0.1", netauth_rig.ntlm.port), timeout=5)
        try:
            head = ("POST / HTTP/1.1\r\nHost: %s\r\nAuthorization: NTLM %s\r\nContent-Length: 10\r\n%s\r\n"
                    % (netauth_rig.ntlm.authority, CURL_TYPE1, "Expect: 100-continue\r\n" if expect else ""))
            s.sendall(head.encode() + (b"" if expect else b"0123456789"))
            return harness.read_head(s).split(b"\r\n\r\n")[0].decode("latin-1").lower()
        finally:
            s.close()
    with_expect = type1(True)
    assert "www-authenticate: ntlm tlrmtvntuaac" in with_expect and "connection: close" in with_expect
    without = type1(False)
    assert "www-authenticate: ntlm tlrmtvntuaac" in without and "connection: close" not in without


# ---------------------------------------------------------------------------
# Kerberos / Negotiate
# ---------------------------------------------------------------------------

def test_kerberos_with_kinit_ticket(netauth_rig, netauth_krb_env, tmp_path):
    r = curl("--negotiate", "-u", ":", netauth_rig.kerberos.url, env=netauth_krb_env, tmp=str(tmp_path))
    assert_ok(r, netauth_rig.realm.principal)
    assert r.header("X-Auth-Type") == "Negotiate"
    assert r.header("WWW-Authenticate").startswith("Negotiate ")  # mutual-auth token on the 200
    # the 127.0.0.1 form works too (HTTP/127.0.0.1@REALM is in the keytab)
    r = curl("--negotiate", "-u", ":", netauth_rig.kerberos.url_127, env=netauth_krb_env, tmp=str(tmp_path))
    assert_ok(r, netauth_rig.realm.principal)


def test_kerberos_with_client_keytab(netauth_rig, tmp_path):
    env = netauth_rig.realm.env(ccache=str(tmp_path / "ccache"), client_keytab=netauth_rig.realm.client_keytabs["bob"])
    r = curl("--negotiate", "-u", ":", netauth_rig.kerberos.url, env=env, tmp=str(tmp_path))
    assert_ok(r, netauth_rig.realm.principal_of("bob"))


def test_kerberos_without_ticket(netauth_rig, tmp_path):
    env = netauth_rig.realm.env(ccache=str(tmp_path / "empty-ccache"))
    assert_401(curl("--negotiate", "-u", ":", netauth_rig.kerberos.url, env=env, tmp=str(tmp_path)), "Negotiate")
    assert_401(curl(netauth_rig.kerberos.url, tmp=str(tmp_path)), "Negotiate")


# ---------------------------------------------------------------------------
# IIS-like: Negotiate + NTLM
# ---------------------------------------------------------------------------

def test_iis_offers_both(netauth_rig, tmp_path):
    assert_401(curl(netauth_rig.iis.url, tmp=str(tmp_path)), "Negotiate", "NTLM")


def test_iis_ntlm_without_ticket(netauth_rig, tmp_path):
    env = netauth_rig.realm.env(ccache=str(tmp_path / "empty-ccache"))
    r = curl("--ntlm", "-u", "TESTDOM\\alice:alice-pw", netauth_rig.iis.url, env=env, tmp=str(tmp_path))
    assert_ok(r, "TESTDOM\\alice")
    assert r.header("X-Auth-Type") == "NTLM"


def test_iis_negotiate_with_ticket(netauth_rig, netauth_krb_env, tmp_path):
    r = curl("--negotiate", "-u", ":", netauth_rig.iis.url, env=netauth_krb_env, tmp=str(tmp_path))
    assert_ok(r, netauth_rig.realm.principal)
    assert r.header("X-Auth-Type") == "Negotiate"


def test_iis_anyauth_without_ticket_does_not_fall_back(netauth_rig, tmp_path):
    """PITFALLS fact: CURLAUTH_ANY picks Negotiate and does not fall back to NTLM."""
    env = netauth_rig.realm.env(ccache=str(tmp_path / "empty-ccache"))
    r = curl("--anyauth", "-u", "TESTDOM\\alice:alice-pw", netauth_rig.iis.url, env=env, tmp=str(tmp_path))
    assert r.status == 401, r


# ---------------------------------------------------------------------------
# mutual TLS
# ---------------------------------------------------------------------------

def test_mtls_pem(netauth_rig, tmp_path):
    p = netauth_rig.pki
    r = curl("--cacert", p.server_ca, "--cert", p.alice_cert, "--key", p.alice_key,
             netauth_rig.mtls.url, tmp=str(tmp_path))
    doc = assert_ok(r, "alice")
    assert r.header("X-Client-Subject") == "CN=alice,OU=people,O=netauth"
    assert r.header("X-Client-Issuer") == "CN=netauth client CA,O=netauth"
    assert doc["https"] and doc["client_verify"] == "SUCCESS"
    # bundle (cert+key in one file) and the encrypted key
    r = curl("--cacert", p.server_ca, "--cert", p.alice_bundle, netauth_rig.mtls.url, tmp=str(tmp_path))
    assert_ok(r, "alice")
    r = curl("--cacert", p.server_ca, "--cert", p.alice_cert, "--key", p.alice_key_encrypted,
             "--pass", p.alice_key_password, netauth_rig.mtls.url, tmp=str(tmp_path))
    assert_ok(r, "alice")


@pytest.mark.parametrize("which", ["bob_p12", "bob_p12_legacy"])
def test_mtls_p12(netauth_rig, tmp_path, which):
    p = netauth_rig.pki
    r = curl("--cacert", p.server_ca, "--cert-type", "P12",
             "--cert", "%s:%s" % (getattr(p, which), p.bob_p12_password),
             netauth_rig.mtls.url + "p12", "-d", "x=1", tmp=str(tmp_path))
    assert_ok(r, "bob", "POST")
    assert r.header("X-Client-Subject") == "CN=bob,OU=people,O=netauth"


def test_mtls_handshake_fails_without_or_with_untrusted_cert(netauth_rig, tmp_path):
    p = netauth_rig.pki
    r = curl("--cacert", p.server_ca, netauth_rig.mtls.url, tmp=str(tmp_path))
    assert r.rc != 0 and r.status is None, r       # TLS 1.3: alert "certificate required"
    r = curl("--cacert", p.server_ca, "--cert", p.mallory_cert, "--key", p.mallory_key,
             netauth_rig.mtls.url, tmp=str(tmp_path))
    assert r.rc != 0 and r.status is None, r       # alert "unknown ca"
    # and the server certificate is only trusted via the rig's server CA
    r = curl("--cert", p.alice_cert, "--key", p.alice_key, netauth_rig.mtls.url, tmp=str(tmp_path))
    assert r.rc == 60, r


# ---------------------------------------------------------------------------
# 20 MiB uploads through multi-pass schemes
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["ntlm", "digest"])
def test_big_post_intact(netauth_rig, netauth_big_file, tmp_path, scheme):
    path, size, sha = netauth_big_file
    if scheme == "ntlm":
        auth = ["--ntlm", "-u", "TESTDOM\\alice:alice-pw"]
        user = "TESTDOM\\alice"
    else:
        auth = ["--digest", "-u", "alice:alice-pw"]
        user = "alice"
    t0 = time.monotonic()
    r = curl(*auth, "--data-binary", "@" + path, "-H", "Content-Type: application/octet-stream",
             getattr(netauth_rig, scheme).url + "big", tmp=str(tmp_path))
    doc = assert_ok(r, user, "POST")
    assert r.header("X-Body-Size") == str(size) and doc["body_size"] == size
    assert r.header("X-Body-Sha256") == sha == doc["body_sha256"]
    assert time.monotonic() - t0 < 20


def test_rig_still_alive(netauth_rig):
    assert netauth_rig.apache.alive()
    assert netauth_rig.realm.proc.poll() is None
