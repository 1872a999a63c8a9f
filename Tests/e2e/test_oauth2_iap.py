"""Google Identity-Aware Proxy and RFC 8693 token exchange on `type = "oauth2"`, through the real binary, against
the OIDC test provider's Google shapes (a service account's jwt-bearer grant answered with an RS256 ID token; an
STS and a Keycloak-style token exchange) and the IAP-like gateway of Tests/e2e/oidc/gateway.py.

The IAP credential (`layer = "gateway"`, `service_account_file`, `target_audience`, `token_placement =
"proxy-authorization"`) puts its ID token in `Proxy-Authorization` while an OAuth2 service credential behind it puts
its bearer in `Authorization`: both arrive, with curl, Python requests and GDAL, in both `http_client` modes, over
https inside an intercepted tunnel, and through an authenticating parent proxy (http and https). The ID token is refreshed at its `exp` and after IAP's 401; a wrong
audience is IAP's 401 relayed with a warning naming the credential. A token exchange re-reads its subject token
file. No assertion, ID token, subject token or access token reaches a log line, the status page or the metrics."""
import json
import os
import subprocess
import time

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import harness
from harness import cred
from oidc import OIDCProvider, ResourceServer
from oidc.gateway import IdentityAwareProxy
from oidc.server import claims_of, sign_rs256, write_service_account_file
from parents.fixtures import parents_dir, squid_basic  # noqa: F401
from test_admin import admin_get, start_with_admin
from test_credentials import via

EMAIL = "gis-proxy@test-project.iam.gserviceaccount.com"
IAP_CLIENT = "123456-iap.apps.googleusercontent.com"
SERVICE_SECRET = "svc-s3cret"
K8S_ISSUER = "https://kubernetes.default.svc.cluster.local"
WIF_AUDIENCE = "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/gis/providers/k8s"


def pem_pair():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return key, private, public


@pytest.fixture(scope="module")
def account_key():
    return pem_pair()


@pytest.fixture(scope="module")
def k8s_key():
    """The key the workload's platform signs its projected tokens with."""
    return pem_pair()


@pytest.fixture
def idp(account_key):
    p = OIDCProvider(expires_in=300).start()
    p.add_service_account(EMAIL, account_key[2], kid="sa-key-1")
    p.add_client("gis-proxy", secret=SERVICE_SECRET)
    yield p
    p.stop()


@pytest.fixture
def iap(idp):
    """The OGC-like service (wants its own bearer in Authorization) behind the IAP-like gateway."""
    ogc = ResourceServer(idp).start()
    gw = IdentityAwareProxy(idp, ogc.base, mode="iap", audience=IAP_CLIENT).start()
    yield ogc, gw
    gw.stop()
    ogc.stop()


@pytest.fixture
def sa_file(idp, account_key, tmp_path):
    return write_service_account_file(str(tmp_path / "sa.json"), EMAIL, account_key[1], "sa-key-1",
                                      idp.google_token_endpoint)


def iap_cred(gw, sa_file, **extra):
    fields = dict(service_account_file=sa_file, target_audience=IAP_CLIENT, token_placement="proxy-authorization",
                  layer="gateway")
    fields.update(extra)
    return cred("iap", "oauth2", gw.base + "/", **fields)


def service_cred(idp, gw):
    return cred("ogc", "oauth2", gw.base + "/ogc", token_url=idp.token_endpoint, client_id="gis-proxy",
                client_secret=SERVICE_SECRET)


def items(gw, collection="x"):
    return gw.base + "/ogc/collections/%s/items" % collection


def features(r):
    assert r.status_code == 200, (r.status_code, r.text[:400])
    doc = r.json()
    assert doc["type"] == "FeatureCollection" and len(doc["features"]) == 3
    return doc


def jwt_bearer_requests(idp):
    return [e for e in idp.token_requests() if e["endpoint"] == "/token"]


