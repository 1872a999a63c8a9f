"""Live configuration reload: SIGHUP and [proxy] watch_config.

Every test starts its own origin(s) and proxy on loopback, on ports it picks, and stops them. The reload is
observed from outside: what the origin receives (the token in the URL), what the proxy logs, and that
connections opened before the reload keep working."""

import hashlib
import json
import os
import re
import signal
import threading
import time

import pytest

import harness
from harness import cred
from httpraw import RawConn, request_bytes
from origin import pattern_sha256


def echo_token(proxy, origin, session, path="/echo"):
    """The token the origin received for one request through the proxy (None: none)."""
    r = session.get(origin.url + path, proxies=proxy.proxies, timeout=10)
    assert r.status_code == 200, r.text[:300]
    m = re.search(r"[?&]token=([^&]*)", r.json()["target"])
    return m.group(1) if m else None


def rewrite(proxy, text):
    """Replaces the proxy's configuration file (a new file renamed over it, as editors and tools do)."""
    tmp = proxy.config_path + ".new"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, proxy.config_path)
    proxy.config_text = text


def reload_lines(proxy, what="configuration reload"):
    return [l for l in proxy.log_lines() if what in l]


def sighup(proxy, expect):
    """SIGHUP (not proxy.signal(): an unexpected exit must still fail the test) and wait for the outcome's
    log line; returns it."""
    before = len(reload_lines(proxy))
    proxy.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = reload_lines(proxy)
        if len(lines) > before:
            line = lines[before]
            assert expect in line, line
            return line
        time.sleep(0.05)
    raise AssertionError("no reload log line after SIGHUP; log tail:\n" + proxy.log_text()[-3000:])


def api_key(origin, key, name="k"):
    return cred(name, "api-key", origin.url + "/", key=key)


# ---------------------------------------------------------------------------------------------------------
# A long download across a reload that changes the key
# ---------------------------------------------------------------------------------------------------------

def test_download_in_flight_survives_a_reload_that_changes_the_key(proxy_factory, origin, session):
    p = proxy_factory(extra_config=api_key(origin, "OLD-KEY"))
    assert echo_token(p, origin, session) == "OLD-KEY"

    # A kept-alive client connection, idle across the reload: its next request must use the new key.
    idle = RawConn(p.host, p.port, timeout=20)
    idle.send(request_bytes("GET", origin.url + "/echo", [("Host", origin.authority)]))
    assert idle.read_response().json()["target"].endswith("token=OLD-KEY")

    # 100 MiB streamed slowly (400 x 256 KiB, 10 ms apart): it is still running when the reload happens.
    count, size = 400, 256 * 1024
    result = {}
    progress = threading.Event()

    def download():
        try:
            h = hashlib.sha256()
            n = 0
            with session.get(origin.url + "/drip?count=%d&size=%d&interval=0.01" % (count, size),
                             proxies=p.proxies, stream=True, timeout=60) as r:
                result["status"] = r.status_code
                for chunk in r.iter_content(1 << 16):
                    h.update(chunk)
                    n += len(chunk)
                    if n >= 4 * size:
                        progress.set()
            result["bytes"] = n
            result["sha256"] = h.hexdigest()
        except Exception as e:  # reported below
            result["error"] = repr(e)
        finally:
            progress.set()

    t = threading.Thread(target=download)
    t.start()
    assert progress.wait(20)
    assert "error" not in result, result

    rewrite(p, p.config_text.replace("OLD-KEY", "NEW-KEY"))
    line = sighup(p, "configuration reloaded")
    assert "trigger=SIGHUP" in line and "changed=k" in line, line
    assert t.is_alive(), "the download ended before the reload: make it longer"
    # Never a secret in the log.
    assert "NEW-KEY" not in p.log_text() and "OLD-KEY" not in p.log_text()

    # New requests carry the new key while the download goes on.
    assert echo_token(p, origin, session) == "NEW-KEY"
    idle.send(request_bytes("GET", origin.url + "/echo", [("Host", origin.authority)]))
    assert idle.read_response().json()["target"].endswith("token=NEW-KEY")
    idle.close()

    t.join(90)
    assert not t.is_alive()
    assert result.get("status") == 200 and "error" not in result, result
    assert result["bytes"] == count * size
    assert result["sha256"] == pattern_sha256(count * size)
    # The download went upstream with the key it began with.
    drips = [e for e in origin.request_log() if e["target"].startswith("/drip")]
    assert len(drips) == 1 and "token=OLD-KEY" in drips[0]["target"], drips


