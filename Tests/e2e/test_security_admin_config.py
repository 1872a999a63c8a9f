"""The admin listener from a web page (DNS rebinding, cross-site POST /reload),
configuration errors that quoted secrets, and the admin listener starved by slow connections."""
import json
import socket
import threading
import time

import pytest
import requests

import harness
from harness import cred
from test_admin import admin_section, samples, value, start_with_admin
from test_reload import rewrite

RELOAD_HEADER = {"X-Authproxy-Reload": "1"}


def raw_admin(p, request_bytes, source="127.0.0.1", timeout=10):
    """Sends `request_bytes` to the admin listener; returns (status, body text). status 0: closed unanswered."""
    port = int(p.admin.rsplit(":", 1)[1])
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    try:
        s.sendall(request_bytes)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    if not data:
        return 0, ""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode("utf-8", "replace")


def get_with_host(p, path, host, version="1.1"):
    hdr = ("Host: %s\r\n" % host) if host is not None else ""
    return raw_admin(p, ("GET %s HTTP/%s\r\n%s\r\n" % (path, version, hdr)).encode())


def post_reload(p, headers=None, body=b""):
    """POST /reload with exactly `headers` (plus Host and Content-Length)."""
    port = int(p.admin.rsplit(":", 1)[1])
    lines = ["POST /reload HTTP/1.1", "Host: 127.0.0.1:%d" % port, "Content-Length: %d" % len(body)]
    lines += ["%s: %s" % kv for kv in (headers or {}).items()]
    return raw_admin(p, ("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def reloads(p):
    m = samples(p)
    return value(m, "authproxy_config_reloads_total", result="applied") + value(
        m, "authproxy_config_reloads_total", result="rejected")


# ---------------------------------------------------------------------------------------------------------
# Item 3: Host names the admin listener; POST /reload is same-origin and non-simple
# ---------------------------------------------------------------------------------------------------------

def test_admin_refuses_a_host_that_does_not_name_it(proxy_factory, origin):
    """A page on attacker.example rebound to 127.0.0.1 sends Host: attacker.example: refused before any route."""
    p = start_with_admin(proxy_factory, cred("k", "api-key", origin.url + "/", key="ADMIN-HOST-KEY"))
    port = int(p.admin.rsplit(":", 1)[1])
    for path in ("/status.json", "/", "/metrics", "/readyz", "/healthz"):
        status, body = get_with_host(p, path, "attacker.example:%d" % port)
        assert status == 421, (path, status, body)
        assert "[admin] hosts" in body and origin.url not in body, body
    # Names that only resemble an allowed one.
    for host in ("localhost.attacker.example", "127.0.0.1.nip.io", "attacker.example", "", "localhost.:%d" % port):
        assert get_with_host(p, "/status.json", host)[0] == 421, host
    # What names the listener: IP literals (with or without a port: the port is ignored), localhost.
    for host in ("127.0.0.1:%d" % port, "127.0.0.1", "LOCALHOST:%d" % port, "localhost", "[::1]:%d" % port,
                 "10.1.2.3:8080"):
        status, body = get_with_host(p, "/status.json", host)
        assert status == 200 and "ADMIN-HOST-KEY" not in body, (host, status)
    # HTTP/1.0 without Host: no browser sends that.
    assert get_with_host(p, "/healthz", None, version="1.0")[0] == 200
    # HTTP/1.1 without Host stays a 400.
    assert get_with_host(p, "/healthz", None)[0] == 400
    # An absolute-form target names the authority itself.
    assert raw_admin(p, b"GET http://attacker.example/status.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[0] == 421


def test_admin_hosts_names_are_accepted_and_reloadable(proxy_factory, origin):
    port = harness.free_port()
    extra = admin_section(port) + 'hosts = ["Admin.Example"]\n' + cred("k", "api-key", origin.url + "/", key="K1")
    p = proxy_factory(extra_config=extra)
    assert p.wait_for_log(lambda l: "admin listener" in l, timeout=5)
    p.admin = "http://127.0.0.1:%d" % port
    assert get_with_host(p, "/status.json", "admin.example:%d" % port)[0] == 200
    assert get_with_host(p, "/status.json", "admin.example")[0] == 200
    assert get_with_host(p, "/status.json", "other.example")[0] == 421
    rewrite(p, p.config_text.replace('hosts = ["Admin.Example"]', 'hosts = ["other.example"]'))
    status, body = post_reload(p, RELOAD_HEADER)
    assert status == 200 and json.loads(body)["applied"] is True, body
    assert "admin.hosts" in json.loads(body)["message"], body
    assert get_with_host(p, "/status.json", "other.example")[0] == 200
    assert get_with_host(p, "/status.json", "admin.example")[0] == 421


def test_admin_hosts_is_validated(proxy_binary, tmp_path):
    port = harness.free_port()
    cfg = tmp_path / "ok.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:%d"]\n\n[admin]\nlisten = "127.0.0.1:%d"\n'
                   'hosts = ["admin.example", "Authproxy-Admin.monitoring.svc"]\n' % (harness.free_port(), port))
    r = harness.run_cli(["check", "--config", str(cfg)])
    assert r.returncode == 0, r.stdout + r.stderr
    for bad in ('"http://admin.example"', '"admin.example:9090"', '"*.example"', '""', '"a b"'):
        cfg = tmp_path / "c.toml"
        cfg.write_text('[proxy]\nlisten = ["127.0.0.1:%d"]\n\n[admin]\nlisten = "127.0.0.1:%d"\nhosts = [%s]\n'
                       % (harness.free_port(), port, bad))
        r = harness.run_cli(["check", "--config", str(cfg)])
        assert r.returncode != 0 and "admin.hosts" in r.stdout + r.stderr, (bad, r.stdout, r.stderr)


def test_post_reload_refuses_cross_site_and_simple_requests(proxy_factory, origin):
    p = start_with_admin(proxy_factory, cred("k", "api-key", origin.url + "/", key="K1"))
    port = int(p.admin.rsplit(":", 1)[1])
    own = "http://127.0.0.1:%d" % port
    refused = [
        # What an HTML form or fetch(no-cors) can send: no custom header, a CORS-safelisted type.
        {},
        {"Content-Type": "text/plain"},
        {"Content-Type": "application/x-www-form-urlencoded"},
        {"Content-Type": "multipart/form-data; boundary=x"},
        {"Content-Type": "Text/Plain; charset=utf-8"},
        # Cross-site markers, even with the custom header.
        dict(RELOAD_HEADER, Origin="http://attacker.example"),
        dict(RELOAD_HEADER, Origin="null"),
        dict(RELOAD_HEADER, Origin="http://127.0.0.1:%d" % (port + 1)),
        dict(RELOAD_HEADER, Origin="https://127.0.0.1:%d" % port),
        dict(RELOAD_HEADER, Referer="http://attacker.example/page"),
        dict(RELOAD_HEADER, **{"Sec-Fetch-Site": "cross-site"}),
        dict(RELOAD_HEADER, **{"Sec-Fetch-Site": "same-site"}),
    ]
    before = reloads(p)
    for headers in refused:
        status, body = post_reload(p, headers)
        assert status == 403, (headers, status, body)
        assert "X-Authproxy-Reload" in body or "origin" in body.lower() or "Sec-Fetch-Site" in body, body
    assert reloads(p) == before, "a refused POST /reload must not reload"
    accepted = [
        RELOAD_HEADER,
        {"x-anything": "1"},
        {"Content-Type": "application/json"},
        dict(RELOAD_HEADER, Origin=own),
        dict(RELOAD_HEADER, Referer=own + "/"),
        dict(RELOAD_HEADER, **{"Sec-Fetch-Site": "same-origin"}),
        dict(RELOAD_HEADER, **{"Sec-Fetch-Site": "none"}),
    ]
    for headers in accepted:
        status, body = post_reload(p, headers)
        assert status == 200, (headers, status, body)
    assert reloads(p) == before + len(accepted)
    # The documented recipe, through requests.
    s = requests.Session()
    s.trust_env = False
    assert s.post(p.admin + "/reload", headers=RELOAD_HEADER, timeout=10).status_code == 200
    assert s.post(p.admin + "/reload", timeout=10).status_code == 403


# ---------------------------------------------------------------------------------------------------------
# Item 7: configuration errors never show a secret
# ---------------------------------------------------------------------------------------------------------

SECRET = "AAPK7f3e9c1d5b2a4e6f8091SECRETVALUEzz"


def _bad_configs(tmp_path, origin_url):
    secret_file = tmp_path / "secret-key"
    secret_file.write_text(SECRET + "\n")
    base = cred("k", "api-key", origin_url + "/", key="GOOD-KEY")
    return {
        # A key pasted without quotes: a TOML syntax error.
        "unquoted": (base.replace('key = "GOOD-KEY"', "key = %s" % SECRET), "key"),
        # A secret read into a field that validates and quotes what it got.
        "match_file": (base + cred("m", "api-key", "file:%s" % secret_file, key="x"), "match"),
        "match_env": (base + cred("e", "api-key", "${ENV_SECRET}", key="x"), "match"),
        "type_file": (base + cred("t", "file:%s" % secret_file, origin_url + "/t/", key="x"), "type"),
        "ca_file_env": (base + '\n[[credential]]\nname = "s"\ntype = "server-trust"\nmatch = "https://h.example/"\n'
                        'ca_file = "${ENV_SECRET}"\n', "ca_file"),
        "placement_env": (base + cred("p", "api-key", origin_url + "/p/", key="x", token_placement="${ENV_SECRET}"),
                          "token_placement"),
        "name_file": (base + cred("file:%s" % secret_file, "api-key", origin_url + "/n/", key="x"), "name"),
    }


CASES = ["unquoted", "match_file", "match_env", "type_file", "ca_file_env", "placement_env", "name_file"]


@pytest.mark.parametrize("case", CASES)
def test_check_never_prints_a_secret(proxy_binary, tmp_path, origin, case):
    extra, key = _bad_configs(tmp_path, origin.url)[case]
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:%d"]\n' % harness.free_port() + extra)
    r = harness.run_cli(["check", "--config", str(cfg)], env=harness.clean_env({"ENV_SECRET": SECRET}))
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert SECRET not in out and SECRET[:12] not in out, out
    # Still says where: the key and the line.
    assert key in out and "line" in out, out


@pytest.mark.parametrize("case", CASES)
def test_reload_answer_status_and_log_never_show_a_secret(proxy_factory, origin, tmp_path, case):
    good_cred = cred("k", "api-key", origin.url + "/", key="GOOD-KEY")
    p = start_with_admin(proxy_factory, good_cred, env={"ENV_SECRET": SECRET})
    extra, key = _bad_configs(tmp_path, origin.url)[case]
    rewrite(p, p.config_text.replace(good_cred, "") + extra)
    status, body = post_reload(p, RELOAD_HEADER)
    assert status == 422, (status, body)
    assert SECRET not in body and SECRET[:12] not in body, body
    assert key in body, body
    s = requests.Session()
    s.trust_env = False
    doc = s.get(p.admin + "/status.json", timeout=10).text
    page = s.get(p.admin + "/", timeout=10).text
    assert "rejected" in doc and SECRET not in doc and SECRET not in page
    log = p.log_text()
    assert "configuration reload" in log
    assert SECRET not in log and SECRET[:12] not in log


# ---------------------------------------------------------------------------------------------------------
# Item 8: readiness probes get through slow connections
# ---------------------------------------------------------------------------------------------------------

def _slow_connections(port, n, sources):
    """n connections that send part of a request head and then nothing."""
    out = []
    for i in range(n):
        s = socket.socket()
        s.bind((sources[i % len(sources)], 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        out.append(s)
    return out


def _probe(p):
    try:
        return raw_admin(p, b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.31\r\n\r\n",
                         timeout=5)[0]
    except OSError:
        return 0


@pytest.mark.parametrize("sources", [["127.0.0.1"], ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]],
                         ids=["one-address", "four-addresses"])
def test_readiness_probes_get_through_slow_connections(proxy_factory, sources):
    p = start_with_admin(proxy_factory, "")
    port = int(p.admin.rsplit(":", 1)[1])
    slow = _slow_connections(port, 40, sources)
    try:
        time.sleep(0.3)
        started = time.monotonic()
        results = [_probe(p) for _ in range(13)]
        # Well inside the old 10 s request timeout and the new 3 s one: the probes got through, the slow
        # connections did not simply expire first.
        assert time.monotonic() - started < 2.5
        assert results == [200] * 13, results
        # Concurrent probes too.
        results = []
        threads = [threading.Thread(target=lambda: results.append(_probe(p))) for _ in range(13)]
        more = _slow_connections(port, 40, sources)
        slow += more
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [200] * 13, results
    finally:
        for s in slow:
            s.close()


def test_slow_admin_connection_is_closed_after_the_header_timeout(proxy_factory):
    p = start_with_admin(proxy_factory, "")
    port = int(p.admin.rsplit(":", 1)[1])
    (s,) = _slow_connections(port, 1, ["127.0.0.1"])
    started = time.monotonic()
    s.settimeout(9)
    try:
        assert s.recv(100) == b""
    except ConnectionResetError:
        pass
    finally:
        s.close()
    # The admin listener's 3 s header timeout, not the old 10 s one (room above for a loaded debug build).
    assert 2.5 < time.monotonic() - started < 8
