"""`type = "oauth2"` credentials through the real binary, against the OIDC provider and OAuth2-protected
resource server of Tests/e2e/oidc: every client authentication method, both placements, proactive and reactive
refresh (a 20 MB body replayed intact), single flight, the provider down past expiry (502, never an expired token),
an empty 200 and invalid_client from the token endpoint, rotated assertion files and refresh tokens."""
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import time

import pytest
import requests

import harness
from harness import cred
from oidc import OIDCProvider, ResourceServer
from test_admin import admin_get, start_with_admin
from test_credentials import via


@pytest.fixture
def idp():
    p = OIDCProvider(expires_in=60).start()
    p.add_client("gis-proxy", secret="s3cret:with/odd+chars")
    yield p
    p.stop()


@pytest.fixture
def ogc(idp):
    r = ResourceServer(idp).start()
    yield r
    r.stop()


def oauth2(ogc, **fields):
    return cred("ogc", "oauth2", ogc.base + "/ogc", **fields)


def secret_cred(idp, ogc, **extra):
    fields = dict(issuer=idp.issuer, client_id="gis-proxy", client_secret="s3cret:with/odd+chars")
    fields.update(extra)
    return oauth2(ogc, **fields)


def features(r):
    assert r.status_code == 200, (r.status_code, r.text[:400])
    doc = r.json()
    assert doc["type"] == "FeatureCollection" and len(doc["features"]) == 3
    return doc


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """RSA and EC P-256 keys with self-signed certificates: {name: (key path, cert path, public key pem)}."""
    d = tmp_path_factory.mktemp("oauth2-keys")
    out = {}
    for name, alg in (("rsa", ["-newkey", "rsa:2048"]), ("ec", ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])):
        key, cert = str(d / (name + ".key")), str(d / (name + ".crt"))
        openssl("req", "-x509", *alg, "-nodes", "-sha256", "-days", "2", "-subj", "/CN=gis-proxy",
                "-keyout", key, "-out", cert)
        pub = subprocess.run(["openssl", "pkey", "-in", key, "-pubout"], check=True, capture_output=True).stdout
        out[name] = (key, cert, pub)
    return out


# ---------------------------------------------------------------------------------------------------------
# Client authentication methods, placements, clients with no credential of their own
# ---------------------------------------------------------------------------------------------------------

def test_client_secret_basic_chosen_from_discovery_curl_and_requests_read_features(proxy_factory, idp, ogc, session):
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    features(via(p, session, "GET", ogc.items_url() + "?limit=3"))
    out = subprocess.run(["curl", "-sS", "--fail", "-x", p.url, ogc.items_url("y")], capture_output=True, timeout=30,
                         env=harness.clean_env())
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["features"][0]["properties"]["collection"] == "y"
    log = idp.token_requests()
    assert [(e["auth_method"], e["outcome"], e["grant_type"]) for e in log] == [("client_secret_basic", "ok", "client_credentials")]
    assert "client_secret" not in log[0]["form"]
    seen = ogc.requests()
    assert [e["state"] for e in seen] == ["ok", "ok"] and {e["placement"] for e in seen} == {"header"}
    assert seen[0]["query"] == "limit=3"
    assert idp.discovery_requests == 1


def test_client_secret_post_with_token_url_and_scope_audience_resource(proxy_factory, idp, ogc, session):
    p = proxy_factory(extra_config=oauth2(ogc, token_url=idp.token_endpoint, client_id="gis-proxy",
                                          client_secret="s3cret:with/odd+chars", token_endpoint_auth_method="client_secret_post",
                                          scope="openid features:read", audience="ogc-api", resource=ogc.base + "/ogc"))
    features(via(p, session, "GET", ogc.items_url()))
    (e,) = idp.token_requests()
    assert e["auth_method"] == "client_secret_post" and e["outcome"] == "ok"
    assert e["form"]["scope"] == "openid features:read" and e["form"]["audience"] == "ogc-api"
    assert e["form"]["resource"] == ogc.base + "/ogc"
    assert idp.discovery_requests == 0


@pytest.mark.parametrize("kind,alg,ident", [("rsa", "RS256", "certificate"), ("rsa", "PS256", "kid"),
                                            ("ec", "ES256", "certificate"), ("ec", "ES256", "kid")])
