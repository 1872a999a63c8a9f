"""Self-tests of the OIDC test provider's Google shapes and of the IAP-like gateway (no proxy involved, no authproxy
binary): what authproxy's e2e tests rely on them to accept and to refuse.

Run from the repo root:  python3 -m pytest Tests/e2e/oidc -q -p no:cacheprovider
"""

import time

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from oidc.gateway import IdentityAwareProxy
from oidc.server import (JWT_BEARER_GRANT, TOKEN_EXCHANGE_GRANT, OIDCProvider, ResourceServer, claims_of,
                         sign_rs256)

EMAIL = "sa@test-project.iam.gserviceaccount.com"
AUD = "iap-client.apps.googleusercontent.com"


def key_pair():
    k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return k, k.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


@pytest.fixture(scope="module")
def keys():
    return {"sa": key_pair(), "other": key_pair(), "k8s": key_pair()}


@pytest.fixture
def idp(keys):
    p = OIDCProvider(expires_in=60).start()
    p.add_service_account(EMAIL, keys["sa"][1], kid="kid-1")
    p.add_client("kc-client", secret="kc-secret")
    p.trust_subject_issuer("https://k8s", keys["k8s"][1], audience="sts")
    yield p
    p.stop()


@pytest.fixture
def http():
    s = requests.Session()
    s.trust_env = False
    yield s
    s.close()


def assertion(key, idp, kid="kid-1", **over):
    now = int(time.time())
    claims = {"iss": EMAIL, "sub": EMAIL, "aud": idp.google_token_endpoint, "iat": now, "exp": now + 300,
              "target_audience": AUD}
    claims.update(over)
    claims = {k: v for k, v in claims.items() if v is not None}
    return sign_rs256(key, {"alg": "RS256", "typ": "JWT", "kid": kid}, claims)


def google(http, idp, jwt, grant=JWT_BEARER_GRANT):
    return http.post(idp.google_token_endpoint, data={"grant_type": grant, "assertion": jwt}, timeout=10)


def test_a_service_account_assertion_gets_an_id_token_for_its_target_audience(http, idp, keys):
    r = google(http, idp, assertion(keys["sa"][0], idp))
    assert r.status_code == 200 and set(r.json()) == {"id_token"}, r.text
    token = r.json()["id_token"]
    claims, why = idp.verify_id_token(token, AUD)
    assert why is None and claims["email"] == EMAIL and claims["exp"] - claims["iat"] == 3600
    assert idp.verify_id_token(token, "other-aud")[1].startswith("aud")
    jwks = http.get(idp.base + "/oauth2/v3/certs", timeout=10).json()
    assert [k["kid"] for k in jwks["keys"]] == [idp.signing_kid]
    idp.rotate_signing_key()
    assert idp.verify_id_token(token, AUD)[1] == "bad signature"  # a verifier that dropped the old key
    # scope instead of target_audience: an access token the resource server accepts
    r = google(http, idp, assertion(keys["sa"][0], idp, target_audience=None, scope="openid"))
    assert r.status_code == 200 and idp.check(r.json()["access_token"]) == "ok"


@pytest.mark.parametrize("case,why", [
    ("wrong key", "Invalid JWT Signature."),
    ("wrong kid", "Invalid JWT Signature."),
    ("wrong aud", "Invalid JWT: Failed audience check."),
    ("expired", "Invalid JWT: Token must be a short-lived token"),
    ("too long", "Invalid JWT: Token must be a short-lived token"),
    ("unknown account", "Invalid JWT Signature."),
    ("nothing asked", "Invalid OAuth scope or ID token audience provided."),
])
def test_bad_assertions_are_refused_as_google_words_it(http, idp, keys, case, why):
    now = int(time.time())
    key, over, kid = keys["sa"][0], {}, "kid-1"
    if case == "wrong key":
        key = keys["other"][0]
    elif case == "wrong kid":
        kid = "kid-2"
    elif case == "wrong aud":
        over["aud"] = idp.token_endpoint
    elif case == "expired":
        over.update(iat=now - 400, exp=now - 100)
    elif case == "too long":
        over["exp"] = now + 7200
    elif case == "unknown account":
        over.update(iss="nobody@x", sub="nobody@x")
    elif case == "nothing asked":
        over["target_audience"] = None
    r = google(http, idp, assertion(key, idp, kid=kid, **over))
    assert r.status_code == 400 and r.json()["error_description"].startswith(why), r.text
    assert r.json()["error"] in ("invalid_grant", "invalid_scope")
    assert idp.token_requests()[-1]["outcome"] in ("invalid_grant", "invalid_scope")


def test_googles_endpoint_takes_only_the_jwt_bearer_grant(http, idp, keys):
    r = google(http, idp, assertion(keys["sa"][0], idp), grant="client_credentials")
    assert r.status_code == 400 and r.json()["error"] == "unsupported_grant_type"


def subject(keys, sub="workload-1", aud="sts", lifetime=300, key="k8s", iss="https://k8s"):
    now = int(time.time())
    return sign_rs256(keys[key][0], {"alg": "RS256"}, {"iss": iss, "sub": sub, "aud": aud, "iat": now,
                                                       "exp": now + lifetime})


