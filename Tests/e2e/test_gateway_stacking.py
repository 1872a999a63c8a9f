"""An identity-aware proxy in front of ArcGIS (`layer = "gateway"` oauth2 credential stacked on an `arcgis-token`
one), through the real binary: the gateway of Tests/e2e/oidc/gateway.py lets a request through only with a bearer
token the test OIDC provider issued, and ArcGIS behind it wants its own token. Clients with no credential of
their own (curl, Python requests, GDAL) read features; each layer expiring on its own refreshes that layer only;
the proxy's own `rest/info` and `generateToken` requests pass the gateway too."""
import subprocess
import time

import pytest

import harness
from harness import cred
from arcgis import ArcGISServer
from oidc import OIDCProvider
from oidc.gateway import IdentityAwareProxy
from test_admin import admin_get, start_with_admin
from test_credentials import via


@pytest.fixture
def idp():
    p = OIDCProvider(expires_in=300).start()
    p.add_client("gis-proxy", secret="gw-secret")
    yield p
    p.stop()


def stack(idp, rejection="401", placement="header"):
    """ArcGIS behind the gateway, reporting the gateway's URL as its own (as WebContextURL makes it)."""
    ags = ArcGISServer(role="server", ttl=300).start()
    gw = IdentityAwareProxy(idp, ags.url, rejection=rejection, placement=placement).start()
    ags.httpd.base_url = gw.base
    return ags, gw


@pytest.fixture
def iap(idp):
    ags, gw = stack(idp)
    yield ags, gw
    gw.stop()
    ags.stop()


def config(idp, gw, ags, **gateway_fields):
    fields = dict(issuer=idp.issuer, client_id="gis-proxy", client_secret="gw-secret", layer="gateway")
    fields.update(gateway_fields)
    return (cred("iap", "oauth2", gw.base + "/", **fields)
            + cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass"))


def query_url(ags):
    return ags.query_url() + "?where=1%3D1&outFields=*&f=json"


def passed(gw):
    return [e for e in gw.requests() if e["state"] == "ok"]


def test_curl_requests_and_gdal_read_features_through_the_gateway_and_arcgis(proxy_factory, idp, iap, session):
    ags, gw = iap
    p = proxy_factory(extra_config=config(idp, gw, ags))
    url = query_url(ags)
    assert url.startswith(gw.base)
    r = via(p, session, "GET", url)
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    c = harness.curl("-x", p.url, url)
    assert c.returncode == 0 and b'"features"' in c.stdout, c.stderr
    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority})
    g = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, env=env, timeout=60)
    assert g.returncode == 0, g.stderr
    assert b"Feature Count: 3" in g.stdout
    log = gw.requests()
    # Every request met the gateway with its bearer: the services and the proxy's own rest/info and generateToken.
    assert log and all(e["state"] == "ok" for e in log), [(e["path"], e["state"]) for e in log]
    paths = {e["path"] for e in log}
    assert "/arcgis/rest/info" in paths and "/arcgis/tokens/generateToken" in paths, paths
    # ArcGIS had its own token, never the gateway's bearer (the gateway took it out).
    st = ags.stats()
    assert st["tokens_issued"].get("generate_password") == 1, st
    assert st["rejected_498"] == 0 and st["rejected_499"] == 0, st
    assert [e["outcome"] for e in idp.token_requests()] == ["ok"]
    assert all("token=" in e["passed_path"] for e in log if e["path"].endswith("/query"))
    text = p.log_text()
    assert "gw-secret" not in text and "alice-pass" not in text and "Bearer " not in text
    # the access log names both layers
    assert "gis+iap" in text


def test_each_layer_expired_on_its_own_refreshes_that_layer_only(proxy_factory, idp, iap, session):
    ags, gw = iap
    p = proxy_factory(extra_config=config(idp, gw, ags))
    url = query_url(ags)
    assert via(p, session, "GET", url).status_code == 200
    assert len(idp.token_requests()) == 1 and ags.stats()["tokens_issued"]["generate_password"] == 1

    # The gateway's token dies early: the gateway answers 401 invalid_token, the proxy gets a new gateway token
    # and retries; ArcGIS's token is not touched.
    idp.expire_all()
    gw.reset_log()
    r = via(p, session, "GET", url)
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    assert [e["outcome"] for e in idp.token_requests()] == ["ok", "ok"]
    assert ags.stats()["tokens_issued"]["generate_password"] == 1
    states = [e["state"] for e in gw.requests()]
    assert states == ["expired", "ok"], states

    # ArcGIS's token dies early: 498 behind a passing gateway; only the ArcGIS token is refreshed (its
    # generateToken passes the gateway with the gateway token it has).
    ags.expire_all()
    ags.reset_stats()
    gw.reset_log()
    r = via(p, session, "GET", url)
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    st = ags.stats()
    assert st["rejected_498"] == 1 and st["tokens_issued"]["generate_password"] == 1, st
    assert len(idp.token_requests()) == 2
    assert all(e["state"] == "ok" for e in gw.requests())


