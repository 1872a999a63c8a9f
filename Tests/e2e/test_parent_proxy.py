"""A parent proxy: `[proxy] upstream_proxy` (one URL or a failover list),
`upstream_proxy_credential` (a `password` credential: Basic/Digest/NTLM; or a `kerberos` one: Negotiate),
`upstream_proxy_backoff_seconds` and `no_proxy`, against real parents from Tests/e2e/parents: Squid with Basic,
Squid with Negotiate (MIT KDC), Apache as an NTLM proxy.

Every path takes the route: relayed http:// requests (Squid's Via at the origin), token-service calls, intercepted
https and blind CONNECT tunnels (Squid's access.log, where no Via can be added), WebSocket. `no_proxy` hosts go
direct. A parent that refuses the credential is a 502 naming the parent and the credential, and its 407 never
reaches the client; a parent that is down is skipped for its backoff and probed again after it. A request
carrying the proxy's own Via is a loop (508)."""
import json
import os
import re
import socket
import time
from urllib.parse import parse_qs, urlsplit

import pytest

import harness
from harness import cred
from httpraw import wait_until
from parents import rig as parents_rig
from netauth.fixtures import netauth_rig  # noqa: F401,E402
from parents.fixtures import (ntlm_parent, parents_dir, parents_realm, squid_basic, squid_factory,  # noqa: F401
                              squid_negotiate)
from test_admin import samples, start_with_admin, value
from test_credentials import via
from test_interception import CA, make_self_signed, tls_section

T = 30
PASSWORD = parents_rig.USERS["alice"]


# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------

def parent_cred(name="corp", type_="password", **fields):
    """A [[credential]] without `match`: one used only for the parent."""
    lines = ["", "[[credential]]", 'name = "%s"' % name, 'type = "%s"' % type_]
    lines += ["%s = %s" % (k, json.dumps(v)) for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def corp(password=PASSWORD, **fields):
    return parent_cred("corp", "password", username="alice", password=password, **fields)


def parent_settings(parents, credential="corp", backoff=None, no_proxy=None, **extra):
    """[proxy] overrides: upstream_proxy (a URL, or a list when given a list), its credential, backoff, no_proxy."""
    urls = [p if isinstance(p, str) else p.url for p in parents] if isinstance(parents, list) else \
        (parents if isinstance(parents, str) else parents.url)
    s = {"upstream_proxy": urls, "upstream_proxy_credential": credential}
    if backoff is not None:
        s["upstream_proxy_backoff_seconds"] = backoff
    if no_proxy is not None:
        s["no_proxy"] = no_proxy
    s.update(extra)
    return s


def headers_of(entry):
    """{lower-case name: [values]} of one origin request_log entry."""
    out = {}
    for k, v in entry["headers"]:
        out.setdefault(k.lower(), []).append(v)
    return out


def via_elements(entry):
    """The elements of every Via field an origin received, in order."""
    return [e.strip() for v in headers_of(entry).get("via", []) for e in v.split(",") if e.strip()]


def query_of(entry):
    return parse_qs(urlsplit(entry["target"]).query)


def own_via(entry):
    """authproxy's Via element among those the origin saw (`1.1 authproxy-<8 hex>`)."""
    mine = [e for e in via_elements(entry) if re.match(r"1\.1 authproxy\b", e)]
    assert len(mine) == 1, via_elements(entry)
    return mine[0]


def squid_lines(squid, method, url_or_authority, timeout=5.0, status=None):
    """Parsed access.log entries of `squid` for `method` and a URL that is `url_or_authority` or continues it
    with a query (authproxy may add its token), with `status` if given, once there is one or `timeout` passed
    (Squid writes a line when its transaction ends; a tunnel's when it closes). A parent that wants
    authentication may first answer 407 (user `-`): those lines are entries too."""
    u = url_or_authority

    def wanted(line):
        try:
            e = parents_rig.parse_access_line(line)
        except ValueError:
            return False
        return (e["method"] == method and (e["url"] == u or e["url"].startswith((u + "?", u + "&")))
                and (status is None or e["status"] == status))
    return [parents_rig.parse_access_line(l) for l in squid.wait_access(wanted, timeout=timeout)]


def raw_connect(p, authority, headers=()):
    """CONNECT `authority` through authproxy on a raw socket -> (status, head text, body bytes, socket)."""
    s = socket.create_connection((p.host, p.port), timeout=T)
    extra = "".join("%s: %s\r\n" % h for h in headers)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (authority, authority, extra)).encode())
    head = harness.read_head(s)
    text, _, rest = head.partition(b"\r\n\r\n")
    text = text.decode("latin-1")
    status = int(text.split(" ", 2)[1])
    m = re.search(r"(?im)^content-length:\s*(\d+)", text)
    if m:
        while len(rest) < int(m.group(1)):
            d = s.recv(65536)
            if not d:
                break
            rest += d
    return status, text, rest, s