# ---------------------------------------------------------------------------------------------------------
# Both tokens arrive: the ID token in Proxy-Authorization, the service's bearer in Authorization
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("http_client", ["native", "libcurl"])
def test_id_token_in_proxy_authorization_and_service_bearer_in_authorization_both_arrive(
        proxy_factory, idp, iap, sa_file, session, http_client):
    ogc, gw = iap
    p = proxy_factory(proxy={"http_client": http_client}, extra_config=iap_cred(gw, sa_file) + service_cred(idp, gw))
    features(via(p, session, "GET", items(gw) + "?limit=3"))
    c = harness.curl("-x", p.url, "--fail", items(gw, "y"))
    assert c.returncode == 0, c.stderr
    assert json.loads(c.stdout)["features"][0]["properties"]["collection"] == "y"
    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority})
    g = subprocess.run(["ogrinfo", "-ro", "-al", "-so", items(gw, "z")], capture_output=True, env=env, timeout=60)
    assert g.returncode == 0, g.stderr
    assert b"Feature Count: 3" in g.stdout

    # Google's side: one jwt-bearer grant for the ID token (signed with the service account's key, verified),
    # one client_credentials grant for the service.
    (sa,) = jwt_bearer_requests(idp)
    assert sa["outcome"] == "ok" and sa["client_id"] == EMAIL
    assert set(sa["form"]) == {"grant_type", "assertion"}
    claims = sa["assertion_claims"]
    assert claims["target_audience"] == IAP_CLIENT and claims["aud"] == idp.google_token_endpoint
    assert claims["iss"] == claims["sub"] == EMAIL and claims["exp"] - claims["iat"] <= 3600
    id_token = sa["id_token"]
    assert claims_of(id_token)["aud"] == IAP_CLIENT
    service = [e for e in idp.token_requests() if e["grant_type"] == "client_credentials"]
    assert len(service) == 1 and service[0]["outcome"] == "ok"
    service_token = service[0]["access_token"]

    # IAP read the ID token from Proxy-Authorization and passed Authorization on untouched; the service accepted
    # its own bearer.
    log = gw.requests()
    assert len(log) == 3 and all(e["state"] == "ok" and e["token_from"] == "proxy-authorization" for e in log), log
    assert {e["proxy_authorization"] for e in log} == {"Bearer " + id_token}
    assert {e["authorization"] for e in log} == {"Bearer " + service_token}
    seen = ogc.requests()
    assert [e["state"] for e in seen] == ["ok"] * 3 and {e["token"] for e in seen} == {service_token}


def test_the_clients_own_proxy_authorization_is_never_forwarded_and_its_authorization_passes(
        proxy_factory, idp, iap, sa_file, session):
    """With [[client]] proxy authentication the client's Basic credential for authproxy is consumed there; IAP
    gets the ID token only. A client's own Authorization (it signs in to the service itself) goes through."""
    ogc, gw = iap
    client = '\n[[client]]\nname = "alice"\npassword = "alice-proxy-pw"\n'
    p = proxy_factory(extra_config=client + iap_cred(gw, sa_file))
    token = ogc.provider._access_token("alice", {}, 300)
    proxies = {"http": "http://alice:alice-proxy-pw@%s" % p.authority}
    r = session.get(items(gw), proxies=proxies, headers={"Authorization": "Bearer " + token}, timeout=30)
    features(r)
    (e,) = gw.requests()
    assert e["proxy_authorization"].startswith("Bearer ") and "Basic" not in e["proxy_authorization"]
    assert e["authorization"] == "Bearer " + token
    assert ogc.requests()[0]["token"] == token
    # Without the client's proxy credential: 407 from authproxy, nothing reaches IAP.
    r = session.get(items(gw), proxies=p.proxies, timeout=30)
    assert r.status_code == 407 and len(gw.requests()) == 1
    c = harness.curl("-x", p.url, "-U", "alice:alice-proxy-pw", "-H", "Authorization: Bearer " + token, "--fail",
                     items(gw))
    assert c.returncode == 0, c.stderr
    assert all("alice-proxy-pw" not in (e["proxy_authorization"] or "") for e in gw.requests())
    # The service's own 401 (it names its scheme) is relayed as it is: not IAP's rejection of the ID token.
    r = session.get(items(gw), proxies=proxies, timeout=30)
    assert r.status_code == 401 and "Bearer" in r.headers.get("WWW-Authenticate", "")
    assert [e["state"] for e in gw.requests()] == ["ok"] * 3
    assert len(jwt_bearer_requests(ogc.provider)) == 1


