"""`authproxy capture` and POST /capture on the admin listener: a redacted HAR 1.2 file of one credential's
exchanges through the running proxy, against the faithful ArcGIS Server (Tests/e2e/arcgis). The file is validated
against the HAR 1.2 JSON schema (Tests/e2e/har/har-1.2.schema.json, jsonschema from PyPI) and its raw text is
searched for every configured secret and every token the test server issued."""

import json
import os
import pathlib
import socket
import subprocess
import threading
import time
import urllib.parse

import jsonschema
import pytest
import requests

import harness
from harness import cred

SCHEMA = json.loads((pathlib.Path(__file__).parent / "har" / "har-1.2.schema.json").read_text())
PASSWORD = "alice-pass"
CLIENT_COOKIE = "client-cookie-secret-77"
CLIENT_AUTH = "Basic Y2xpZW50OmNsaWVudC1hdXRoLXNlY3JldA=="


def admin_section(port, capture=True):
    s = '\n[admin]\nlisten = "127.0.0.1:%d"\n' % port
    if capture is not None:
        s += "capture = %s\n" % ("true" if capture else "false")
    return s


def start(proxy_factory, config, capture=True, **kw):
    for _ in range(3):
        port = harness.free_port()
        p = proxy_factory(extra_config=admin_section(port, capture) + config, **kw)
        if p.wait_for_log(lambda l: "admin listener" in l, timeout=5):
            p.admin_port = port
            p.admin = "http://127.0.0.1:%d" % port
            return p
        p.stop()
    pytest.fail("admin listener did not start")


def arcgis(ags):
    return cred("gis", "arcgis-token", ags.server_root, username="alice", password=PASSWORD)


def via(p, method, url, **kw):
    kw.setdefault("timeout", 30)
    with requests.Session() as s:
        return s.request(method, url, proxies=p.proxies, **kw)


def issued_tokens(ags):
    with ags.state.lock:
        return list(ags.state.tokens.keys())