def header_get(text):
    def get(name):
        m = re.search(r"(?im)^%s:\s*(.*?)\s*$" % re.escape(name), text)
        return m.group(1) if m else None
    return get


@pytest.fixture(scope="module")
def ca(proxy_binary, tmp_path_factory):
    d = tmp_path_factory.mktemp("parent-ca") / "ca"
    r = harness.run_cli(["ca", "init", "--dir", str(d)])
    assert r.returncode == 0, r.stderr + r.stdout
    return CA(d)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("parent-upstream-certs"))
    return {n: make_self_signed(d, n) for n in ("a", "b")}


# ---------------------------------------------------------------------------------------------------------
# Relayed http://, token service
# ---------------------------------------------------------------------------------------------------------

def test_relayed_request_goes_through_the_basic_parent_with_the_token_injected(proxy_factory, squid_basic, origin,
                                                                              session):
    sq = squid_basic
    p = proxy_factory(proxy=parent_settings(sq),
                      extra_config=corp() + cred("k", "api-key", origin.url + "/echo", key="ORIGIN-KEY"))
    r = via(p, session, "GET", origin.url + "/echo?m=relay-basic")
    assert r.status_code == 200, r.text[:500]
    seen = origin.request_log()[-1]
    # The origin got the request from Squid: its Via after authproxy's, and the token authproxy injected.
    elements = via_elements(seen)
    assert any(e.startswith(sq.via) for e in elements), elements
    own_via(seen)
    assert elements.index(own_via(seen)) < [i for i, e in enumerate(elements) if e.startswith(sq.via)][0]
    assert query_of(seen).get("token") == ["ORIGIN-KEY"], seen["target"]
    assert "proxy-authorization" not in headers_of(seen)
    lines = squid_lines(sq, "GET", origin.url + "/echo?m=relay-basic", status=200)
    assert [e["user"] for e in lines] == ["alice"], sq.access_log_lines()[-5:]
    # The client's own view: an ordinary answer, nothing of the parent's authentication.
    assert "Proxy-Authenticate" not in r.headers
    assert PASSWORD not in p.log_text()


