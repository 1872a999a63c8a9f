"""Who may use the proxy: allow_clients, proxy authentication with [[client]], per-client credential
scopes, the open-relay refusal, rate limits, connection limits and deny_destinations, through the real binary
with curl, Python requests and GDAL."""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import textwrap
import time
import urllib.parse

import pytest
import requests

import harness
from harness import cred


def client_block(name, password, credentials=None):
    lines = ["", "[[client]]", 'name = "%s"' % name, 'password = "%s"' % password]
    if credentials is not None:
        lines.append("credentials = [%s]" % ", ".join(json.dumps(c) for c in credentials))
    return "\n".join(lines) + "\n"


def raw_exchange(proxy, data, source="127.0.0.1", timeout=5.0):
    return harness.raw_exchange(proxy, data, source=source, timeout=timeout)


def query_of(entry):
    return urllib.parse.parse_qs(urllib.parse.urlsplit(entry["target"]).query)


def header_values(entry, name):
    return [v for k, v in entry["headers"] if k.lower() == name.lower()]


# ---------------------------------------------------------------------------------------------------------
# allow_clients
# ---------------------------------------------------------------------------------------------------------

def test_client_outside_allow_clients_is_closed_unread(proxy_factory, origin):
    p = proxy_factory(proxy={"allow_clients": ["127.0.0.1/32"]})
    req = b"GET " + origin.url.encode() + b"/json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert raw_exchange(p, req, source="127.0.0.1").startswith(b"HTTP/1.1 200")
    for _ in range(20):
        assert raw_exchange(p, req, source="127.0.0.2") == b""
    assert [e for e in origin.request_log() if e["target"].endswith("/json")].__len__() == 1
    lines = p.wait_for_log(r"connection refused.*127\.0\.0\.2")
    assert lines and "allow_clients" in lines[0], p.log_text()[-2000:]
    time.sleep(0.3)
    # Rate-limited: twenty refusals within a few seconds make one line.
    assert len([l for l in p.log_lines() if "connection refused" in l]) == 1, p.log_text()[-3000:]


def test_default_allows_loopback_only_and_says_so(proxy_factory, tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text('[proxy]\nlisten = ["127.0.0.1:3128"]\n')
    r = harness.run_cli(["check", "--config", str(conf)])
    assert r.returncode == 0, r.stderr
    assert "127.0.0.0/8, ::1/128 (default)" in r.stdout, r.stdout
    assert "169.254.0.0/16, fe80::/10, fd00:ec2::254/128, 100.100.100.200/32" in r.stdout


# ---------------------------------------------------------------------------------------------------------
# The open relay
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ["check", "serve"])
def test_non_loopback_listen_without_access_control_exits_2(tmp_path, cmd):
    conf = tmp_path / "c.conf"
    port = harness.free_port()
    conf.write_text('[proxy]\nlisten = ["0.0.0.0:%d"]\nstate_dir = "%s"\n' % (port, tmp_path / "state"))
    r = harness.run_cli([cmd, "--config", str(conf)], timeout=20)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "open relay" in r.stderr and "allow_clients" in r.stderr and "[[client]]" in r.stderr, r.stderr
    assert "0.0.0.0:%d" % port in r.stderr


def test_serve_listen_override_is_checked_too(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text('[proxy]\nstate_dir = "%s"\n' % (tmp_path / "state"))
    r = harness.run_cli(["serve", "--config", str(conf), "--listen", "0.0.0.0:%d" % harness.free_port()], timeout=20)
    assert r.returncode == 2 and "open relay" in r.stderr, r.stderr


def test_non_loopback_listen_with_allow_clients_serves(proxy_factory, origin, session):
    port = harness.free_port("0.0.0.0")
    p = proxy_factory(proxy={"listen": ["0.0.0.0:%d" % port], "allow_clients": ["127.0.0.1/32"]},
                      ready_host="127.0.0.1", ready_port=port)
    r = session.get(origin.url + "/json", proxies={"http": "http://127.0.0.1:%d" % port}, timeout=10)
    assert r.status_code == 200


# ---------------------------------------------------------------------------------------------------------
# Proxy authentication
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def authed(proxy_factory, origin):
    cfg = (cred("team-a", "api-key", origin.url + "/echo", key="KEY-A")
           + cred("team-b", "api-key", origin.url + "/esri", key="KEY-B")
           + client_block("alice", "alice-pw", ["team-a"])
           + client_block("ops", "ops:pw with space"))
    return proxy_factory(extra_config=cfg)


def test_407_without_or_with_wrong_credentials(authed, origin, session):
    for auth in [None, ("alice", "wrong"), ("nobody", "alice-pw")]:
        r = session.get(origin.url + "/echo", proxies=authed.proxies, auth=None, timeout=10,
                        headers={"Proxy-Authorization": requests.auth._basic_auth_str(*auth)} if auth else {})
        err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 407)
        assert r.headers["Proxy-Authenticate"] == 'Basic realm="authproxy"'
        assert "Proxy-Authorization" in " ".join(err["details"])
    assert not [e for e in origin.request_log() if "/echo" in e["target"]]
    # /healthz stays open for liveness probes.
    assert harness.healthz(authed.host, authed.port)[0] == 200