def test_a_form_post_is_replayed_after_the_gateways_rejection(proxy_factory, idp, iap, session):
    ags, gw = iap
    p = proxy_factory(extra_config=config(idp, gw, ags))
    assert via(p, session, "GET", query_url(ags)).status_code == 200
    idp.expire_all()
    gw.reset_log()
    where = "OBJECTID IN (%s)" % ",".join(str(i) for i in range(400))
    r = via(p, session, "POST", ags.query_url(), data={"where": where, "outFields": "*", "f": "json"})
    assert r.status_code == 200 and "features" in r.json(), r.text[:300]
    log = gw.requests()
    assert [e["state"] for e in log] == ["expired", "ok"]
    assert log[0]["body_len"] == log[1]["body_len"] > len(where)
    assert ags.stats()["rejected_498"] == 0


def test_a_gateway_redirecting_to_sign_in_is_a_rejection_when_configured(proxy_factory, idp, session):
    ags, gw = stack(idp, rejection="302")
    try:
        p = proxy_factory(extra_config=config(idp, gw, ags, rejection=["invalid_token", "redirect_to_issuer"]))
        url = query_url(ags)
        assert via(p, session, "GET", url).status_code == 200
        idp.expire_all()
        gw.reset_log()
        r = via(p, session, "GET", url, allow_redirects=False)
        assert r.status_code == 200, (r.status_code, r.headers)
        assert [e["state"] for e in gw.requests()] == ["expired", "ok"]
    finally:
        gw.stop()
        ags.stop()


def test_the_gateway_token_in_the_query(proxy_factory, idp, session):
    ags, gw = stack(idp, placement="query")
    try:
        p = proxy_factory(extra_config=config(idp, gw, ags, token_placement="query"))
        r = via(p, session, "GET", query_url(ags))
        assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
        log = gw.requests()
        assert log and all(e["state"] == "ok" for e in log)
        assert all("access_token" not in e["passed_path"] for e in log)
    finally:
        gw.stop()
        ags.stop()


def test_provider_down_and_gateway_token_expired_gives_502_naming_it(proxy_factory, idp, session):
    idp_short = OIDCProvider(expires_in=2).start()
    idp_short.add_client("gis-proxy", secret="gw-secret")
    ags, gw = stack(idp_short)
    try:
        p = proxy_factory(extra_config=config(idp_short, gw, ags))
        url = query_url(ags)
        assert via(p, session, "GET", url).status_code == 200
        idp_short.go_down()
        time.sleep(2.5)
        gw.reset_log()
        r = via(p, session, "GET", url)
        assert r.status_code == 502, r.text[:300]
        assert "iap" in r.text
        # no expired gateway token was sent
        assert all(e["state"] != "expired" for e in gw.requests()), gw.requests()
    finally:
        gw.stop()
        ags.stop()
        idp_short.stop()


def test_status_shows_both_layers_and_never_a_token(proxy_factory, idp, iap, session):
    ags, gw = iap
    p = start_with_admin(proxy_factory, config(idp, gw, ags))
    assert via(p, session, "GET", query_url(ags)).status_code == 200
    doc = admin_get(p, "/status.json").json()
    creds = {c["name"]: c for c in doc["credentials"]}
    assert creds["iap"]["type"] == "oauth2" and creds["iap"]["tokens"][0]["state"] == "valid", creds["iap"]
    assert creds["gis"]["tokens"][0]["state"] == "valid", creds["gis"]
    assert creds["iap"]["requestsLast5Min"] >= 1 and creds["gis"]["requestsLast5Min"] >= 1
    token = idp.token_requests()[0]["access_token"]
    for path in ("/status.json", "/", "/metrics"):
        text = admin_get(p, path).text
        assert token not in text and token[-20:] not in text and "gw-secret" not in text


def test_check_names_the_gateway_layer(proxy_binary, idp, iap, tmp_path):
    ags, gw = iap
    conf = tmp_path / "proxy.conf"
    conf.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\n' + config(idp, gw, ags))
    out = subprocess.run([proxy_binary, "check", "--config", str(conf)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    (line,) = [l for l in out.stdout.splitlines() if l.strip().startswith("- iap ")]
    assert "layer=gateway" in line, out.stdout
    assert "gw-secret" not in out.stdout + out.stderr