# ---------------------------------------------------------------------------------------------------------
# Refresh: at the ID token's exp, and after IAP's 401
# ---------------------------------------------------------------------------------------------------------

def test_the_id_token_is_refreshed_at_its_exp_and_after_iaps_401(proxy_factory, idp, iap, sa_file, session):
    ogc, gw = iap
    idp.id_token_lifetime = 3  # no expires_in in Google's answer: the lifetime is the JWT's exp
    p = proxy_factory(extra_config=iap_cred(gw, sa_file) + service_cred(idp, gw))
    features(via(p, session, "GET", items(gw)))
    features(via(p, session, "GET", items(gw)))
    assert len(jwt_bearer_requests(idp)) == 1
    time.sleep(3.2)
    features(via(p, session, "GET", items(gw)))
    first, second = jwt_bearer_requests(idp)
    assert first["id_token"] != second["id_token"]
    assert [e["state"] for e in gw.requests()] == ["ok", "ok", "ok"]  # never an expired ID token sent

    # Google's keys rotate: IAP answers 401 (no WWW-Authenticate), the proxy gets a new ID token and retries.
    idp.id_token_lifetime = 3600
    features(via(p, session, "GET", items(gw)))
    idp.rotate_signing_key()
    gw.reset_log()
    ogc.reset_log()
    r = via(p, session, "GET", items(gw) + "?after=rotation")
    features(r)
    assert [e["state"] for e in gw.requests()] == ["invalid", "ok"], gw.requests()
    assert len(jwt_bearer_requests(idp)) == 3
    assert [e["query"] for e in ogc.requests()] == ["after=rotation"]  # the service met the request once
    # Only the gateway's layer was refreshed.
    assert len([e for e in idp.token_requests() if e["grant_type"] == "client_credentials"]) == 1


def test_a_redirect_to_sign_in_counts_as_a_rejection(proxy_factory, idp, sa_file, session):
    """IAP in front of a browser-facing app sends a client whose token fails to sign in at the provider: the
    default rejection signals of an ID-token credential (`401` and `redirect_to_issuer`) catch it."""
    ogc = ResourceServer(idp).start()
    gw = IdentityAwareProxy(idp, ogc.base, mode="iap", audience=IAP_CLIENT, rejection="302").start()
    try:
        p = proxy_factory(extra_config=iap_cred(gw, sa_file) + service_cred(idp, gw))
        features(via(p, session, "GET", items(gw)))
        idp.rotate_signing_key()
        gw.reset_log()
        r = via(p, session, "GET", items(gw), allow_redirects=False)
        features(r)
        assert [e["state"] for e in gw.requests()] == ["invalid", "ok"], gw.requests()
        assert len(jwt_bearer_requests(idp)) == 2
    finally:
        gw.stop()
        ogc.stop()


# ---------------------------------------------------------------------------------------------------------
# Refusals: a wrong audience, an unknown service account
# ---------------------------------------------------------------------------------------------------------

def test_a_wrong_audience_is_iaps_401_relayed_with_a_warning_naming_the_credential(proxy_factory, idp, iap, sa_file,
                                                                                     session):
    ogc, gw = iap
    p = proxy_factory(extra_config=iap_cred(gw, sa_file, target_audience="wrong-client.apps.googleusercontent.com"))
    r = via(p, session, "GET", items(gw))
    assert r.status_code == 401, r.text[:300]
    assert "Invalid IAP credentials" in r.text and IAP_CLIENT in r.text and "wrong-client" in r.text
    # A token fresh from Google refused at once: no new one will do better, the rejection is relayed and the
    # warning names the credential and its layer.
    assert len(jwt_bearer_requests(idp)) == 1
    assert [e["state"] for e in gw.requests()] == ["invalid"]
    assert not ogc.requests()
    assert p.wait_for_log(lambda l: "warning" in l and "token rejected" in l and "credential=iap" in l
                          and "layer=gateway" in l, timeout=5), p.log_text()[-2000:]
    # Later requests are not a storm of token requests either.
    for _ in range(3):
        assert via(p, session, "GET", items(gw)).status_code == 401
    assert len(jwt_bearer_requests(idp)) <= 2