def test_token_service_calls_traverse_the_parent(proxy_factory, squid_basic, ags, session):
    sq = squid_basic
    p = proxy_factory(proxy=parent_settings(sq), extra_config=corp()
                      + cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
    r = via(p, session, "GET", ags.query_url() + "?where=1%3D1&f=json")
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    assert ags.token_calls(), ags.stats()
    # Discovery (rest/info) and generateToken went through Squid, as did the query itself.
    assert squid_lines(sq, "GET", ags.server_root + "/rest/info", status=200), sq.access_log_lines()[-10:]
    token_lines = squid_lines(sq, "POST", ags.server_root + "/tokens/generateToken", status=200)
    assert [e["user"] for e in token_lines] == ["alice"], sq.access_log_lines()[-10:]
    assert squid_lines(sq, "GET", ags.query_url(), status=200), sq.access_log_lines()[-10:]


# ---------------------------------------------------------------------------------------------------------
# https: intercepted and blind CONNECT both tunnel through the parent
# ---------------------------------------------------------------------------------------------------------

def test_intercepted_https_and_a_blind_tunnel_traverse_the_parent(proxy_factory, squid_basic, ca, certs,
                                                                  origin_factory, session):
    sq = squid_basic
    matched = origin_factory(tls=certs["a"])
    blind = origin_factory(tls=certs["b"])
    m_url, b_url = "https://127.0.0.1:%d" % matched.port, "https://127.0.0.1:%d" % blind.port
    p = proxy_factory(proxy=parent_settings(sq, connect_ports=[443, blind.port]),
                      extra_config=tls_section(ca) + corp()
                      + cred("k", "api-key", m_url, key="TLS-KEY")
                      + cred("t", "server-trust", m_url, ca_file=certs["a"][0]))
    r = session.get(m_url + "/echo?m=intercepted", proxies=p.proxies, verify=ca.cert, timeout=T)
    assert r.status_code == 200, r.text[:500]
    seen = matched.request_log()[-1]
    assert query_of(seen).get("token") == ["TLS-KEY"], seen
    assert "proxy-authorization" not in headers_of(seen)
    # Inside a tunnel Squid adds nothing: only authproxy's own Via.
    assert not any("squid" in e for e in via_elements(seen)), via_elements(seen)

    c = harness.curl("-x", p.url, "--cacert", certs["b"][0], b_url + "/echo?m=blind")
    assert c.returncode == 0, c.stderr
    seen = blind.request_log()[-1]
    assert "proxy-authorization" not in headers_of(seen) and "via" not in headers_of(seen), seen

    p.stop()  # Squid writes a tunnel's line when it closes: close every one of authproxy's
    for o in (matched, blind):
        lines = squid_lines(sq, "CONNECT", "127.0.0.1:%d" % o.port, status=200)
        assert lines and all((e["result"], e["user"]) == ("TCP_TUNNEL", "alice") for e in lines), \
            (o.port, sq.access_log_lines()[-10:])


# ---------------------------------------------------------------------------------------------------------
# no_proxy
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry,host", [
    ("127.0.0.2", "127.0.0.2"),
    ("127.0.0.2:{port}", "127.0.0.2"),
    ("127.0.0.2/32", "127.0.0.2"),
    ("localhost", "localhost"),
    ("<local>", "localhost"),
    (".localhost", "localhost"),
])
def test_no_proxy_hosts_bypass_the_parent(proxy_factory, squid_basic, origin_factory, session, entry, host):
    sq = squid_basic
    through = origin_factory()                                           # 127.0.0.1: via the parent
    direct = origin_factory(host="127.0.0.2" if host == "127.0.0.2" else "127.0.0.1")
    direct_url = "http://%s:%d" % (host, direct.port)
    p = proxy_factory(proxy=parent_settings(sq, no_proxy=[entry.format(port=direct.port)],
                                            connect_ports=[443, direct.port]),
                      extra_config=corp())
    assert via(p, session, "GET", direct_url + "/echo?m=direct").status_code == 200
    assert via(p, session, "GET", through.url + "/echo?m=through").status_code == 200
    seen_direct, seen_through = direct.request_log()[-1], through.request_log()[-1]
    assert not any("squid" in e for e in via_elements(seen_direct)), via_elements(seen_direct)
    own_via(seen_direct)
    assert any(e.startswith(sq.via) for e in via_elements(seen_through)), via_elements(seen_through)
    # A blind tunnel to the no_proxy host goes direct as well.
    c = harness.curl("-p", "-x", p.url, direct_url + "/json")
    assert c.returncode == 0, c.stderr
    p.stop()
    assert squid_lines(sq, "GET", through.url + "/echo?m=through", status=200)
    time.sleep(0.3)
    assert not [l for l in sq.access_log_lines() if ":%d" % direct.port in l], sq.access_log_lines()[-10:]


# ---------------------------------------------------------------------------------------------------------
# A parent that refuses the credential
# ---------------------------------------------------------------------------------------------------------