def run_capture(p, credential, seconds, out):
    return subprocess.Popen(
        [harness.proxy_bin(), "capture", "--config", p.config_path, "--credential", credential,
         "--seconds", str(seconds), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=harness.clean_env(), text=True)


def error_code(entry):
    """The ArcGIS error code in an entry's JSON answer, None when it has none."""
    try:
        body = json.loads(entry["response"]["content"].get("text") or "null")
    except ValueError:
        return None
    return body.get("error", {}).get("code") if isinstance(body, dict) else None


def wait_started(p, credential, timeout=10):
    assert p.wait_for_log(lambda l: "capture started" in l and credential in l, timeout=timeout), p.log_text()[-2000:]


def test_capture_of_a_token_refresh_is_valid_har_without_secrets(proxy_factory, ags, tmp_path):
    p = start(proxy_factory, arcgis(ags))
    out = tmp_path / "case.har"
    cli = run_capture(p, "gis", 6, out)
    try:
        wait_started(p, "gis")
        query = ags.query_url() + "?where=1%3D1&outFields=*&f=json"
        r = via(p, "GET", query, headers={"Cookie": "session=" + CLIENT_COOKIE, "Authorization": CLIENT_AUTH})
        assert r.status_code == 200, r.text
        r = via(p, "POST", ags.query_url(), data={"where": "1=1", "outFields": "*", "f": "json"})
        assert r.status_code == 200, r.text
        # Every token issued so far stops working: the next request is answered 498, the proxy fetches a new
        # token and sends the request again, all inside the window.
        ags.expire_all()
        r = via(p, "GET", query)
        assert r.status_code == 200, r.text
        assert ags.stats()["rejected_498"] >= 1
        stdout, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(timeout=10)
    assert cli.returncode == 0, stderr
    assert "wrote" in stdout and out.exists()
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    text = out.read_text()
    har = json.loads(text)
    jsonschema.validate(har, SCHEMA)
    for e in har["log"]["entries"]:
        if "_clientRequest" in e:
            jsonschema.validate(e["_clientRequest"], SCHEMA["$defs"]["request"] | {"$defs": SCHEMA["$defs"]})

    # Redacted by construction: no configured secret, no token the server issued, none of the client's secrets,
    # in any spelling a URL or form would carry.
    tokens = issued_tokens(ags)
    assert len(tokens) >= 2
    for secret in [PASSWORD, CLIENT_COOKIE, CLIENT_AUTH] + tokens:
        for spelling in {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}:
            assert spelling not in text, "secret found in the HAR file"

    entries = har["log"]["entries"]
    own = [e for e in entries if e["_authproxy"]["role"] == "token-service"]
    # rest/info (where the server gets its tokens), then generateToken.
    assert any(e["request"]["url"].split("?")[0].endswith("/rest/info") for e in own), [e["request"]["url"] for e in own]
    token_calls = [e for e in own if e["request"]["method"] == "POST"]
    upstream = [e for e in entries if e["_authproxy"]["role"] == "upstream"]
    # The first token, and the refresh after the 498.
    assert len(token_calls) >= 2, [e["request"]["url"] for e in entries]
    for e in token_calls:
        assert e["_authproxy"]["credential"] == "gis"
        assert e["response"]["status"] == 200
        form = {x["name"]: x["value"] for x in e["request"]["postData"]["params"]}
        assert form["username"] == "alice" and form["password"] == "[redacted:credential gis]"
        body = json.loads(e["response"]["content"]["text"])
        assert body["token"] == "[redacted:credential gis]" and "expires" in body
    # The rejected attempt (ArcGIS answers 200 with error 498 in the body) and its replay are two entries of one
    # exchange, in order.
    rejected = [e for e in upstream if error_code(e) == 498]
    assert len(rejected) == 1, [(error_code(e), e["_authproxy"]) for e in upstream]
    exchange = rejected[0]["_authproxy"]["exchange"]
    attempts = [e for e in upstream if e["_authproxy"]["exchange"] == exchange]
    assert [(e["_authproxy"]["attempt"], error_code(e)) for e in attempts] == [(1, 498), (2, None)]
    assert attempts[1]["response"]["status"] == 200
    refresh = [e for e in token_calls if e["startedDateTime"] >= rejected[0]["startedDateTime"]]
    assert refresh, "the refresh after the 498 is in the capture"
    # What went upstream shows where the proxy put the token; the client's view shows what it sent.
    first = upstream[0]
    assert first["request"]["method"] == "GET"
    params = {q["name"]: q["value"] for q in first["request"]["queryString"]}
    assert params["token"] == "[redacted:credential gis]" and params["f"] == "json"
    client = first["_clientRequest"]
    assert "token" not in {q["name"] for q in client["queryString"]}
    client_headers = {h["name"].lower(): h["value"] for h in client["headers"]}
    assert client_headers["authorization"] == "[redacted]" and client_headers["cookie"] == "[redacted]"
    assert client["cookies"] == [{"name": "session", "value": "[redacted]"}]
    assert json.loads(first["response"]["content"]["text"])["features"] is not None
    post = [e for e in upstream if e["request"]["method"] == "POST"][0]
    form = {x["name"]: x["value"] for x in post["request"]["postData"]["params"]}
    assert form["token"] == "[redacted:credential gis]" and form["where"] == "1=1"
    assert "token" not in {x["name"] for x in post["_clientRequest"]["postData"]["params"]}
    for e in entries:
        t = e["timings"]
        assert t["send"] >= 0 and t["wait"] >= 0 and t["receive"] >= 0
        assert abs(e["time"] - (t["send"] + t["wait"] + t["receive"])) < 0.01


def admin_post(p, target, headers=None, host=None, timeout=10):
    h = {"X-Authproxy-Capture": "1"}
    h.update(headers or {})
    if host:
        h["Host"] = host
    return requests.post(p.admin + target, headers=h, timeout=timeout)


def test_capture_admin_rules(proxy_factory, ags, tmp_path):
    p = start(proxy_factory, arcgis(ags))
    # Cross-site: an Origin from elsewhere, Sec-Fetch-Site, or no header a page cannot send without a preflight.
    r = admin_post(p, "/capture?credential=gis&seconds=1", headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "POST /capture" in r.text and "cross-site" in r.text
    r = admin_post(p, "/capture?credential=gis&seconds=1", headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    r = requests.post(p.admin + "/capture?credential=gis&seconds=1", timeout=10)
    assert r.status_code == 403 and "X-Authproxy-Capture" in r.text
    # A name the listener is not known by (DNS rebinding).
    r = admin_post(p, "/capture?credential=gis&seconds=1", host="rebound.example:%d" % p.admin_port)
    assert r.status_code == 421
    r = requests.get(p.admin + "/capture?credential=gis", timeout=10)
    assert r.status_code == 405 and r.headers["Allow"] == "POST"
    # Unknown credential, bad parameters: a clear 4xx naming the cause.
    r = admin_post(p, "/capture?credential=nope&seconds=1")
    assert r.status_code == 404 and "unknown credential 'nope'" in r.text and "'gis'" in r.text
    r = admin_post(p, "/capture?credential=gis&seconds=0")
    assert r.status_code == 400 and "seconds" in r.text
    r = admin_post(p, "/capture?seconds=5")
    assert r.status_code == 400 and "credential" in r.text
    r = admin_post(p, "/capture?credential=gis&colour=red")
    assert r.status_code == 400 and "colour" in r.text
    # One capture at a time: a second one while the first runs is refused, naming the running one.
    first = {}
    t = threading.Thread(target=lambda: first.setdefault("r", admin_post(p, "/capture?credential=gis&seconds=3")))
    t.start()
    wait_started(p, "gis")
    r = admin_post(p, "/capture?credential=gis&seconds=1")
    assert r.status_code == 409 and "'gis'" in r.text
    t.join(timeout=20)
    assert first["r"].status_code == 200
    har = first["r"].json()
    jsonschema.validate(har, SCHEMA)
    assert har["log"]["entries"] == []
    # The CLI says what the listener said, and fails.
    cli = run_capture(p, "nope", 1, tmp_path / "x.har")
    _, stderr = cli.communicate(timeout=30)
    assert cli.returncode == 1 and "unknown credential 'nope'" in stderr
    assert not (tmp_path / "x.har").exists()


def test_capture_is_off_unless_configured(proxy_factory, ags, tmp_path):
    p = start(proxy_factory, arcgis(ags), capture=None)
    r = admin_post(p, "/capture?credential=gis&seconds=1")
    assert r.status_code == 403 and "capture = true" in r.text and "[admin]" in r.text


def test_a_client_that_leaves_ends_the_window(proxy_factory, ags):
    p = start(proxy_factory, arcgis(ags))
    s = socket.create_connection(("127.0.0.1", p.admin_port), timeout=5)
    s.sendall(b"POST /capture?credential=gis&seconds=600 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"X-Authproxy-Capture: 1\r\nContent-Length: 0\r\n\r\n")
    wait_started(p, "gis")
    s.close()
    assert p.wait_for_log(lambda l: "capture ended" in l, timeout=10), p.log_text()[-2000:]
    # The recorder is free again at once, not after 600 s.
    deadline = time.time() + 10
    while True:
        r = admin_post(p, "/capture?credential=gis&seconds=1")
        if r.status_code != 409 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 200


def test_capture_of_an_oauth2_credential_hides_the_client_secret_and_tokens(proxy_factory, tmp_path):
    """An `oauth2` credential (client_secret_basic, found by OIDC discovery) against the project's OIDC provider
    and its OAuth2-protected resource server: discovery and the token requests are entries, the client secret (in
    the Basic field) and every access token are nowhere in the file."""
    from oidc import OIDCProvider, ResourceServer
    secret = "s3cret:with/odd+chars"
    idp = OIDCProvider(expires_in=60).start()
    ogc = None
    try:
        idp.add_client("gis-proxy", secret=secret)
        ogc = ResourceServer(idp).start()
        p = start(proxy_factory, cred("ogc", "oauth2", ogc.base + "/ogc", issuer=idp.issuer, client_id="gis-proxy",
                                      client_secret=secret))
        out = tmp_path / "oauth2.har"
        cli = run_capture(p, "ogc", 4, out)
        try:
            wait_started(p, "ogc")
            assert via(p, "GET", ogc.items_url() + "?limit=3").status_code == 200
            idp.expire_all()
            assert via(p, "GET", ogc.items_url() + "?limit=3").status_code == 200
            _, stderr = cli.communicate(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait(timeout=10)
        assert cli.returncode == 0, stderr
        text = out.read_text()
        har = json.loads(text)
        jsonschema.validate(har, SCHEMA)
        with idp.lock:
            tokens = list(idp.tokens.keys())
        assert len(tokens) >= 2
        basic = __import__("base64").b64encode(
            ("gis-proxy:" + urllib.parse.quote(secret, safe="")).encode()).decode()
        for s in [secret, urllib.parse.quote(secret, safe=""), basic, "s3cret"] + tokens:
            assert s not in text, "secret found in the HAR file"
        own = [e for e in har["log"]["entries"] if e["_authproxy"]["role"] == "token-service"]
        posts = [e for e in own if e["request"]["method"] == "POST"]
        assert len(posts) >= 2, [e["request"]["url"] for e in own]
        for e in posts:
            headers = {h["name"].lower(): h["value"] for h in e["request"]["headers"]}
            assert headers["authorization"] == "[redacted:credential ogc]"
            form = {x["name"]: x["value"] for x in e["request"]["postData"]["params"]}
            assert form["grant_type"] == "client_credentials"
            assert json.loads(e["response"]["content"]["text"])["access_token"] == "[redacted:credential ogc]"
        upstream = [e for e in har["log"]["entries"] if e["_authproxy"]["role"] == "upstream"]
        assert any(h["name"].lower() == "authorization" and h["value"] == "[redacted:credential ogc]"
                   for h in upstream[0]["request"]["headers"])
    finally:
        if ogc:
            ogc.stop()
        idp.stop()