def test_an_unknown_service_account_is_a_502_naming_the_credential_and_googles_error(proxy_factory, idp, iap,
                                                                                     tmp_path, session):
    ogc, gw = iap
    _, other_private, _ = pem_pair()
    bad = write_service_account_file(str(tmp_path / "other.json"), EMAIL, other_private, "sa-key-1",
                                     idp.google_token_endpoint)
    p = proxy_factory(extra_config=iap_cred(gw, bad))
    r = via(p, session, "GET", items(gw))
    assert r.status_code == 502, r.text[:300]
    assert "'iap'" in r.text and "invalid_grant" in r.text and "Invalid JWT Signature" in r.text
    assert "service account" in r.text  # the advice
    assert not gw.requests()


# ---------------------------------------------------------------------------------------------------------
# IAP is https: inside an intercepted CONNECT tunnel, in both http_client modes
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def interception(proxy_binary, tmp_path_factory):
    """(authproxy CA dir, upstream certificate, key): the CA that mints the client-facing certificates, and IAP's
    self-signed certificate for localhost."""
    d = tmp_path_factory.mktemp("iap-tls")
    r = harness.run_cli(["ca", "init", "--dir", str(d / "ca")])
    assert r.returncode == 0, r.stderr + r.stdout
    cert, key = str(d / "iap.pem"), str(d / "iap.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "2",
                    "-subj", "/CN=localhost", "-keyout", key, "-out", cert,
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-addext", "basicConstraints=critical,CA:TRUE"], check=True, capture_output=True, timeout=60)
    return str(d / "ca"), cert, key


def https_iap(idp, interception):
    """The service behind an IAP-like gateway over https (self-signed for localhost)."""
    import ssl
    _, cert, key = interception
    ogc = ResourceServer(idp).start()
    gw = IdentityAwareProxy(idp, ogc.base, mode="iap", audience=IAP_CLIENT)
    gw.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    gw.tls.load_cert_chain(cert, key)
    gw.start()
    return ogc, gw, "https://localhost:%d" % gw.port


def https_config(idp, sa_file, interception, base):
    """Interception with authproxy's CA, trust in IAP's certificate, the IAP and service credentials."""
    ca_dir, cert, _ = interception
    tls = '\n[tls]\nca_cert = %s\nca_key = %s\nintercept = "matched"\n' % (
        json.dumps(ca_dir + "/ca.pem"), json.dumps(ca_dir + "/ca.key"))
    return (tls + cred("iap", "oauth2", base + "/", service_account_file=sa_file, target_audience=IAP_CLIENT,
                       token_placement="proxy-authorization", layer="gateway")
            + cred("ogc", "oauth2", base + "/ogc", token_url=idp.token_endpoint, client_id="gis-proxy",
                   client_secret=SERVICE_SECRET)
            + cred("trust", "server-trust", base, ca_file=cert))


@pytest.mark.parametrize("http_client", ["native", "libcurl"])
def test_over_https_through_interception_both_tokens_arrive(proxy_factory, idp, sa_file, session, interception,
                                                            http_client):
    ca_dir = interception[0]
    ogc, gw, base = https_iap(idp, interception)
    try:
        p = proxy_factory(proxy={"http_client": http_client},
                          extra_config=https_config(idp, sa_file, interception, base))
        url = base + "/ogc/collections/x/items"
        features(session.get(url, proxies=p.proxies, verify=ca_dir + "/ca.pem", timeout=30))
        c = harness.curl("-x", p.url, "--cacert", ca_dir + "/ca.pem", "--fail", url)
        assert c.returncode == 0, c.stderr
        env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority, "GDAL_CURL_CA_BUNDLE": ca_dir + "/ca.pem",
                                 "CURL_CA_BUNDLE": ca_dir + "/ca.pem"})
        g = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, env=env, timeout=60)
        assert g.returncode == 0 and b"Feature Count: 3" in g.stdout, g.stderr
        log = gw.requests()
        assert len(log) == 3 and all(e["state"] == "ok" and e["token_from"] == "proxy-authorization" for e in log)
        assert all(e["authorization"].startswith("Bearer ") for e in log)
        assert [e["state"] for e in ogc.requests()] == ["ok"] * 3
    finally:
        gw.stop()
        ogc.stop()