def test_wrong_parent_password_is_a_502_naming_the_parent_and_the_credential(proxy_factory, squid_basic, origin,
                                                                             session):
    sq = squid_basic
    p = proxy_factory(proxy=parent_settings(sq, connect_ports=[443, origin.port]),
                      extra_config=corp(password="WRONG-parent-pw"))
    r = via(p, session, "GET", origin.url + "/echo?m=wrong-pw")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert sq.authority in err["message"] and "corp" in err["message"], err
    # The parent's 407 and its page stay between authproxy and the parent.
    assert "Proxy-Authenticate" not in r.headers
    assert "squid" not in r.text.lower() and "Cache Access Denied" not in r.text
    assert "WRONG-parent-pw" not in r.text and "WRONG-parent-pw" not in p.log_text()
    assert sq.wait_access(lambda l: "TCP_DENIED/407" in l and "/echo?m=wrong-pw" in l)
    # A CONNECT the parent refuses: the same error, never a tunnel.
    status, head, body, s = raw_connect(p, origin.authority)
    s.close()
    err = harness.assert_error_json(status, header_get(head), body, 502)
    assert sq.authority in err["message"] and "corp" in err["message"], err
    assert not re.search(r"(?im)^proxy-authenticate:", head), head
    assert origin.stats()["requests"] == 0 and origin.stats()["connections"] == 0


def test_the_parents_credential_never_reaches_the_origin(proxy_factory, squid_basic, origin, session):
    """A client's own Proxy-Authorization (meant for authproxy) and the parent's both stay hop-by-hop."""
    sq = squid_basic
    p = proxy_factory(proxy=parent_settings(sq), extra_config=corp())
    r = via(p, session, "GET", origin.url + "/echo?m=hop", headers={"Proxy-Authorization": "Basic Y2xpZW50OnNlY3JldA=="})
    assert r.status_code == 200, r.text[:300]
    assert "proxy-authorization" not in headers_of(origin.request_log()[-1])


# ---------------------------------------------------------------------------------------------------------
# Failover and backoff, with metrics
# ---------------------------------------------------------------------------------------------------------

def test_first_parent_down_the_second_serves_and_the_first_is_probed_after_its_backoff(proxy_factory, squid_factory,
                                                                                      origin, session):
    first = squid_factory(name="first", start=False)  # its port: nothing listens yet
    second = squid_factory(name="second")
    backoff = 3
    p = start_with_admin(proxy_factory, corp(), proxy=parent_settings([first, second], backoff=backoff))

    r = via(p, session, "GET", origin.url + "/echo?m=failover-1")
    assert r.status_code == 200, r.text[:300]
    assert any(e.startswith(second.via) for e in via_elements(origin.request_log()[-1]))
    smp = samples(p)
    assert value(smp, "authproxy_parent_backoff", parent=first.url) == 1
    assert value(smp, "authproxy_parent_backoff", parent=second.url) == 0
    failures = sum(v for (name, labels), v in smp.items()
                   if name == "authproxy_parent_failures_total" and dict(labels).get("parent") == first.url)
    assert failures >= 1, [k for k in smp if "parent" in k[0]]
    assert value(smp, "authproxy_parent_requests_total", parent=second.url) >= 1

    # The first comes back, but is still in its backoff: the second keeps serving.
    first.start()
    started = time.monotonic()
    r = via(p, session, "GET", origin.url + "/echo?m=failover-2")
    assert r.status_code == 200
    if time.monotonic() - started < backoff - 0.5:
        assert any(e.startswith(second.via) for e in via_elements(origin.request_log()[-1]))
    # After the backoff the first is tried again and serves.
    time.sleep(backoff + 0.5)
    r = via(p, session, "GET", origin.url + "/echo?m=failover-3")
    assert r.status_code == 200
    assert any(e.startswith(first.via) for e in via_elements(origin.request_log()[-1])), \
        via_elements(origin.request_log()[-1])
    assert first.wait_access(lambda l: "/echo?m=failover-3" in l)
    smp = samples(p)
    assert value(smp, "authproxy_parent_backoff", parent=first.url) == 0
    assert value(smp, "authproxy_parent_requests_total", parent=first.url) >= 1


def test_all_parents_down_is_a_502_naming_them(proxy_factory, squid_factory, origin, session):
    a = squid_factory(name="down-a", start=False)
    b = squid_factory(name="down-b", start=False)
    p = proxy_factory(proxy=parent_settings([a, b]), extra_config=corp())
    r = via(p, session, "GET", origin.url + "/echo")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert a.authority in err["message"] or b.authority in err["message"], err
    assert origin.stats()["requests"] == 0