# ---------------------------------------------------------------------------------------------------------
# An invalid configuration is rejected; the running one stays
# ---------------------------------------------------------------------------------------------------------

def break_syntax(text):
    """A TOML syntax error at the end of the file: (text, its line)."""
    return text + "[[credential]\nname = \"x\"\n", text.count("\n") + 1


def break_unknown_key(text):
    """An unknown key in [log]: (text, its line)."""
    lines = text.split("\n")
    at = lines.index("[log]") + 1
    lines.insert(at, 'colour = "red"')
    return "\n".join(lines), at + 1


@pytest.mark.parametrize("breaker, key, message", [
    (break_syntax, None, "TOML syntax error"),
    (break_unknown_key, "log.colour", "unknown key"),
])
def test_an_invalid_configuration_is_rejected_and_the_old_key_stays(proxy_factory, origin, session,
                                                                     breaker, key, message):
    p = proxy_factory(extra_config=api_key(origin, "OLD-KEY"))
    good = p.config_text
    # The new key is in the broken file too: none of it may apply.
    broken, line = breaker(good.replace("OLD-KEY", "NEW-KEY"))
    rewrite(p, broken)
    logged = sighup(p, "configuration reload rejected")
    assert "running configuration stays in force" in logged
    assert message in logged, logged
    if key:
        assert "key=%s" % key in logged, logged
    assert "line=%d" % line in logged, logged
    assert "NEW-KEY" not in p.log_text()
    assert echo_token(p, origin, session) == "OLD-KEY"

    # Fixed, it applies.
    rewrite(p, good.replace("OLD-KEY", "NEW-KEY"))
    sighup(p, "configuration reloaded")
    assert echo_token(p, origin, session) == "NEW-KEY"


# ---------------------------------------------------------------------------------------------------------
# watch_config and a Kubernetes secret volume
# ---------------------------------------------------------------------------------------------------------

def _write_stamp_dir(root, files, stamp):
    """<root>/<stamp>/<name> for each file: one version of the volume's contents."""
    d = os.path.join(root, stamp)
    os.mkdir(d)
    for name, content in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(content)


def k8s_secret_volume(root, files, stamp):
    """Lays `files` out the way the kubelet's atomic writer does: <root>/<stamp>/<name>, ..data -> <stamp>,
    <name> -> ..data/<name>."""
    os.makedirs(root, exist_ok=True)
    _write_stamp_dir(root, files, stamp)
    os.symlink(stamp, os.path.join(root, "..data"))
    for name in files:
        os.symlink(os.path.join("..data", name), os.path.join(root, name))


def k8s_swap(root, files, stamp):
    """The kubelet's update: a new timestamped directory, ..data_tmp -> it, renamed over ..data (atomic), and
    the old directory removed."""
    old = os.readlink(os.path.join(root, "..data"))
    _write_stamp_dir(root, files, stamp)
    os.symlink(stamp, os.path.join(root, "..data_tmp"))
    os.rename(os.path.join(root, "..data_tmp"), os.path.join(root, "..data"))
    for name in os.listdir(os.path.join(root, old)):
        os.unlink(os.path.join(root, old, name))
    os.rmdir(os.path.join(root, old))