def test_curl_proxy_user(authed, origin):
    r = harness.curl("-x", authed.url, "--proxy-user", "alice:alice-pw", origin.url + "/echo?f=json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert query_of({"target": info["target"]})["token"] == ["KEY-A"]
    # Proxy-Authorization is never forwarded.
    assert not header_values(info, "proxy-authorization"), info["headers"]
    lines = authed.wait_for_log(lambda l: " access " in l and "/echo" in l)
    assert lines and "user=alice" in lines[-1], lines


def test_python_requests_userinfo_proxy_url(authed, origin, session):
    proxies = {"http": "http://alice:alice-pw@%s" % authed.authority}
    r = session.get(origin.url + "/echo?f=json", proxies=proxies, timeout=10)
    assert r.status_code == 200, r.text
    assert query_of(r.json())["token"] == ["KEY-A"]
    # A password with ':' and spaces, percent-encoded in the proxy URL.
    proxies = {"http": "http://ops:%s@%s" % (urllib.parse.quote("ops:pw with space"), authed.authority)}
    assert session.get(origin.url + "/json", proxies=proxies, timeout=10).status_code == 200


def test_non_ascii_client_password_from_curl_and_requests(proxy_factory, origin, session):
    """curl sends Basic credentials as UTF-8, Python requests as ISO-8859-1: the recipe in docs/clients.md must work with
    both (requests got 407 before)."""
    p = proxy_factory(extra_config=client_block("team-a", "pässwörd"))
    proxies = {"http": "http://team-a:%s@%s" % (urllib.parse.quote("pässwörd"), p.authority)}
    assert session.get(origin.url + "/json", proxies=proxies, timeout=10).status_code == 200
    wrong = {"http": "http://team-a:%s@%s" % (urllib.parse.quote("pässwort"), p.authority)}
    assert session.get(origin.url + "/json", proxies=wrong, timeout=10).status_code == 407
    r = harness.curl("-x", p.url, "--proxy-user", "team-a:pässwörd", "-o", "/dev/null", "-w", "%{http_code}",
                     origin.url + "/json")
    assert r.stdout in ("200", b"200"), (r.stdout, r.stderr)


def test_gdal_proxy_user(authed, origin):
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    url = origin.url + "/esri/query?where=1%3D1&outFields=*&f=json"
    base = {"GDAL_HTTP_PROXY": authed.authority, "GDAL_HTTP_TIMEOUT": "30", "GDAL_HTTP_MAX_RETRY": "0"}
    ok = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, text=True, timeout=60,
                        env=harness.clean_env(dict(base, GDAL_HTTP_PROXYUSERPWD="ops:ops:pw with space")))
    assert ok.returncode == 0 and "Feature Count: 3" in ok.stdout, ok.stdout + ok.stderr
    bad = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, text=True, timeout=60,
                         env=harness.clean_env(base))
    assert bad.returncode != 0
    assert authed.wait_for_log("user=ops")


def test_scoped_client_cannot_use_another_teams_credential(authed, origin, session):
    alice = {"http": "http://alice:alice-pw@%s" % authed.authority}
    ops = {"http": "http://ops:%s@%s" % (urllib.parse.quote("ops:pw with space"), authed.authority)}
    session.get(origin.url + "/esri/query?f=json", proxies=alice, timeout=10)
    session.get(origin.url + "/esri/query?f=json&who=ops", proxies=ops, timeout=10)
    entries = [e for e in origin.request_log() if e["target"].startswith("/esri/query")]
    assert len(entries) == 2
    assert "token" not in query_of(entries[0]), entries[0]          # alice is scoped to team-a
    assert query_of(entries[1])["token"] == ["KEY-B"], entries[1]   # ops may use every credential


def test_scoped_client_with_unmatched_deny_gets_403(proxy_factory, origin, session):
    p = proxy_factory(proxy={"unmatched": "deny"}, extra_config=(
        cred("team-a", "api-key", origin.url + "/echo", key="KEY-A")
        + cred("team-b", "api-key", origin.url + "/esri", key="KEY-B")
        + client_block("alice", "pw", ["team-a"])))
    proxies = {"http": "http://alice:pw@%s" % p.authority}
    assert session.get(origin.url + "/echo", proxies=proxies, timeout=10).status_code == 200
    r = session.get(origin.url + "/esri/query?f=json", proxies=proxies, timeout=10)
    harness.assert_error_json(r.status_code, r.headers.get, r.content, 403)