# ---------------------------------------------------------------------------------------------------------
# Negotiate and NTLM parents
# ---------------------------------------------------------------------------------------------------------

def test_negotiate_parent_with_a_kerberos_credential(proxy_factory, squid_negotiate, parents_realm, origin,
                                                     session):
    sq, realm = squid_negotiate, parents_realm
    parent = "http://localhost:%d" % sq.port  # SPN HTTP/localhost
    p = proxy_factory(proxy=parent_settings(parent, credential="corp-krb", connect_ports=[443, origin.port]),
                      env={"KRB5_CONFIG": realm.krb5_config},
                      extra_config=parent_cred("corp-krb", "kerberos", principal=realm.principal_of("alice"),
                                               password=PASSWORD))
    r = via(p, session, "GET", origin.url + "/echo?m=negotiate")
    assert r.status_code == 200, r.text[:300]
    assert any(e.startswith(sq.via) for e in via_elements(origin.request_log()[-1]))
    lines = squid_lines(sq, "GET", origin.url + "/echo?m=negotiate", status=200)
    assert [e["user"] for e in lines] == [realm.principal_of("alice")], lines
    # A blind tunnel through the same parent.
    c = harness.curl("-p", "-x", p.url, origin.url + "/json")
    assert c.returncode == 0, c.stderr
    lines = squid_lines(sq, "CONNECT", origin.authority, timeout=10, status=200)
    assert lines and lines[-1]["user"] == realm.principal_of("alice"), sq.access_log_lines()[-5:]


def test_ntlm_parent_relays_and_tunnels_with_a_password_credential(proxy_factory, ntlm_parent, origin, session):
    ap = ntlm_parent
    p = proxy_factory(proxy=parent_settings(ap, connect_ports=[443, origin.port]),
                      extra_config=corp(domain=parents_rig.NTLM_DOMAIN))
    for i in range(2):
        r = via(p, session, "GET", origin.url + "/echo?m=ntlm-%d" % i)
        assert r.status_code == 200, r.text[:300]
        seen = origin.request_log()[-1]
        assert "proxy-authorization" not in headers_of(seen)
        own_via(seen)
    def relayed_ok():
        return [l for l in ap.access_log_lines() if "/echo?m=ntlm-" in l and '" 200 ' in l]
    wait_until(lambda: len(relayed_ok()) >= 2, 5)  # Apache writes a line after its answer
    relayed = relayed_ok()
    assert len(relayed) == 2 and all('user="TESTDOM\\\\alice"' in l for l in relayed), ap.access_log_lines()[-8:]
    # The handshake happened (a 407 carrying the Type 2 challenge), and the client never saw it.
    assert ap.wait_access(lambda l: "/echo?m=ntlm-0" in l and " 407 " in l and 'pa="NTLM T' in l), \
        ap.access_log_lines()[-8:]
    c = harness.curl("-p", "-x", p.url, "-D", "-", origin.url + "/echo?m=ntlm-tunnel")
    assert c.returncode == 0, c.stderr
    assert b"Proxy-Authenticate" not in c.stdout
    assert json.loads(c.stdout.split(b"\r\n\r\n")[-1])["path"] == "/echo"
    assert "via" not in headers_of(origin.request_log()[-1])
    tunnel = ap.wait_access(lambda l: '"CONNECT %s HTTP/1.1" 200' % origin.authority in l, timeout=10)
    assert tunnel and 'user="TESTDOM\\\\alice"' in tunnel[-1], ap.access_log_lines()[-8:]


def test_wrong_ntlm_parent_password_is_a_502(proxy_factory, ntlm_parent, origin, session):
    ap = ntlm_parent
    p = proxy_factory(proxy=parent_settings(ap), extra_config=corp(password="WRONG-ntlm", domain="TESTDOM"))
    r = via(p, session, "GET", origin.url + "/echo?m=ntlm-wrong")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert ap.authority in err["message"] and "corp" in err["message"], err
    assert "Proxy-Authenticate" not in r.headers
    assert origin.stats()["requests"] == 0