# ---------------------------------------------------------------------------------------------------------
# Through an authenticating parent proxy: its Proxy-Authorization and IAP's are two different fields
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("http_client,scheme", [("native", "http"), ("libcurl", "http"), ("native", "https"),
                                                ("libcurl", "https")])
def test_through_a_parent_proxy_the_parent_gets_its_login_and_iap_its_id_token(
        proxy_factory, idp, iap, sa_file, session, squid_basic, interception, request, http_client,
        scheme):  # noqa: F811
    from parents import rig as parents_rig
    sq = squid_basic
    parent = '\n[[credential]]\nname = "corp"\ntype = "password"\nusername = "alice"\npassword = %s\n' % json.dumps(
        parents_rig.USERS["alice"])
    settings = {"http_client": http_client, "upstream_proxy": sq.url, "upstream_proxy_credential": "corp"}
    if scheme == "https":
        ogc, gw, base = https_iap(idp, interception)
        request.addfinalizer(gw.stop)
        request.addfinalizer(ogc.stop)
        p = proxy_factory(proxy=settings, extra_config=parent + https_config(idp, sa_file, interception, base))
        r = session.get(base + "/ogc/collections/x/items", proxies=p.proxies, verify=interception[0] + "/ca.pem",
                        timeout=30)
    else:
        ogc, gw = iap
        p = proxy_factory(proxy=settings, extra_config=parent + iap_cred(gw, sa_file) + service_cred(idp, gw))
        r = via(p, session, "GET", items(gw))
    features(r)
    (e,) = [e for e in gw.requests() if e["path"].endswith("/items")]
    assert e["state"] == "ok" and e["token_from"] == "proxy-authorization"
    assert e["authorization"].startswith("Bearer ") and e["proxy_authorization"].startswith("Bearer ")
    # Squid authenticated alice for a tunnel to IAP (libcurl too tunnels the http:// request: in absolute form its
    # Proxy-Authorization would be Squid's), and the ID token went through it.
    p.stop()  # Squid writes a tunnel's line when it closes
    want = ("localhost:%d" if scheme == "https" else "127.0.0.1:%d") % gw.port

    def tunnel(line):
        try:
            e = parents_rig.parse_access_line(line)
        except ValueError:
            return False
        return e["method"] == "CONNECT" and e["url"] == want and e["status"] == 200
    lines = [parents_rig.parse_access_line(l) for l in sq.wait_access(tunnel, timeout=10)]
    assert lines and all((e["result"], e["user"]) == ("TCP_TUNNEL", "alice") for e in lines), \
        sq.access_log_lines()[-10:]
    assert not [l for l in sq.access_log_lines() if "GET http://" + want in l]


# ---------------------------------------------------------------------------------------------------------
# RFC 8693 token exchange
# ---------------------------------------------------------------------------------------------------------

def subject_token(k8s_key, sub, lifetime=600, aud="gis-sts"):
    now = int(time.time())
    return sign_rs256(k8s_key[0], {"alg": "RS256", "kid": "k8s-1", "typ": "JWT"},
                      {"iss": K8S_ISSUER, "sub": sub, "aud": aud, "iat": now, "exp": now + lifetime})


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)  # as the kubelet swaps a projected token


