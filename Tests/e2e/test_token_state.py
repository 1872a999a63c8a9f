"""The token state file: never lost, never overwritten when unreadable, locked against
concurrent writers, and followed by a running proxy when `login` or `signout` change it."""
import glob
import json
import os
import subprocess
import threading
import time

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer, federate
from test_credentials import arcgis_cred, via

KEY = "a-very-long-state-key-for-tests"
WRONG = "another-long-but-wrong-state-key"


def write_conf(tmp_path, name, state, key, creds):
    proxy = harness.default_proxy_section(harness.free_port(), str(state))
    if key:
        proxy["state_key"] = key
    path = tmp_path / name
    path.write_text(harness.render_config(proxy, harness.default_log_section()) + creds)
    return path


def saved_state(proxy_factory, ags, session, state):
    """Runs a proxy once so that `state` holds an encrypted token."""
    p = proxy_factory(proxy={"state_dir": str(state), "state_key": KEY}, extra_config=arcgis_cred(ags))
    assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
    p.stop()
    assert (state / "tokens.enc").exists()


def test_wrong_state_key_is_exit_2_and_the_file_is_untouched(proxy_factory, ags, session, tmp_path):
    state = tmp_path / "state"
    saved_state(proxy_factory, ags, session, state)
    blob = (state / "tokens.enc").read_bytes()
    conf = write_conf(tmp_path, "wrong.conf", state, WRONG, arcgis_cred(ags))
    expected = "state_key does not decrypt %s" % (state / "tokens.enc")

    s = harness.run_cli(["serve", "--config", str(conf)], timeout=20)
    assert s.returncode == 2, (s.returncode, s.stderr)
    assert expected in s.stderr, s.stderr
    c = harness.run_cli(["check", "--config", str(conf)])
    assert c.returncode == 2, c.stdout
    assert expected in c.stderr, c.stderr
    so = harness.run_cli(["signout", "--config", str(conf)])
    assert so.returncode == 2 and expected in so.stderr, so.stderr
    assert (state / "tokens.enc").read_bytes() == blob
    assert sorted(os.listdir(state)) in (["tokens.enc"], ["tokens.enc", "tokens.lock"])
    # The right key still opens it: nothing was lost.
    ok = write_conf(tmp_path, "right.conf", state, KEY, arcgis_cred(ags))
    c = harness.run_cli(["check", "--config", str(ok)])
    assert c.returncode == 0 and "1 token(s)" in c.stdout, (c.stdout, c.stderr)
    assert KEY not in c.stdout + c.stderr