# ---------------------------------------------------------------------------------------------------------
# Loop guard
# ---------------------------------------------------------------------------------------------------------

def test_a_request_carrying_the_proxys_own_via_is_a_loop(proxy_factory, squid_basic, origin, session):
    p = proxy_factory(proxy=parent_settings(squid_basic, connect_ports=[443, origin.port]), extra_config=corp())
    assert via(p, session, "GET", origin.url + "/echo?m=loop-0").status_code == 200
    mine = own_via(origin.request_log()[-1])
    assert re.fullmatch(r"1\.1 authproxy-[0-9a-f]{8}", mine), mine
    before = origin.stats()["requests"]
    for value_ in (mine, "1.0 someone-else, " + mine, mine + " (comment)"):
        r = via(p, session, "GET", origin.url + "/echo?m=loop", headers={"Via": value_})
        harness.assert_error_json(r.status_code, r.headers.get, r.content, 508)
    status, head, body, s = raw_connect(p, origin.authority, headers=[("Via", mine)])
    s.close()
    assert status == 508, head
    assert origin.stats()["requests"] == before
    # Another authproxy's Via (another process, another id) is not a loop.
    other = mine[:-1] + ("0" if mine[-1] != "0" else "1")
    r = via(p, session, "GET", origin.url + "/echo?m=not-loop", headers={"Via": other})
    assert r.status_code == 200, r.text[:300]


def test_a_parent_that_leads_back_to_the_proxy_ends_at_once(proxy_factory, origin, session):
    """upstream_proxy names the proxy itself (a misconfiguration, or a PAC/WPAD that sends the proxy's own traffic
    back to it): the second hop sees its own Via and refuses, for relayed requests and for CONNECT alike, instead
    of opening connections to itself until it runs out of descriptors."""
    port = harness.free_port()
    p = proxy_factory(proxy={"listen": ["127.0.0.1:%d" % port], "connect_ports": [443, origin.port],
                             **parent_settings("http://127.0.0.1:%d" % port, credential=None)},
                      ready_port=port)
    fds = len(os.listdir("/proc/%d/fd" % p.pid))
    started = time.monotonic()
    r = via(p, session, "GET", origin.url + "/echo?m=self-loop", timeout=15)
    assert r.status_code in (502, 508), (r.status_code, r.text[:300])
    harness.assert_error_json(r.status_code, r.headers.get, r.content, r.status_code)
    status, head, body, s = raw_connect(p, origin.authority)
    s.close()
    assert status in (502, 508), head
    assert time.monotonic() - started < 10
    assert origin.stats()["requests"] == 0 and origin.stats()["connections"] == 0
    assert harness.healthz(p.host, p.port)[0] == 200
    # Descriptors do not pile up with repeated loops: what stays open is the client's kept-alive connection and, at
    # most, one pooled connection to the "parent" (both of its ends are this process's), whatever the count.
    for i in range(5):
        assert via(p, session, "GET", origin.url + "/echo?m=self-loop-%d" % i, timeout=15).status_code in (502, 508)
    assert wait_until(lambda: len(os.listdir("/proc/%d/fd" % p.pid)) <= fds + 4, 5), os.listdir("/proc/%d/fd" % p.pid)


# ---------------------------------------------------------------------------------------------------------
# WebSocket
# ---------------------------------------------------------------------------------------------------------

def test_websocket_through_the_parent(proxy_factory, squid_basic):
    from test_websocket import EchoServer, ws_connect  # skips when websockets >= 15 is missing
    sq = squid_basic
    echo = EchoServer(accept=lambda t: t == "WS-KEY").start()
    try:
        p = proxy_factory(proxy=parent_settings(sq, connect_ports=[443]),
                          extra_config=corp() + cred("stream", "api-key", echo.url("ws", "/arcgis"), key="WS-KEY"))
        with ws_connect(echo.url(), proxy=p.url, open_timeout=15) as ws:
            ws.send("through the parent")
            assert ws.recv(timeout=10) == "through the parent"
        assert echo.tokens() == ["WS-KEY"], echo.handshakes
        _, headers, _ = echo.handshakes[0]
        assert not any(k.lower() == "proxy-authorization" for k in headers), headers
        # Squid cannot relay an Upgrade (not configured for it): the WebSocket went through a CONNECT.
        lines = squid_lines(sq, "CONNECT", "127.0.0.1:%d" % echo.port, timeout=10, status=200)
        assert lines and lines[-1]["user"] == "alice", sq.access_log_lines()[-5:]
    finally:
        echo.stop()