def exchange(http, url, token, auth=None, **extra):
    form = {"grant_type": TOKEN_EXCHANGE_GRANT, "subject_token": token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt"}
    form.update(extra)
    return http.post(url, data=form, auth=auth, timeout=10)


def test_token_exchange_at_the_sts_and_at_the_realm(http, idp, keys):
    r = exchange(http, idp.sts_endpoint, subject(keys), audience="//iam/pool")
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token" and a["token_type"] == "Bearer"
    assert idp.check(a["access_token"]) == "ok" and claims_of(a["access_token"])["sub"] == "workload-1"
    assert exchange(http, idp.sts_endpoint, subject(keys)).json()["error"] == "invalid_request"  # no audience
    assert exchange(http, idp.sts_endpoint, subject(keys), audience="a", client_id="x").status_code == 400
    r = exchange(http, idp.token_endpoint, subject(keys, sub="workload-2"), auth=("kc-client", "kc-secret"))
    assert r.status_code == 200 and claims_of(r.json()["access_token"])["act_for"] == "kc-client"
    assert exchange(http, idp.token_endpoint, subject(keys)).json()["error"] == "invalid_client"


@pytest.mark.parametrize("case", ["expired", "wrong aud", "untrusted key", "untrusted issuer", "type"])
def test_subject_tokens_are_verified(http, idp, keys, case):
    kw, extra = {}, {}
    if case == "expired":
        kw["lifetime"] = -5
    elif case == "wrong aud":
        kw["aud"] = "other"
    elif case == "untrusted key":
        kw["key"] = "other"
    elif case == "untrusted issuer":
        kw["iss"] = "https://elsewhere"
    else:
        extra["subject_token_type"] = "urn:ietf:params:oauth:token-type:saml2"
    r = exchange(http, idp.sts_endpoint, subject(keys, **kw), audience="a", **extra)
    assert r.status_code == 400 and r.json()["error"] in ("invalid_grant", "invalid_request"), r.text


@pytest.fixture
def iap(idp):
    ogc = ResourceServer(idp).start()
    gw = IdentityAwareProxy(idp, ogc.base, mode="iap", audience=AUD).start()
    yield ogc, gw
    gw.stop()
    ogc.stop()


def id_token(http, idp, keys):
    return google(http, idp, assertion(keys["sa"][0], idp)).json()["id_token"]


def test_the_iap_gateway_reads_proxy_authorization_first_and_passes_authorization_on(http, idp, keys, iap):
    ogc, gw = iap
    url = gw.base + "/ogc/collections/x/items"
    service = idp._access_token("svc", {}, 60)
    t = id_token(http, idp, keys)
    r = http.get(url, headers={"Proxy-Authorization": "Bearer " + t, "Authorization": "Bearer " + service},
                 timeout=10)
    assert r.status_code == 200 and r.json()["numberReturned"] == 3, r.text
    assert ogc.requests()[-1]["token"] == service
    # In Authorization, IAP takes it out: the service sees none and refuses with its own challenge.
    r = http.get(url, headers={"Authorization": "Bearer " + t}, timeout=10)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    assert ogc.requests()[-1]["token"] is None
    assert [e["token_from"] for e in gw.requests()] == ["proxy-authorization", "authorization"]


@pytest.mark.parametrize("case", ["none", "wrong aud", "garbage", "access token"])
def test_the_iap_gateway_refuses_like_iap(http, idp, keys, iap, case):
    ogc, gw = iap
    headers = {}
    if case == "wrong aud":
        now = int(time.time())
        bad = sign_rs256(idp.signing_key, {"alg": "RS256", "kid": idp.signing_kid},
                         {"iss": idp.google_issuer, "aud": "other", "iat": now, "exp": now + 60})
        headers["Proxy-Authorization"] = "Bearer " + bad
    elif case == "garbage":
        headers["Proxy-Authorization"] = "Bearer a.b.c"
    elif case == "access token":
        headers["Proxy-Authorization"] = "Bearer " + idp._access_token("svc", {}, 60)
    r = http.get(gw.base + "/ogc/collections/x/items", headers=headers, timeout=10, allow_redirects=False)
    assert r.status_code == 401 and r.text.startswith("Invalid IAP credentials: "), r.text
    assert r.headers["X-Goog-IAP-Generated-Response"] == "true" and "WWW-Authenticate" not in r.headers
    assert not ogc.requests()
    gw.rejection = "302"
    r = http.get(gw.base + "/ogc/collections/x/items", headers=headers, timeout=10, allow_redirects=False)
    assert r.status_code == 302 and r.headers["Location"].startswith(idp.base + "/o/oauth2/v2/auth?")


def test_an_expired_id_token_is_refused(http, idp, keys, iap):
    ogc, gw = iap
    idp.id_token_lifetime = 1
    t = id_token(http, idp, keys)
    time.sleep(1.1)
    r = http.get(gw.base + "/ogc/collections/x/items", headers={"Proxy-Authorization": "Bearer " + t}, timeout=10)
    assert r.status_code == 401 and "expired" in r.text
    assert gw.requests()[-1]["why"] == "expired"