def test_watch_config_follows_a_kubernetes_secret_swap(proxy_factory, origin, session, tmp_path):
    secret = str(tmp_path / "secret")
    k8s_secret_volume(secret, {"key": "K8S-OLD\n"}, "..2026_11_23_10_00_00.000000001")
    p = proxy_factory(proxy={"watch_config": True},
                      extra_config=api_key(origin, "file:%s/key" % secret))
    assert p.wait_for_log("watching the configuration for changes")
    assert echo_token(p, origin, session) == "K8S-OLD"

    k8s_swap(secret, {"key": "K8S-NEW\n"}, "..2026_11_23_10_05_00.000000002")
    deadline = time.monotonic() + 3
    token = None
    while time.monotonic() < deadline:
        token = echo_token(p, origin, session)
        if token == "K8S-NEW":
            break
        time.sleep(0.1)
    assert token == "K8S-NEW", "the swapped secret was not picked up within 3 s:\n" + p.log_text()[-2000:]
    applied = reload_lines(p, "configuration reloaded")
    assert len(applied) == 1 and 'trigger="file change"' in applied[0] and "changed=k" in applied[0], applied

    # A second swap: the watches follow the new directories.
    k8s_swap(secret, {"key": "K8S-THIRD\n"}, "..2026_11_23_10_10_00.000000003")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and echo_token(p, origin, session) != "K8S-THIRD":
        time.sleep(0.1)
    assert echo_token(p, origin, session) == "K8S-THIRD"

    # Files rewritten with the same contents (a touch, a config management run) do not reload.
    n = len(reload_lines(p))
    rewrite(p, p.config_text)
    os.utime(os.path.join(secret, "key"))
    time.sleep(1.5)
    assert len(reload_lines(p)) == n, reload_lines(p)

    # An edit of the configuration file itself is picked up too.
    rewrite(p, p.config_text.replace("file:%s/key" % secret, "INLINE-KEY"))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and echo_token(p, origin, session) != "INLINE-KEY":
        time.sleep(0.1)
    assert echo_token(p, origin, session) == "INLINE-KEY"


def test_without_watch_config_a_changed_file_is_not_reloaded(proxy_factory, origin, session):
    p = proxy_factory(extra_config=api_key(origin, "OLD-KEY"))
    assert not p.wait_for_log("watching the configuration", timeout=0.5)
    rewrite(p, p.config_text.replace("OLD-KEY", "NEW-KEY"))
    time.sleep(1.5)
    assert echo_token(p, origin, session) == "OLD-KEY"
    assert not reload_lines(p)


# ---------------------------------------------------------------------------------------------------------
# Token credentials: kept when unchanged, fetched again when changed
# ---------------------------------------------------------------------------------------------------------

def test_an_unchanged_token_credential_keeps_its_token_a_changed_one_fetches_a_new_one(
        proxy_factory, ags, origin, session):
    creds = cred("ags", "arcgis-token", ags.server_root, username="alice", password="alice-pass")
    p = proxy_factory(extra_config=creds + api_key(origin, "OLD-KEY"))
    url = ags.query_url() + "?f=json"
    r = session.get(url, proxies=p.proxies, timeout=30)
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    assert len(ags.token_calls()) == 1

    # Another credential changes: this one keeps its token.
    rewrite(p, p.config_text.replace("OLD-KEY", "NEW-KEY"))
    line = sighup(p, "configuration reloaded")
    assert "kept=ags" in line and "changed=k" in line, line
    r = session.get(url, proxies=p.proxies, timeout=30)
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    assert len(ags.token_calls()) == 1, ags.token_calls()

    # This one changes (another user): its token is dropped and a new one fetched, for the new user.
    rewrite(p, p.config_text.replace('username = "alice"', 'username = "bob"')
            .replace('password = "alice-pass"', 'password = "bob-pass"'))
    line = sighup(p, "configuration reloaded")
    assert "changed=ags" in line, line
    r = session.get(url, proxies=p.proxies, timeout=30)
    assert r.status_code == 200 and r.json().get("features"), r.text[:300]
    calls = ags.token_calls()
    assert len(calls) == 2, calls
    # The queries went out with alice's token before the change and with bob's after it.
    users = [e.get("user") for e in ags.request_log() if e.get("outcome") == "ok"]
    assert users == ["alice", "alice", "bob"], ags.request_log()
    # Neither password is ever logged.
    assert "alice-pass" not in p.log_text() and "bob-pass" not in p.log_text()


# ---------------------------------------------------------------------------------------------------------
# A CONNECT tunnel open across a reload
# ---------------------------------------------------------------------------------------------------------

