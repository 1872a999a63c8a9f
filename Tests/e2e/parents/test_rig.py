"""Self-tests of the parent-proxy rig with curl -x alone (no authproxy): each parent relays http:// and CONNECT
to any port with the right credentials, refuses wrong or missing ones with 407, and logs what it did."""
import json
import socket
import subprocess

import pytest

from origin import OriginServer
from parents import rig

T = 30


@pytest.fixture
def origin():
    o = OriginServer().start()
    yield o
    o.stop()


def curl(*args, env=None):
    """curl (never honouring *_proxy variables) -> CompletedProcess (text)."""
    r = subprocess.run(["curl", "-sS", "--noproxy", "", "--max-time", str(T - 2)] + list(args),
                       capture_output=True, timeout=T, env=env or rig.clean_env(), stdin=subprocess.DEVNULL)
    # decoded by hand: text=True would turn the heads' CRLF into LF
    r.stdout, r.stderr = r.stdout.decode("latin-1"), r.stderr.decode("latin-1")
    return r


def head_and_body(out):
    """curl -D- output of the last response -> (status, [(name, value)], body)."""
    blocks = out.split("\r\n\r\n")
    # with -p the CONNECT answer's head comes first; the last head is the one before the body
    heads = [b for b in blocks if b.startswith("HTTP/")]
    head = heads[-1]
    body = out[out.rindex(head) + len(head) + 4:]
    lines = head.split("\r\n")
    fields = [tuple(x.strip() for x in l.split(":", 1)) for l in lines[1:] if ":" in l]
    return int(lines[0].split()[1]), fields, body


def field(fields, name):
    return [v for k, v in fields if k.lower() == name.lower()]


def seen_headers(origin):
    return [dict((k.lower(), v) for k, v in r["headers"]) for r in origin.request_log()]


# ---------------------------------------------------------------------------------------------------------
# Squid, Basic
# ---------------------------------------------------------------------------------------------------------

def test_basic_squid_relays_with_the_right_password(squid_basic, origin):
    sq = squid_basic
    r = curl("-x", sq.url, "-U", "alice:alice-pw", origin.url + "/echo?m=basic-ok")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    headers = {k.lower(): v for k, v in doc["headers"]}
    assert headers["via"].startswith(sq.via), headers
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert "proxy-authorization" not in headers  # Squid consumed it
    lines = sq.wait_access(lambda l: "/echo?m=basic-ok" in l)
    assert lines, sq.access_log_lines()
    e = rig.parse_access_line(lines[0])
    assert (e["method"], e["status"], e["user"], e["result"]) == ("GET", 200, "alice", "TCP_MISS"), e
    assert e["peer"] == origin.authority


@pytest.mark.parametrize("creds", [None, "alice:wrong"])
def test_basic_squid_refuses_with_407(squid_basic, origin, creds):
    sq = squid_basic
    r = curl("-x", sq.url, "-D-", *(["-U", creds] if creds else []), origin.url + "/echo?m=basic-407")
    status, fields, body = head_and_body(r.stdout)
    assert status == 407, r.stdout[:500]
    assert field(fields, "Proxy-Authenticate") == ['Basic realm="%s"' % rig.BASIC_REALM], fields
    assert field(fields, "X-Squid-Error")[0].startswith("ERR_CACHE_ACCESS_DENIED"), fields
    assert "text/html" in field(fields, "Content-Type")[0] and "Cache Access Denied" in body
    assert origin.stats()["requests"] == 0


def test_basic_squid_tunnels_connect_to_any_port(squid_basic, origin):
    """CONNECT to a port that is not 443 (Squid's default configuration refuses it), then HTTP inside."""
    sq = squid_basic
    assert origin.port != 443
    r = curl("-p", "-x", sq.url, "-U", "alice:alice-pw", "-D-", origin.url + "/echo?m=tunnel")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("HTTP/1.1 200 Connection established"), r.stdout[:300]
    status, fields, body = head_and_body(r.stdout)
    assert status == 200
    # Inside a tunnel Squid cannot add anything: the origin sees curl's request as curl sent it.
    assert "via" not in seen_headers(origin)[-1]
    lines = sq.wait_access(lambda l: " CONNECT %s " % origin.authority in l)
    assert lines, sq.access_log_lines()
    e = rig.parse_access_line(lines[-1])
    assert (e["result"], e["status"], e["user"]) == ("TCP_TUNNEL", 200, "alice"), e


def test_basic_squid_refuses_connect_without_credentials(squid_basic, origin):
    r = curl("-p", "-x", squid_basic.url, "-D-", origin.url + "/json")
    assert r.returncode != 0
    assert r.stdout.startswith("HTTP/1.1 407"), r.stdout[:300]
    assert "Proxy-Authenticate: Basic" in r.stdout
    assert squid_basic.wait_access(lambda l: "TCP_DENIED/407" in l and " CONNECT %s " % origin.authority in l)