@pytest.mark.parametrize("shape", ["sts", "keycloak"])
def test_token_exchange_rereads_the_subject_token_file_for_every_exchange(proxy_factory, idp, k8s_key, tmp_path,
                                                                          session, shape):
    idp.trust_subject_issuer(K8S_ISSUER, k8s_key[2], audience="gis-sts")
    ogc = ResourceServer(idp).start()
    try:
        path = str(tmp_path / "token")
        write(path, subject_token(k8s_key, "system:serviceaccount:gis:reader-1"))
        fields = dict(grant="token_exchange", subject_token_file=path, scope="features:read")
        if shape == "sts":
            fields.update(token_url=idp.sts_endpoint, audience=WIF_AUDIENCE,
                          requested_token_type="urn:ietf:params:oauth:token-type:access_token")
        else:
            fields.update(issuer=idp.issuer, client_id="gis-proxy", client_secret=SERVICE_SECRET)
        p = proxy_factory(extra_config=cred("ogc", "oauth2", ogc.base + "/ogc", **fields))
        features(via(p, session, "GET", ogc.items_url()))
        c = harness.curl("-x", p.url, "--fail", ogc.items_url("y"))
        assert c.returncode == 0, c.stderr

        # The platform rotates the token (a new identity here, to tell them apart); the exchanged token dies.
        write(path, subject_token(k8s_key, "system:serviceaccount:gis:reader-2"))
        idp.expire_all()
        features(via(p, session, "GET", ogc.items_url()))
        log = [e for e in idp.token_requests() if e["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"]
        assert [(e["outcome"], e["subject"]) for e in log] == [
            ("ok", "system:serviceaccount:gis:reader-1"), ("ok", "system:serviceaccount:gis:reader-2")], log
        form = log[0]["form"]
        assert form["subject_token_type"] == "urn:ietf:params:oauth:token-type:jwt"
        assert form["scope"] == "features:read"
        if shape == "sts":
            assert form["audience"] == WIF_AUDIENCE and "client_id" not in form and not log[0]["authorization"]
        else:
            assert log[0]["auth_method"] == "client_secret_basic"
        seen = ogc.requests()
        assert [e["state"] for e in seen] == ["ok", "ok", "expired", "ok"], seen
        assert claims_of(seen[-1]["token"])["sub"] == "system:serviceaccount:gis:reader-2"

        # An expired subject token: the provider refuses it, the client gets a 502 naming the credential.
        write(path, subject_token(k8s_key, "system:serviceaccount:gis:reader-3", lifetime=-10))
        idp.expire_all()
        r = via(p, session, "GET", ogc.items_url())
        assert r.status_code == 502 and "'ogc'" in r.text and "invalid_grant" in r.text, r.text[:400]
        assert "subject_token_file" in r.text  # the advice
    finally:
        ogc.stop()


# ---------------------------------------------------------------------------------------------------------
# No secret in logs, status or metrics
# ---------------------------------------------------------------------------------------------------------

def test_no_assertion_id_token_subject_token_or_key_in_logs_status_or_metrics(proxy_factory, idp, iap, sa_file,
                                                                               k8s_key, tmp_path, session,
                                                                               account_key):
    ogc, gw = iap
    idp.trust_subject_issuer(K8S_ISSUER, k8s_key[2], audience="gis-sts")
    subject_path = str(tmp_path / "subject")
    subject = subject_token(k8s_key, "system:serviceaccount:gis:auditor")
    write(subject_path, subject)
    exchange = cred("wif", "oauth2", ogc.base + "/ogc", grant="token_exchange", subject_token_file=subject_path,
                    token_url=idp.sts_endpoint, audience=WIF_AUDIENCE)
    p = start_with_admin(proxy_factory, iap_cred(gw, sa_file) + service_cred(idp, gw) + exchange,
                         log={"level": "debug"})
    features(via(p, session, "GET", items(gw)))
    features(via(p, session, "GET", ogc.items_url()))
    idp.rotate_signing_key()  # a rejection and a refresh, logged
    features(via(p, session, "GET", items(gw)))
    secrets = [subject, subject.split(".")[2]]
    for e in idp.token_requests():
        for k in ("id_token", "access_token"):
            if e.get(k):
                secrets += [e[k], e[k].split(".")[2]]
        if e["form"].get("assertion"):
            secrets += [e["form"]["assertion"], e["form"]["assertion"].split(".")[2]]
    assert len(secrets) >= 10
    key_body = account_key[1].decode().splitlines()[5]
    secrets += [SERVICE_SECRET, key_body]
    doc = admin_get(p, "/status.json").json()
    creds = {c["name"]: c for c in doc["credentials"]}
    assert creds["iap"]["type"] == "oauth2" and creds["iap"]["tokens"][0]["state"] == "valid", creds["iap"]
    assert creds["wif"]["tokens"][0]["state"] == "valid"
    texts = {path: admin_get(p, path).text for path in ("/status.json", "/", "/metrics")}
    texts["log"] = p.log_text()
    for where, text in texts.items():
        for s in secrets:
            assert s not in text, (where, s[:12])
    assert 'authproxy_token_requests_total{credential="iap",result="success"} 2' in texts["/metrics"]