def test_login_checks_the_key_before_spending_the_code(federation, tmp_path):
    portal, server = federation
    state = tmp_path / "state"
    state.mkdir()
    (state / "tokens.enc").write_bytes(b"APST2" + os.urandom(200))
    blob = (state / "tokens.enc").read_bytes()
    creds = cred("me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                 portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())
    conf = write_conf(tmp_path, "login.conf", state, KEY, creds)
    r = harness.run_cli(["login", "--config", str(conf), "--credential", "me", "--timeout", "5"], timeout=20)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "state_key does not decrypt" in r.stderr
    assert "/oauth2/authorize" not in r.stdout  # no sign-in was started
    assert portal.stats()["requests"].get("oauth_token", 0) == 0
    assert (state / "tokens.enc").read_bytes() == blob


@pytest.mark.parametrize("key", [KEY, None])
def test_damaged_file_is_renamed_aside(proxy_factory, ags, session, tmp_path, key):
    state = tmp_path / "state"
    name = "tokens.enc" if key else "tokens.json"
    if key:
        # A real encrypted file (the right key) with one bit flipped in the box.
        saved_state(proxy_factory, ags, session, state)
        junk = bytearray((state / name).read_bytes())
        junk[-1] ^= 1
        junk = bytes(junk)
        ags.reset_stats()
    else:
        state.mkdir()
        junk = b'{"version":1,"tok'
    (state / name).write_bytes(junk)
    conf = write_conf(tmp_path, "c.conf", state, key, arcgis_cred(ags))
    c = harness.run_cli(["check", "--config", str(conf)])
    assert c.returncode == 2 and "rename it aside" in c.stderr, c.stderr
    assert (state / name).read_bytes() == junk  # check only reports
    extra = {"state_dir": str(state)}
    if key:
        extra["state_key"] = key
    p = proxy_factory(proxy=extra, extra_config=arcgis_cred(ags))
    aside = glob.glob(str(state / (name + ".corrupt-*")))
    assert len(aside) == 1, os.listdir(state)
    assert open(aside[0], "rb").read() == junk
    assert p.wait_for_log(lambda l: "damaged" in l and "renamed" in l)
    assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
    assert p.wait_for_log(lambda l: "token obtained" in l)
    time.sleep(0.3)
    assert (state / name).exists() and (state / name).read_bytes() != junk


def login(conf, user=None):
    """Runs `authproxy login` with the test portal as the browser (as `user`, default alice)."""
    proc = subprocess.Popen([harness.proxy_bin(), "login", "--config", str(conf), "--credential", "me", "--timeout", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=harness.clean_env(), text=True)
    url = None
    for line in proc.stdout:
        if "/oauth2/authorize?" in line:
            url = line.strip()
            break
    assert url, proc.stderr.read()
    if user:
        url += "&__user=" + user
    time.sleep(0.3)
    b = requests.Session()
    b.trust_env = False
    r = b.get(url, allow_redirects=True, timeout=30)
    assert r.status_code == 200, r.text
    out, errs = proc.communicate(timeout=30)
    assert proc.returncode == 0, errs
    return out


def last_user(server):
    return [e for e in server.request_log() if e["outcome"] == "ok"][-1]["user"]


def test_login_while_serve_runs_is_used_and_kept(proxy_factory, federation, session, tmp_path):
    portal, server = federation
    state = tmp_path / "state"
    creds = cred("me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                 portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())
    conf = write_conf(tmp_path, "login.conf", state, None, creds)
    login(conf)
    # A second credential keeps the proxy writing the state file all the time (token ttl 1 s).
    fast = ArcGISServer(role="server", ttl=1).start()
    try:
        p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds + arcgis_cred(fast))
        r = via(p, session, "GET", server.query_url() + "?f=json")
        assert r.status_code == 200, r.text[:300]
        assert last_user(server) == "alice"
        stop = threading.Event()

        def churn():
            s = requests.Session()
            s.trust_env = False
            while not stop.is_set():
                s.get(fast.query_url() + "?f=json", proxies=p.proxies, timeout=10)
                time.sleep(0.05)

        t = threading.Thread(target=churn)
        t.start()
        try:
            login(conf, user="bob")  # signs in again, as another user, while the proxy saves tokens
            time.sleep(1.5)
        finally:
            stop.set()
            t.join()
        # The running proxy follows the new sign-in (no restart) ...
        deadline = time.time() + 5
        while time.time() < deadline:
            r = via(p, session, "GET", server.query_url() + "?f=json")
            assert r.status_code == 200, r.text[:300]
            if last_user(server) == "bob":
                break
            time.sleep(0.3)
        assert last_user(server) == "bob"
        # ... and the file keeps bob's refresh token after all the proxy's saves.
        time.sleep(1.5)
        contents = json.loads((state / "tokens.json").read_text())
        assert [r["username"] for r in contents["refreshTokens"]] == ["bob"], contents["refreshTokens"]
        assert fast.stats()["tokens_issued"]["generate_password"] >= 2
    finally:
        fast.stop()


def test_signout_while_serve_runs(proxy_factory, federation, session, tmp_path):
    portal, server = federation
    state = tmp_path / "state"
    creds = cred("me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                 portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())
    conf = write_conf(tmp_path, "login.conf", state, None, creds)
    login(conf)
    p = proxy_factory(proxy={"state_dir": str(state)}, extra_config=creds)
    assert via(p, session, "GET", server.query_url() + "?f=json").status_code == 200
    so = harness.run_cli(["signout", "--config", str(conf)])
    assert so.returncode == 0, so.stderr
    time.sleep(1.5)
    # The proxy dropped the signed-out user's tokens (without a restart) and did not write them back.
    r = via(p, session, "GET", server.query_url() + "?f=json")
    err = harness.assert_error_json(r.status_code, r.headers.get, r.content, 502)
    assert "authproxy login" in err["message"]
    contents = json.loads((state / "tokens.json").read_text())
    assert contents["refreshTokens"] == [] and contents["tokens"] == []


def test_login_renames_a_damaged_file_aside(federation, tmp_path):
    portal, server = federation
    state = tmp_path / "state"
    state.mkdir()
    (state / "tokens.json").write_bytes(b"\x00not a state file")
    creds = cred("me", "oauth-user", [portal.portal_url, server.server_root], client_id="proxyapp",
                 portal_url=portal.portal_url, redirect_uri="http://127.0.0.1:%d/callback" % harness.free_port())
    conf = write_conf(tmp_path, "login.conf", state, None, creds)
    assert "refresh token stored" in login(conf)
    aside = glob.glob(str(state / "tokens.json.corrupt-*"))
    assert len(aside) == 1 and open(aside[0], "rb").read() == b"\x00not a state file"
    contents = json.loads((state / "tokens.json").read_text())
    assert [r["credential"] for r in contents["refreshTokens"]] == ["me"]