def test_connect_without_proxy_authorization_is_refused_and_closed(authed, origin):
    out = raw_exchange(authed, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n"
                       b"GET " + origin.url.encode() + b"/json HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 407"), out[:200]
    assert out.count(b"HTTP/1.1") == 1, out
    assert not [e for e in origin.request_log() if e["target"].endswith("/json")]


# ---------------------------------------------------------------------------------------------------------
# Rate limits
# ---------------------------------------------------------------------------------------------------------

def test_rate_limit_per_client(proxy_factory, origin, session):
    p = proxy_factory(extra_config=cred("metered", "api-key", origin.url + "/echo", key="K")
                      .replace('key = "K"', 'key = "K"\nrate_limit = { requests = 3, per_seconds = 60 }'))
    for _ in range(3):
        assert session.get(origin.url + "/echo", proxies=p.proxies, timeout=10).status_code == 200
    before = len(origin.request_log())
    r = session.get(origin.url + "/echo", proxies=p.proxies, timeout=10)
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 429)
    assert "metered" in err["message"]
    assert 1 <= int(r.headers["Retry-After"]) <= 20, r.headers
    assert len(origin.request_log()) == before, "the upstream was contacted"
    # Unmatched URLs are not limited.
    assert session.get(origin.url + "/json", proxies=p.proxies, timeout=10).status_code == 200
    # Another client address has its own bucket.
    req = b"GET " + origin.url.encode() + b"/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert raw_exchange(p, req, source="127.0.0.2").startswith(b"HTTP/1.1 200")
    assert raw_exchange(p, req, source="127.0.0.1").startswith(b"HTTP/1.1 429")
    assert p.wait_for_log("rate limit exceeded")


def test_rate_limit_buckets_per_user(proxy_factory, origin, session):
    p = proxy_factory(extra_config=cred("metered", "api-key", origin.url, key="K")
                      .replace('key = "K"', 'key = "K"\nrate_limit = { requests = 2, per_seconds = 3600 }')
                      + client_block("u1", "p1") + client_block("u2", "p2"))
    u1 = {"http": "http://u1:p1@%s" % p.authority}
    u2 = {"http": "http://u2:p2@%s" % p.authority}
    codes1 = [session.get(origin.url + "/json", proxies=u1, timeout=10).status_code for _ in range(3)]
    codes2 = [session.get(origin.url + "/json", proxies=u2, timeout=10).status_code for _ in range(3)]
    assert codes1 == [200, 200, 429] and codes2 == [200, 200, 429], (codes1, codes2)


# ---------------------------------------------------------------------------------------------------------
# Connection limits
# ---------------------------------------------------------------------------------------------------------