def test_private_key_jwt_is_verified_by_the_provider(proxy_factory, idp, ogc, session, keys, kind, alg, ident):
    key, cert, pub = keys[kind]
    fields = dict(issuer=idp.issuer, client_id="jwt-client", private_key=key, private_key_alg=alg)
    if ident == "certificate":
        idp.add_client("jwt-client", certificate_pem=open(cert, "rb").read())
        fields["certificate"] = cert
    else:
        idp.add_client("jwt-client", public_key_pem=pub, kid="key-2026")
        fields["kid"] = "key-2026"
    p = proxy_factory(extra_config=oauth2(ogc, **fields))
    features(via(p, session, "GET", ogc.items_url()))
    idp.expire_all()
    features(via(p, session, "GET", ogc.items_url()))  # a second assertion: a new jti, accepted again
    log = idp.token_requests()
    assert [(e["auth_method"], e["outcome"]) for e in log] == [("private_key_jwt", "ok")] * 2, log
    jwts = [e["form"]["client_assertion"] for e in log]
    assert len(set(jwts)) == 2
    header = json.loads(harness_b64(jwts[0].split(".")[0]))
    assert header["alg"] == alg and header["typ"] == "JWT"
    assert ("x5t#S256" in header) == (ident == "certificate") and ("kid" in header) == (ident == "kid")


def harness_b64(s):
    import base64
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def test_private_key_jwt_with_a_wrong_key_is_invalid_client(proxy_factory, idp, ogc, session, keys):
    idp.add_client("jwt-client", certificate_pem=open(keys["ec"][1], "rb").read())
    key, cert, _ = keys["rsa"]  # signed with another key than the one registered
    p = proxy_factory(extra_config=oauth2(ogc, issuer=idp.issuer, client_id="jwt-client", private_key=key, certificate=cert))
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 502 and "invalid_client" in r.text
    assert not ogc.requests()