def test_a_tunnel_open_across_a_reload_keeps_working(proxy_factory, origin):
    p = proxy_factory(proxy={"connect_ports": [443, origin.port]})
    c = RawConn(p.host, p.port, timeout=10)
    c.send(request_bytes("CONNECT", origin.authority, [("Host", origin.authority)]))
    assert c.read_response(method="CONNECT").status == 200
    c.send(request_bytes("GET", "/json", [("Host", origin.authority)]))
    assert c.read_response().status == 200

    # The reload takes the origin's port out of connect_ports: new tunnels are refused, this one stays.
    rewrite(p, p.config_text.replace("connect_ports = [443, %d]" % origin.port, "connect_ports = [443]"))
    line = sighup(p, "configuration reloaded")
    assert "proxy.connect_ports" in line, line
    for _ in range(3):
        c.send(request_bytes("GET", "/json", [("Host", origin.authority)]))
        assert c.read_response().status == 200
    c.close()

    c2 = RawConn(p.host, p.port, timeout=10)
    c2.send(request_bytes("CONNECT", origin.authority, [("Host", origin.authority)]))
    assert c2.read_response(method="CONNECT").status == 403
    c2.close()


# ---------------------------------------------------------------------------------------------------------
# Settings that need a restart
# ---------------------------------------------------------------------------------------------------------

def test_a_listen_change_needs_a_restart_and_the_old_listener_keeps_serving(proxy_factory, origin, session):
    p = proxy_factory(extra_config=api_key(origin, "OLD-KEY"))
    other = harness.free_port()
    rewrite(p, p.config_text.replace('"127.0.0.1:%d"' % p.port, '"127.0.0.1:%d"' % other)
            .replace("OLD-KEY", "NEW-KEY"))
    line = sighup(p, "configuration reloaded")
    assert "needs_restart=proxy.listen" in line, line
    warnings = p.wait_for_log("needs a restart")
    assert warnings and "setting=proxy.listen" in warnings[0], warnings
    assert "running=127.0.0.1:%d" % p.port in warnings[0] and "configured=127.0.0.1:%d" % other in warnings[0]
    # The rest of the file applied; the old listener serves it; the new address is not listened on.
    assert echo_token(p, origin, session) == "NEW-KEY"
    assert harness.healthz(p.host, p.port)[0] == 200
    with pytest.raises(ConnectionRefusedError):
        harness.healthz("127.0.0.1", other, timeout=0.5)


# ---------------------------------------------------------------------------------------------------------
# Settings that apply live: log level, watch_config itself
# ---------------------------------------------------------------------------------------------------------

def test_log_level_and_watch_config_apply_live(proxy_factory, origin, session):
    p = proxy_factory(extra_config=api_key(origin, "OLD-KEY"))
    assert echo_token(p, origin, session) == "OLD-KEY"
    assert harness.access_lines_text(p)

    # [log] level = "warning": no more access lines (info), from every logger at once.
    text = p.config_text.replace('level = "info"', 'level = "warning"')
    assert text != p.config_text
    rewrite(p, text)
    p.proc.send_signal(signal.SIGHUP)  # its own notice line is below the new level: wait for the effect
    deadline = time.monotonic() + 5
    while True:
        n = len(harness.access_lines_text(p))
        echo_token(p, origin, session)
        time.sleep(0.1)
        if len(harness.access_lines_text(p)) == n or time.monotonic() > deadline:
            break
    for _ in range(3):
        echo_token(p, origin, session)
    time.sleep(0.2)
    assert len(harness.access_lines_text(p)) == n
    assert not reload_lines(p)

    # Back to info and watch_config turned on by a SIGHUP: from then on a file change is enough.
    rewrite(p, p.config_text.replace('level = "warning"', 'level = "info"')
            .replace("[proxy]\n", "[proxy]\nwatch_config = true\n", 1))
    sighup(p, "configuration reloaded")
    assert p.wait_for_log("watching the configuration for changes")
    rewrite(p, p.config_text.replace("OLD-KEY", "NEW-KEY"))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and echo_token(p, origin, session) != "NEW-KEY":
        time.sleep(0.1)
    assert echo_token(p, origin, session) == "NEW-KEY"
    assert 'trigger="file change"' in reload_lines(p, "configuration reloaded")[-1]


# ---------------------------------------------------------------------------------------------------------
# Proxy authentication on a kept-alive connection
# ---------------------------------------------------------------------------------------------------------