# ---------------------------------------------------------------------------------------------------------
# Squid, Negotiate (Kerberos)
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_negotiate_squid_with_a_ticket(squid_negotiate, parents_realm, origin, host):
    sq, realm = squid_negotiate, parents_realm
    cc = realm.kinit("alice")
    try:
        env = realm.env(ccache=cc)
        proxy = "http://%s:%d" % (host, sq.port)  # SPN HTTP/<host>: both are in the keytab
        r = curl("-x", proxy, "--proxy-negotiate", "-U", ":", origin.url + "/echo?m=neg-" + host, env=env)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["path"] == "/echo"
        assert seen_headers(origin)[-1]["via"].startswith(sq.via)
        r = curl("-p", "-x", proxy, "--proxy-negotiate", "-U", ":", origin.url + "/json", env=env)
        assert r.returncode == 0, r.stderr
    finally:
        realm.kdestroy(cc)
    lines = sq.wait_access(lambda l: "/echo?m=neg-" + host in l)
    assert lines and rig.parse_access_line(lines[0])["user"] == realm.principal_of("alice"), lines
    assert sq.wait_access(lambda l: " CONNECT %s " % origin.authority in l and "alice@" in l)


def test_negotiate_squid_without_a_ticket_is_407(squid_negotiate, parents_realm, origin):
    env = parents_realm.env(ccache=parents_realm.new_ccache_path())  # empty cache
    r = curl("-x", squid_negotiate.url, "--proxy-negotiate", "-U", ":", "-D-", origin.url + "/json", env=env)
    status, fields, _ = head_and_body(r.stdout)
    assert status == 407
    assert field(fields, "Proxy-Authenticate") == ["Negotiate"], fields
    assert origin.stats()["requests"] == 0


# ---------------------------------------------------------------------------------------------------------
# Apache, NTLM
# ---------------------------------------------------------------------------------------------------------

def test_ntlm_parent_relays_and_tunnels(ntlm_parent, origin):
    ap = ntlm_parent
    user = ap.ntlm_user("alice") + ":alice-pw"
    r = curl("-x", ap.url, "--proxy-ntlm", "-U", user, origin.url + "/echo?m=ntlm-relay")
    assert r.returncode == 0, r.stderr
    headers = {k.lower(): v for k, v in json.loads(r.stdout)["headers"]}
    assert "proxy-authorization" not in headers and "via" in headers, headers
    r = curl("-p", "-x", ap.url, "--proxy-ntlm", "-U", user, "-D-", origin.url + "/echo?m=ntlm-tunnel")
    assert r.returncode == 0, r.stderr
    assert head_and_body(r.stdout)[0] == 200
    assert "via" not in seen_headers(origin)[-1]
    # The handshake: Type 1 answered 407 with the Type 2 challenge, Type 3 on the same connection.
    relay = ap.wait_access(lambda l: "/echo?m=ntlm-relay" in l and " 200 " in l)
    assert relay and 'user="TESTDOM\\\\alice"' in relay[0], ap.access_log_lines()
    tunnel = ap.wait_access(lambda l: '"CONNECT %s HTTP/1.1" 200' % origin.authority in l)
    assert tunnel and 'user="TESTDOM\\\\alice"' in tunnel[0], ap.access_log_lines()
    assert ap.wait_access(lambda l: '"CONNECT %s HTTP/1.1" 407' % origin.authority in l and 'pa="NTLM T' in l)


@pytest.mark.parametrize("creds", [None, "TESTDOM\\alice:wrong"])
def test_ntlm_parent_refuses_with_407(ntlm_parent, origin, creds):
    args = ["--proxy-ntlm", "-U", creds] if creds else []
    r = curl("-x", ntlm_parent.url, "-D-", *args, origin.url + "/json")
    status, fields, body = head_and_body(r.stdout)
    assert status == 407, r.stdout[:400]
    assert field(fields, "Proxy-Authenticate") == ["Negotiate", "NTLM"], fields
    assert "Proxy Authentication Required" in body
    assert origin.stats()["requests"] == 0


# ---------------------------------------------------------------------------------------------------------
# Two parents for failover
# ---------------------------------------------------------------------------------------------------------

def test_a_parent_goes_down_and_comes_back_on_its_port(squid_factory, origin):
    first = squid_factory(name="first", start=False)
    second = squid_factory(name="second")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", first.port), timeout=2).close()
    r = curl("-x", second.url, "-U", "alice:alice-pw", origin.url + "/echo")
    assert r.returncode == 0 and seen_headers(origin)[-1]["via"].startswith(second.via), r.stderr
    first.start()
    port = first.port
    r = curl("-x", first.url, "-U", "alice:alice-pw", origin.url + "/echo")
    assert r.returncode == 0 and seen_headers(origin)[-1]["via"].startswith(first.via), r.stderr
    first.stop(grace=0)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    first.start()
    assert first.port == port
    r = curl("-x", first.url, "-U", "alice:alice-pw", "-o", "/dev/null", "-w", "%{http_code}", origin.url + "/json")
    assert r.stdout == "200", r.stderr