def test_client_assertion_file_is_read_at_every_token_request(proxy_factory, idp, ogc, session, tmp_path):
    projected = tmp_path / "token"
    projected.write_text("eyJhbGciOiJSUzI1NiJ9.workload-1.sig\n")
    idp.add_client("wi-client", assertion_file=str(projected))
    p = proxy_factory(extra_config=oauth2(ogc, issuer=idp.issuer, client_id="wi-client",
                                          client_assertion_file=str(projected)))
    features(via(p, session, "GET", ogc.items_url()))
    projected.write_text("eyJhbGciOiJSUzI1NiJ9.workload-2.sig\n")  # the kubelet rotated it
    idp.expire_all()
    features(via(p, session, "GET", ogc.items_url()))
    log = idp.token_requests()
    assert [e["outcome"] for e in log] == ["ok", "ok"], log
    assert [e["form"]["client_assertion"] for e in log] == ["eyJhbGciOiJSUzI1NiJ9.workload-1.sig",
                                                           "eyJhbGciOiJSUzI1NiJ9.workload-2.sig"]
    assert all(e["form"]["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" for e in log)


def test_query_placement_and_the_clients_own_authorization(proxy_factory, idp, ogc, session):
    p = proxy_factory(extra_config=secret_cred(idp, ogc, token_placement="query"))
    features(via(p, session, "GET", ogc.items_url() + "?f=json&access_token="))
    (e,) = ogc.requests()
    assert e["placement"] == "query" and e["state"] == "ok" and e["authorization"] is None
    assert e["query"].startswith("f=json&access_token=") and e["query"].count("access_token") == 1
    # A client that authenticates itself is left alone (override_client_token = false).
    r = via(p, session, "GET", ogc.items_url(), headers={"Authorization": "Bearer client-own"})
    assert r.status_code == 401
    assert ogc.requests()[-1]["token"] == "client-own"


def test_override_client_token_replaces_the_clients_authorization(proxy_factory, idp, ogc, session):
    p = proxy_factory(extra_config=secret_cred(idp, ogc, override_client_token=True))
    features(via(p, session, "GET", ogc.items_url(), headers={"Authorization": "Basic dXNlcjpwdw=="}))
    (e,) = ogc.requests()
    assert e["state"] == "ok" and e["authorization"].startswith("Bearer ")


# ---------------------------------------------------------------------------------------------------------
# Lifetimes, proactive and reactive refresh, single flight
# ---------------------------------------------------------------------------------------------------------

def test_lifetime_from_the_jwt_exp_when_expires_in_is_missing(proxy_factory, idp, ogc, session):
    idp.expires_in = None
    idp.token_lifetime_override = 3  # the JWT's exp is 3 s ahead; no expires_in in the answer
    p = proxy_factory(extra_config=secret_cred(idp, ogc, default_lifetime_seconds=3600))
    features(via(p, session, "GET", ogc.items_url()))
    time.sleep(3.3)
    features(via(p, session, "GET", ogc.items_url()))
    assert len(idp.token_requests()) == 2
    assert [e["state"] for e in ogc.requests()] == ["ok", "ok"]  # no expired token was sent and refused


def test_proactive_refresh_before_expiry(proxy_factory, idp, ogc, session):
    idp.expires_in = 10  # refresh margin: 10 % of the lifetime, 1 s
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    features(via(p, session, "GET", ogc.items_url()))
    time.sleep(9.3)
    features(via(p, session, "GET", ogc.items_url()))  # served with the old token, refresh started behind it
    deadline = time.time() + 5
    while len(idp.token_requests()) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(idp.token_requests()) == 2
    time.sleep(1.0)
    features(via(p, session, "GET", ogc.items_url()))
    seen = ogc.requests()
    assert [e["state"] for e in seen] == ["ok"] * 3
    assert seen[2]["token"] == idp.token_requests()[1]["access_token"] != seen[0]["token"]


def test_prefetch_keeps_a_token_without_requests(proxy_factory, idp, ogc, session):
    idp.expires_in = 4
    proxy_factory(extra_config=secret_cred(idp, ogc, prefetch=True))
    deadline = time.time() + 10
    while len(idp.token_requests()) < 3 and time.time() < deadline:
        time.sleep(0.1)
    times = [e["time"] for e in idp.token_requests()]
    assert len(times) >= 3, times
    assert all(b - a < 4 for a, b in zip(times, times[1:])), times  # each before the last one expired


def test_reactive_refresh_replays_a_20_mb_body_intact(proxy_factory, idp, ogc, session):
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    features(via(p, session, "GET", ogc.items_url()))
    idp.expire_all()  # revoked behind the proxy's back: the next request is refused with invalid_token
    body = os.urandom(20 * 1024 * 1024)
    r = via(p, session, "POST", ogc.base + "/ogc/upload", data=body, headers={"Content-Type": "application/octet-stream"},
            timeout=120)
    assert r.status_code == 200, r.text[:300]
    assert r.json() == {"sha256": hashlib.sha256(body).hexdigest(), "length": len(body)}
    uploads = [e for e in ogc.requests() if e["path"] == "/ogc/upload"]
    assert [e["state"] for e in uploads] == ["expired", "ok"]
    assert uploads[1]["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert len(idp.token_requests()) == 2


def test_insufficient_scope_is_relayed_without_a_refresh(proxy_factory, idp, ogc, session):
    p = proxy_factory(extra_config=secret_cred(idp, ogc, rejection=["invalid_token", 403]))
    features(via(p, session, "GET", ogc.items_url()))
    ogc.forbid_scope = True
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["WWW-Authenticate"]
    assert len(idp.token_requests()) == 1 and len(ogc.requests()) == 2


def test_200_concurrent_requests_after_expiry_make_one_token_request(proxy_factory, idp, ogc):
    idp.expires_in = 2
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    s = requests.Session()
    s.trust_env = False
    features(via(p, s, "GET", ogc.items_url()))
    time.sleep(2.3)  # expired by its expires_in: the proxy knows it
    idp.expires_in = 60  # the new one outlives the burst, however slow the machine
    idp.reset_log()

    def one(i):
        with requests.Session() as c:
            c.trust_env = False
            return via(p, c, "GET", ogc.items_url("c%d" % i)).status_code

    with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
        statuses = list(pool.map(one, range(200)))
    assert statuses == [200] * 200
    assert len(idp.token_requests()) == 1
    assert all(e["state"] == "ok" for e in ogc.requests())


def test_200_concurrent_requests_rejected_after_revocation_make_one_token_request(proxy_factory, idp, ogc):
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    s = requests.Session()
    s.trust_env = False
    features(via(p, s, "GET", ogc.items_url()))
    idp.expire_all()  # the proxy still thinks its token is good: every request is refused once
    idp.reset_log()

    def one(i):
        with requests.Session() as c:
            c.trust_env = False
            return via(p, c, "GET", ogc.items_url("c%d" % i)).status_code

    with concurrent.futures.ThreadPoolExecutor(max_workers=200) as pool:
        statuses = list(pool.map(one, range(200)))
    assert statuses == [200] * 200
    assert len(idp.token_requests()) == 1


# ---------------------------------------------------------------------------------------------------------
# The provider failing: down past expiry, an empty 200, invalid_client, issuer mismatch
# ---------------------------------------------------------------------------------------------------------

def test_provider_down_past_expiry_gives_502_and_never_an_expired_token(proxy_factory, idp, ogc, session):
    idp.expires_in = 2
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    features(via(p, session, "GET", ogc.items_url()))
    idp.go_down()
    try:
        time.sleep(2.3)
        for _ in range(3):
            r = via(p, session, "GET", ogc.items_url())
            assert r.status_code == 502
            assert "127.0.0.1:%d" % idp.port in r.text and "'ogc'" in r.text
        assert len(ogc.requests()) == 1  # nothing reached the resource server with the expired token
    finally:
        idp.come_back()
    deadline = time.time() + 35
    while True:
        r = via(p, session, "GET", ogc.items_url())
        if r.status_code == 200 or time.time() > deadline:
            break
        time.sleep(0.5)
    features(r)
    assert all(e["state"] == "ok" for e in ogc.requests())


def test_empty_200_from_the_token_endpoint_backs_off_then_recovers(proxy_factory, idp, ogc, session):
    idp.mode = "empty200"
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 502 and "empty body" in r.text, r.text
    for _ in range(10):
        assert via(p, session, "GET", ogc.items_url()).status_code == 502
    assert len(idp.token_requests()) == 1  # backing off: no request per client request
    idp.mode = None
    time.sleep(1.2)
    features(via(p, session, "GET", ogc.items_url()))
    assert [e["outcome"] for e in idp.token_requests()] == ["empty200", "ok"]


@pytest.mark.parametrize("mode", ["503", "429"])
def test_5xx_and_429_back_off_and_recover(proxy_factory, idp, ogc, session, mode):
    idp.mode = mode
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    assert via(p, session, "GET", ogc.items_url()).status_code == 502
    idp.mode = None
    time.sleep(1.2)
    features(via(p, session, "GET", ogc.items_url()))
    # A failed token request drops the discovery document: it is read again before the next attempt.
    assert idp.discovery_requests == 2
    assert [e["outcome"] for e in idp.token_requests()] == [mode, "ok"]


def test_a_retry_after_from_the_token_endpoint_is_waited_for(proxy_factory, idp, ogc, session):
    # The provider asks for 3 s: the backoff (1 s after a first failure) waits that long instead.
    idp.mode = "429"
    idp.retry_after = 3
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 502 and "again in 3 s" in r.text, r.text
    idp.mode = None
    time.sleep(1.5)
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 502  # still waiting: no second token request yet
    assert [e["outcome"] for e in idp.token_requests()] == ["429"]
    time.sleep(2)
    features(via(p, session, "GET", ogc.items_url()))
    assert [e["outcome"] for e in idp.token_requests()] == ["429", "ok"]


def test_invalid_client_is_a_clear_502_and_does_not_hammer_the_provider(proxy_factory, idp, ogc, session):
    idp.mode = "invalid_client"
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 502
    doc = r.json()
    text = json.dumps(doc)
    assert "invalid_client" in text and "client disabled" in text and "token endpoint http://127.0.0.1:%d" % idp.port in text
    assert "s3cret" not in text
    t0 = time.time()
    while time.time() - t0 < 3:
        assert via(p, session, "GET", ogc.items_url()).status_code == 502
    assert len(idp.token_requests()) <= 3  # 1 s, then 2 s of backoff
    assert not ogc.requests()


def test_discovery_naming_another_issuer_is_refused(proxy_factory, idp, ogc, session):
    idp.document_issuer = "https://evil.example/realms/test"
    p = proxy_factory(extra_config=secret_cred(idp, ogc))
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 502 and "must be equal exactly" in r.text
    assert not idp.token_requests()


# ---------------------------------------------------------------------------------------------------------
# Refresh-token grant with rotation, kept in the encrypted state file
# ---------------------------------------------------------------------------------------------------------

def test_refresh_token_rotation_survives_a_restart(proxy_factory, idp, ogc, session, tmp_path):
    idp.add_client("public-app", methods=["none"])
    seed = idp.issue_refresh_token("public-app")
    state = tmp_path / "oauth2-state"
    state.mkdir()
    config = oauth2(ogc, token_url=idp.token_endpoint, client_id="public-app", token_endpoint_auth_method="none",
                    grant="refresh_token", refresh_token=seed)
    settings = {"state_dir": str(state), "state_key": "correct horse battery staple"}
    p = proxy_factory(proxy=settings, extra_config=config)
    features(via(p, session, "GET", ogc.items_url()))
    idp.expire_all()
    features(via(p, session, "GET", ogc.items_url()))
    log = idp.token_requests()
    assert [e["outcome"] for e in log] == ["ok", "ok"]
    assert log[0]["form"]["refresh_token"] == seed
    assert log[1]["form"]["refresh_token"] == log[0]["refresh_token_issued"]
    p.stop()
    raw = (state / "tokens.enc").read_bytes()
    assert log[1]["refresh_token_issued"].encode() not in raw  # encrypted
    idp.expire_all()
    p2 = proxy_factory(proxy=settings, extra_config=config)
    features(via(p2, session, "GET", ogc.items_url()))
    log = idp.token_requests()
    assert log[-1]["outcome"] == "ok" and log[-1]["form"]["refresh_token"] == log[1]["refresh_token_issued"]
    assert not any(e.get("refresh_reused") for e in log)


# ---------------------------------------------------------------------------------------------------------
# Status page, status.json and metrics
# ---------------------------------------------------------------------------------------------------------

def test_status_and_metrics_show_the_oauth2_token_and_never_the_token(proxy_factory, idp, ogc, session):
    p = start_with_admin(proxy_factory, secret_cred(idp, ogc))
    features(via(p, session, "GET", ogc.items_url()))
    doc = admin_get(p, "/status.json").json()
    (c,) = [c for c in doc["credentials"] if c["name"] == "ogc"]
    assert c["type"] == "oauth2" and c["tokens"][0]["state"] == "valid" and c["tokens"][0]["root"] == idp.issuer
    token = idp.token_requests()[0]["access_token"]
    for path in ("/status.json", "/", "/metrics"):
        text = admin_get(p, path).text
        assert token not in text and token[-20:] not in text and "s3cret" not in text
    metrics = admin_get(p, "/metrics").text
    assert 'authproxy_token_requests_total{credential="ogc",result="success"} 1' in metrics, metrics[:3000]


# ---------------------------------------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------------------------------------

def test_doctor_proposes_an_oauth2_credential_that_works_once_filled_in(proxy_factory, idp, ogc, session):
    import tomllib
    r = subprocess.run([harness.proxy_bin(), "doctor", ogc.items_url()], capture_output=True, text=True, timeout=60,
                       env=harness.clean_env(), stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    (block,) = tomllib.loads(r.stdout)["credential"]
    assert block["type"] == "oauth2" and block["match"] in (ogc.base + "/ogc", [ogc.base + "/ogc"])
    assert block["client_secret"].startswith("${AUTHPROXY_") and "Bearer challenge" in r.stdout
    var = block["client_secret"][2:-1]
    text = re.sub(r'(?m)^(issuer\s*=\s*)"REPLACE_ME"', lambda m: m.group(1) + '"%s"' % idp.issuer, r.stdout)
    text = re.sub(r'(?m)^(client_id\s*=\s*)"REPLACE_ME"', lambda m: m.group(1) + '"gis-proxy"', text)
    p = proxy_factory(extra_config="\n" + text, env={var: "s3cret:with/odd+chars"})
    features(via(p, session, "GET", ogc.items_url()))


# ---------------------------------------------------------------------------------------------------------
# authorization_code: `authproxy login` (PKCE), then the refresh-token grant in the running proxy
# ---------------------------------------------------------------------------------------------------------

def test_login_with_authorization_code_and_pkce_then_serve(proxy_factory, idp, ogc, session, tmp_path):
    port = harness.free_port()
    redirect = "http://127.0.0.1:%d/callback" % port
    idp.add_client("desktop", secret="desk-secret", redirect_uris=[redirect])
    state = tmp_path / "login-state"
    state.mkdir()
    block = oauth2(ogc, issuer=idp.issuer, client_id="desktop", client_secret="desk-secret", grant="authorization_code",
                   redirect_uri=redirect, scope="openid offline_access")
    settings = {"state_dir": str(state), "state_key": "correct horse battery staple"}
    p = proxy_factory(proxy=settings, extra_config=block)
    r = via(p, session, "GET", ogc.items_url())
    assert r.status_code == 502 and "authproxy login" in r.text  # not signed in yet: says what to run

    login = subprocess.Popen([harness.proxy_bin(), "login", "--config", p.config_path, "--credential", "ogc"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=harness.clean_env())
    try:
        url = None
        for line in login.stdout:
            if line.strip().startswith("http"):
                url = line.strip()
            if "Waiting for the redirect" in line:
                break
        assert url and url.startswith(idp.issuer + "/protocol/openid-connect/auth?"), url
        browser = requests.Session()
        browser.trust_env = False
        answer = browser.get(url, timeout=30)  # follows the 302 to the loopback listener of `login`
        assert answer.status_code == 200 and "sign-in received" in answer.text
        out, err = login.communicate(timeout=30)
        assert login.returncode == 0, (out, err)
    finally:
        if login.poll() is None:
            login.kill()
    (auth,) = idp.authorize_requests
    assert auth["code_challenge_method"] == "S256" and auth["scope"] == "openid offline_access"
    code_exchange = idp.token_requests()[-1]
    assert code_exchange["grant_type"] == "authorization_code" and code_exchange["outcome"] == "ok"
    assert code_exchange["auth_method"] == "client_secret_basic" and code_exchange["form"]["code_verifier"]

    # The running proxy picks the sign-in up from the state file.
    deadline = time.time() + 5
    while True:
        r = via(p, session, "GET", ogc.items_url())
        if r.status_code == 200 or time.time() > deadline:
            break
        time.sleep(0.3)
    features(r)
    refresh = idp.token_requests()[-1]
    assert refresh["grant_type"] == "refresh_token" and refresh["outcome"] == "ok"
    assert refresh["form"]["refresh_token"] == code_exchange["refresh_token_issued"]


def test_tls_client_auth_with_a_certificate_credential(proxy_factory, ogc, session, tls_cert, keys):
    import ssl
    cert, key = tls_cert
    client_key, client_cert, _ = keys["rsa"]  # CN=gis-proxy, self-signed: the provider trusts it as its own CA
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(client_cert)
    idp = OIDCProvider(expires_in=60, auth_methods=["tls_client_auth", "client_secret_basic"])
    idp.tls = ctx
    idp.start()
    try:
        idp.add_client("mtls-client", tls_subject_cn="gis-proxy")
        ogc.provider = idp
        config = (cred("idp-trust", "server-trust", idp.base, ca_file=cert)
                  + cred("idp-client-cert", "certificate", idp.token_endpoint, cert=client_cert, key=client_key)
                  + oauth2(ogc, issuer=idp.issuer, client_id="mtls-client", token_endpoint_auth_method="tls_client_auth"))
        p = proxy_factory(extra_config=config)
        features(via(p, session, "GET", ogc.items_url()))
        (e,) = idp.token_requests()
        assert e["auth_method"] == "tls_client_auth" and e["outcome"] == "ok"
        assert set(e["form"]) == {"grant_type", "client_id"}
        # Without a certificate credential for the token endpoint nothing is sent, and the 502 says what is missing.
        without = cred("idp-trust", "server-trust", idp.base, ca_file=cert) + oauth2(
            ogc, issuer=idp.issuer, client_id="mtls-client", token_endpoint_auth_method="tls_client_auth")
        p2 = proxy_factory(extra_config=without)
        r = via(p2, session, "GET", ogc.items_url())
        assert r.status_code == 502 and "needs a certificate credential" in r.text
        assert len(idp.token_requests()) == 1
    finally:
        idp.stop()