def test_a_client_removed_by_a_reload_is_refused_on_its_kept_alive_connection(proxy_factory, origin):
    import base64
    clients = ('\n[[client]]\nname = "alice"\npassword = "alice-secret"\n'
               '\n[[client]]\nname = "bob"\npassword = "bob-secret"\n')
    p = proxy_factory(extra_config=api_key(origin, "OLD-KEY") + clients)

    def get(conn, user):
        auth = base64.b64encode(("%s:%s-secret" % (user, user)).encode()).decode()
        conn.send(request_bytes("GET", origin.url + "/echo", [("Host", origin.authority),
                                                             ("Proxy-Authorization", "Basic " + auth)]))
        return conn.read_response()

    a = RawConn(p.host, p.port, timeout=10)
    b = RawConn(p.host, p.port, timeout=10)
    assert get(a, "alice").status == 200
    assert get(b, "bob").status == 200
    rewrite(p, p.config_text.replace('\n[[client]]\nname = "alice"\npassword = "alice-secret"\n', ""))
    sighup(p, "configuration reloaded")
    # Same connections, same header: alice is gone, bob is still admitted.
    assert get(a, "alice").status == 407
    r = get(b, "bob")
    assert r.status == 200 and r.json()["target"].endswith("token=OLD-KEY")
    a.close()
    b.close()


def test_a_reload_notice_names_a_new_client_password_and_a_retuned_credential(proxy_factory, origin):
    """A changed [[client]] password and a password credential's allow_basic_over_http take effect on reload;
    the notice says so instead of "(no changes)" (found by a README walk-through)."""
    import base64
    client = '\n[[client]]\nname = "alice"\npassword = "alice-secret"\n'
    netcred = cred("pw", "password", origin.url + "/basic", username="u", password="p", schemes=["basic"])
    p = proxy_factory(extra_config=netcred + client)
    rewrite(p, p.config_text.replace("alice-secret", "alice-new-secret"))
    line = sighup(p, "configuration reloaded")
    assert "no changes" not in line and "settings=client" in line, line
    assert "alice-new-secret" not in p.log_text() and "alice-secret" not in p.log_text()

    def get(password):
        auth = base64.b64encode(("alice:" + password).encode()).decode()
        with RawConn(p.host, p.port, timeout=10) as c:
            c.send(request_bytes("GET", origin.url + "/echo", [("Host", origin.authority),
                                                                 ("Proxy-Authorization", "Basic " + auth)]))
            return c.read_response().status
    assert get("alice-secret") == 407
    assert get("alice-new-secret") == 200

    rewrite(p, p.config_text.replace('schemes = ["basic"]', 'schemes = ["basic"]\nallow_basic_over_http = true'))
    line = sighup(p, "configuration reloaded")
    assert "no changes" not in line and "retuned=pw" in line, line


def test_a_pooled_https_connection_is_not_reused_under_stricter_trust_after_a_reload(proxy_factory, tls_cert):
    """A kept-alive https connection is pooled with the server-trust settings it was verified with: once a reload
    drops `insecure = true`, the next request makes a new connection and verifies it (and fails here, the
    certificate being self-signed) instead of riding the connection nobody verified."""
    backend = harness.RawBackend(tls=tls_cert)
    try:
        trust = cred("t", "server-trust", "https://" + backend.authority, insecure=True)
        p = proxy_factory(extra_config=cred("k", "api-key", backend.url, key="K", upgrade_to_https=True) + trust)
        # One client connection for both requests, so both run on the same event loop and its connection pool.
        with RawConn(p.host, p.port, timeout=10) as c:
            c.send(("GET %s/before HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
            assert (r.status, r.body) == (200, b"GET /before?token=K 0")
            rewrite(p, p.config_text.replace(trust, ""))
            sighup(p, "configuration reloaded")
            c.send(("GET %s/after HTTP/1.1\r\nHost: x\r\n\r\n" % backend.url).encode())
            r = c.read_response()
        err = harness.assert_error_json(r.status, r.get, r.body, 502)
        assert "server-trust" in json.dumps(err), err
        assert [q.target for q in backend.requests] == ["/before?token=K"]
    finally:
        backend.stop()