def _hold(proxy, source):
    """An idle connection the proxy has adopted (proved by a keep-alive /healthz exchange)."""
    s = socket.socket()
    s.settimeout(3)
    s.bind((source, 0))
    s.connect((proxy.host, proxy.port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    try:
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            d = s.recv(4096)
            if not d:
                break
            data += d
    except (socket.timeout, ConnectionResetError):
        pass
    return s, data.startswith(b"HTTP/1.1 200")


def test_max_connections_is_global_and_per_client(proxy_factory):
    p = proxy_factory(proxy={"workers": 2, "max_connections": 10, "max_connections_per_client": 9})
    time.sleep(1.5)  # the harness's readiness probe (from 127.0.0.1) has closed and given its slot back
    held = []
    try:
        for _ in range(9):
            s, ok = _hold(p, "127.0.0.5")
            assert ok
            held.append(s)
        # The tenth connection (another address) is served although both loops hold connections.
        s, ok = _hold(p, "127.0.0.2")
        assert ok, "refused below max_connections"
        held.append(s)
        # Over the total.
        s, ok = _hold(p, "127.0.0.3")
        held.append(s)
        assert not ok
        held.pop().close()
        held.pop().close()
        time.sleep(1.0)  # the proxy sees both closes and gives the slots back
        # Over the per-client limit, while the total has room.
        s, ok = _hold(p, "127.0.0.5")
        held.append(s)
        assert not ok
        assert p.wait_for_log("max_connections_per_client")
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    while True:
        s, ok = _hold(p, "127.0.0.5")
        s.close()
        if ok or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert ok, "slots were not given back"


def test_default_per_client_limit_is_a_quarter(proxy_factory):
    p = proxy_factory(proxy={"max_connections": 8})
    held = []
    try:
        results = []
        for _ in range(3):
            s, ok = _hold(p, "127.0.0.6")
            held.append(s)
            results.append(ok)
        assert results == [True, True, False], results
        s, ok = _hold(p, "127.0.0.2")
        held.append(s)
        assert ok
    finally:
        for s in held:
            s.close()


# ---------------------------------------------------------------------------------------------------------
# deny_destinations (in a private network namespace: nothing can leave the machine)
# ---------------------------------------------------------------------------------------------------------

def _netns_available():
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    return subprocess.run(["unshare", "-n", "-m", "true"], capture_output=True).returncode == 0


_COUNTING_SERVER = r"""
import socket, sys, threading
host, port, count = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((host, port)); s.listen(16)
n = 0
while True:
    c, _ = s.accept()
    n += 1
    open(count, "w").write(str(n))
    try:
        c.settimeout(2); c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nmetadata")
    except OSError:
        pass
    c.close()
"""

_DENY_SCRIPT = r"""
set -e
ip link set lo up
ip addr add 169.254.169.254/32 dev lo
mount --bind "$HOSTS" /etc/hosts
# Every background job (the two counting servers, both proxies) goes when the script ends, however it ends: a
# server left running would keep this namespace alive after the test.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
python3 "$SRV" 169.254.169.254 80 "$DIR/count" &
python3 "$SRV" 169.254.169.254 443 "$DIR/count443" &
"$BIN" serve --config "$DIR/deny.conf" 2>"$DIR/deny.log" &
p1=$!
"$BIN" serve --config "$DIR/open.conf" 2>"$DIR/open.log" &
p2=$!
for port in $PORT $PORT2; do
  for i in $(seq 1 100); do
    curl -s --noproxy '*' -o /dev/null "http://127.0.0.1:$port/healthz" && break
    sleep 0.1
  done
done
sleep 0.3
c() { curl -s --noproxy '' --max-time 10 "$@" || true; }
c -x "http://127.0.0.1:$PORT" -o "$DIR/b1" -w '%{http_code}' http://169.254.169.254/latest/meta-data/ > "$DIR/c1"
c -x "http://127.0.0.1:$PORT" -o "$DIR/b2" -w '%{http_code}' http://metadata.test/latest/meta-data/ > "$DIR/c2"
c -x "http://127.0.0.1:$PORT" -p -o /dev/null -w '%{http_connect}' https://169.254.169.254/ > "$DIR/c3"
c -x "http://127.0.0.1:$PORT" -p -o /dev/null -w '%{http_connect}' https://metadata.test/ > "$DIR/c4"
c -x "http://127.0.0.1:$PORT2" -o "$DIR/b5" -w '%{http_code}' http://metadata.test/latest/meta-data/ > "$DIR/c5"
kill -TERM $p1 $p2
wait $p1 $p2 || true
"""


@pytest.mark.skipif(not _netns_available(), reason="needs unshare -n -m (root)")
def test_deny_destinations_after_resolution(tmp_path):
    port, port2 = harness.free_port(), harness.free_port()
    for name, p, extra in [("deny", port, ""), ("open", port2, "deny_destinations = []\n")]:
        sec = harness.default_proxy_section(p, str(tmp_path / ("state-" + name)))
        (tmp_path / (name + ".conf")).write_text(harness.render_config(sec, harness.default_log_section())
                                                 .replace("[log]", extra + "\n[log]"))
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n169.254.169.254 metadata.test\n")
    (tmp_path / "srv.py").write_text(_COUNTING_SERVER)
    env = harness.clean_env({"BIN": harness.proxy_bin(), "DIR": str(tmp_path), "PORT": str(port),
                             "PORT2": str(port2), "HOSTS": str(tmp_path / "hosts"), "SRV": str(tmp_path / "srv.py")})
    subprocess.run(["unshare", "-n", "-m", "bash", "-c", _DENY_SCRIPT], env=env, timeout=90, check=True)
    read = lambda n: (tmp_path / n).read_text() if (tmp_path / n).exists() else ""  # noqa: E731
    logs = read("deny.log")[-3000:]
    assert read("c1") == "403", (read("c1"), read("b1"), logs)
    err = json.loads(read("b1"))["error"]
    assert "169.254.169.254" in " ".join(err["details"]) and "deny_destinations" in " ".join(err["details"])
    assert read("c2") == "403", (read("c2"), read("b2"), logs)       # a name resolving into the block
    assert read("c3") == "403", (read("c3"), logs)                    # CONNECT tunnels too
    assert read("c4") == "403", (read("c4"), logs)
    # With deny_destinations = [] the same name is reachable: the 403s above were the policy, not the network.
    assert read("c5") == "200" and read("b5") == "metadata", (read("c5"), read("open.log")[-2000:])
    assert read("count") == "1", "the denied proxy connected to the metadata address"
    assert read("count443") == "", "a denied CONNECT reached the metadata address"