# ---------------------------------------------------------------------------------------------------------
# a real GIS client: GDAL behind a corporate parent, with no credential of its own
# ---------------------------------------------------------------------------------------------------------

def test_gdal_reads_a_token_secured_layer_through_the_parent(proxy_factory, squid_basic, ags):
    import shutil
    import subprocess
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    sq = squid_basic
    p = proxy_factory(proxy=parent_settings(sq), extra_config=corp()
                      + cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass"))
    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority, "GDAL_HTTP_TIMEOUT": "30", "GDAL_HTTP_MAX_RETRY": "0",
                             "CPL_VSIL_CURL_ALLOWED_EXTENSIONS": ""})
    url = ags.query_url() + "?where=1%3D1&outFields=*&f=json"
    r = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Feature Count:" in r.stdout, r.stdout
    # the layer query, and the token request before it, went through the parent
    assert squid_lines(sq, "GET", ags.query_url(), status=200), sq.access_log_lines()[-10:]
    assert squid_lines(sq, "POST", ags.server_root + "/tokens/generateToken", status=200), sq.access_log_lines()[-10:]


def test_a_clients_own_ntlm_login_passes_through_the_parent_on_its_own_connections(proxy_factory, squid_basic,
                                                                                   netauth_rig):
    """No credential of the proxy matches the NTLM server: the client (curl --ntlm) logs in itself, through
    authproxy and the parent. Its authproxy→parent connection is its own (affinity), so the connection-bound
    login holds for its second request, and another client without credentials is never served as it."""
    import subprocess
    rig = netauth_rig
    p = proxy_factory(proxy=parent_settings(squid_basic), extra_config=corp())
    env = harness.clean_env()
    a = subprocess.run(["curl", "-sS", "-x", p.url, "--ntlm", "-u", "TESTDOM\\alice:alice-pw",
                        "-o", "/dev/null", "-w", "%{http_code} ", rig.ntlm.url + "pa1", "-o", "/dev/null", rig.ntlm.url + "pa2"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert a.stdout.split() == ["200", "200"], (a.stdout, a.stderr, p.log_text()[-2000:])
    assert squid_lines(squid_basic, "GET", rig.ntlm.url + "pa2", status=200), squid_basic.access_log_lines()[-10:]
    for i in range(4):
        b = subprocess.run(["curl", "-sS", "-x", p.url, "-o", "/dev/null", "-w", "%{http_code}", rig.ntlm.url + "pb%d" % i],
                           capture_output=True, text=True, env=env, timeout=60)
        assert b.stdout == "401", (i, b.stdout, b.stderr)


# ---------------------------------------------------------------------------------------------------------
# https:// (TLS to the parent itself: stunnel in front of Squid) and socks5h:// (microsocks) parents
# ---------------------------------------------------------------------------------------------------------

def _spawn(args, port, tmp_path, name):
    import subprocess
    log = open(str(tmp_path / (name + ".log")), "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=harness.clean_env(), start_new_session=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail("%s did not start: %s" % (name, open(str(tmp_path / (name + ".log"))).read()))


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(5)
    except Exception:
        proc.kill()


@pytest.mark.parametrize("schemes", [None, ["basic"]])
def test_an_https_parent_carries_relayed_and_tunnelled_requests(proxy_factory, squid_basic, certs, origin_factory,
                                                                 session, tmp_path, schemes):
    """A login answered from the parent's 407 (the default schemes) is libcurl's; a Basic-only one goes with the
    own client, which makes TLS to the parent and keeps the connection for the next request."""
    import shutil
    if not shutil.which("stunnel4"):
        pytest.skip("stunnel4 not installed")
    cert, key = certs["a"]
    port = harness.free_port()
    conf = tmp_path / "stunnel.conf"
    conf.write_text("foreground = yes\npid =\n[parent]\naccept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\ncert = %s\nkey = %s\n"
                    % (port, squid_basic.port, cert, key))
    tls = _spawn(["stunnel4", str(conf)], port, tmp_path, "stunnel")
    try:
        origin = origin_factory()
        tunnelled = origin_factory(tls=certs["b"])
        login = corp(schemes=schemes) if schemes else corp()
        logged_before = len(squid_basic.access_log_lines())
        p = proxy_factory(proxy=parent_settings("https://127.0.0.1:%d" % port, upstream_proxy_ca=cert,
                                                connect_ports=[443, tunnelled.port]), extra_config=login)
        for i in range(2):
            r = session.get(origin.url + "/echo?m=https-parent-%d" % i, proxies=p.proxies, timeout=T)
            assert r.status_code == 200, r.text[:300]
            assert any("squid" in e for e in via_elements(origin.request_log()[-1]))
        if schemes == ["basic"] and os.environ.get("AUTHPROXY_TEST_HTTP_CLIENT") != "libcurl":
            # Both requests over one TLS connection to the parent (Squid's log shows the proxy's source port).
            deadline = time.monotonic() + 10
            lines = []
            while len(lines) < 2 and time.monotonic() < deadline:
                lines = [l for l in squid_basic.access_log_lines()[logged_before:] if "m=https-parent-" in l]
                time.sleep(0.1)
            peers = {l.split()[2] for l in lines}
            # Sent with each request: no 407 either.
            assert len(lines) == 2 and len(peers) == 1 and all("/200 " in l for l in lines), lines
        c = harness.curl("-x", p.url, "--cacert", certs["b"][0], "https://127.0.0.1:%d/echo?m=tls-in-tls" % tunnelled.port)
        assert c.returncode == 0, c.stderr
        assert tunnelled.request_log(), "the tunnel through the https parent reached nothing"
    finally:
        _stop(tls)


def test_an_https_parent_with_an_unknown_certificate_is_refused(proxy_factory, squid_basic, certs, origin, session,
                                                                tmp_path):
    import shutil
    if not shutil.which("stunnel4"):
        pytest.skip("stunnel4 not installed")
    cert, key = certs["a"]
    port = harness.free_port()
    conf = tmp_path / "stunnel.conf"
    conf.write_text("foreground = yes\npid =\n[parent]\naccept = 127.0.0.1:%d\nconnect = 127.0.0.1:%d\ncert = %s\nkey = %s\n"
                    % (port, squid_basic.port, cert, key))
    tls = _spawn(["stunnel4", str(conf)], port, tmp_path, "stunnel")
    try:
        # No upstream_proxy_ca: the parent's self-signed certificate is not trusted, and nothing goes through it.
        p = proxy_factory(proxy=parent_settings("https://127.0.0.1:%d" % port), extra_config=corp())
        before = len(origin.request_log())
        r = session.get(origin.url + "/echo?m=untrusted-parent", proxies=p.proxies, timeout=T)
        assert r.status_code in (502, 504), r.text[:300]
        assert len(origin.request_log()) == before
    finally:
        _stop(tls)


def test_a_socks5h_parent(proxy_factory, origin_factory, certs, session, tmp_path):
    import shutil
    if not shutil.which("microsocks"):
        pytest.skip("microsocks not installed")
    port = harness.free_port()
    socks = _spawn(["microsocks", "-i", "127.0.0.1", "-p", str(port)], port, tmp_path, "microsocks")
    try:
        origin = origin_factory()
        tunnelled = origin_factory(tls=certs["b"])
        p = proxy_factory(proxy={"upstream_proxy": "socks5h://127.0.0.1:%d" % port, "connect_ports": [443, tunnelled.port]})
        r = session.get(origin.url + "/echo?m=socks", proxies=p.proxies, timeout=T)
        assert r.status_code == 200, r.text[:300]
        c = harness.curl("-x", p.url, "--cacert", certs["b"][0], "https://127.0.0.1:%d/echo?m=socks-tunnel" % tunnelled.port)
        assert c.returncode == 0, c.stderr
        assert tunnelled.request_log()
    finally:
        _stop(socks)
