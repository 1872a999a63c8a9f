"""`type = "azure-sas"` through the real binary, against the Azure Blob Storage and Planetary Computer-style SAS token
endpoint of Tests/e2e/azure: GDAL reads a COG through the proxy as a plain /vsicurl/http:// URL with no Azure
settings of its own (gdalinfo, a window read: range requests, several in parallel), one token request per container
or collection however many requests wait for it, a token that expires is replaced before it is used, a re-keyed
account's 403 AuthenticationFailed is answered by a new SAS and a retry the client never sees, a token endpoint that
is down or refuses the subscription key is a 502 naming the credential and the endpoint, and the SAS reaches no byte
a client receives (heads, bodies, access log, status page, metrics)."""
import concurrent.futures
import json
import os
import re
import subprocess
import time
from urllib.parse import parse_qsl, quote

import pytest
import requests

import harness
from harness import cred
from azure import BlobStore, SASTokenService
from test_admin import admin_get, start_with_admin
from test_credentials import via

KEY = "pc-subscription-key-0123456789"
ACCOUNT_CONTAINER = "/api/sas/v1/token/{account}/{container}"


def run(*args, env=None, timeout=60):
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=harness.clean_env(env))
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout


@pytest.fixture(scope="module")
def cog(tmp_path_factory):
    """A 1024x1024 COG (256-pixel tiles, deflate, overviews) of a pattern no window repeats: (path, bytes)."""
    d = tmp_path_factory.mktemp("azure-cog")
    pgm = d / "pattern.pgm"
    w = h = 1024
    pgm.write_bytes(b"P5 %d %d 255\n" % (w, h) + bytes(((x * 7 + y * 13 + (x * y) // 97) % 251)
                                                     for y in range(h) for x in range(w)))
    path = str(d / "cog.tif")
    run("gdal_translate", "-q", "-of", "COG", "-a_srs", "EPSG:4326", "-a_ullr", "-91", "31", "-90", "30",
        "-co", "BLOCKSIZE=256", "-co", "COMPRESS=DEFLATE", "-co", "OVERVIEWS=IGNORE_EXISTING", str(pgm), path)
    with open(path, "rb") as f:
        return path, f.read()


@pytest.fixture
def rig(cog):
    store = BlobStore(account="pcstore").start()
    store.put("cogs", "scenes/cog.tif", cog[1])
    store.put("more", "cog.tif", cog[1])
    store.add_container("echo")
    sas = SASTokenService(store, ttl=3600, collections={"test-cogs": "cogs", "more-cogs": "more"},
                          subscription_key=KEY).start()
    yield store, sas
    sas.stop()
    store.stop()


def azure_cred(store, sas, name="pc", match=None, token_url=None, **fields):
    fields.setdefault("account", "pcstore")
    fields.setdefault("subscription_key", "${PC_SDK_SUBSCRIPTION_KEY}")
    fields = {k: v for k, v in fields.items() if v is not None}
    return cred(name, "azure-sas", match or store.url + "/", token_url=token_url or sas.url + ACCOUNT_CONTAINER,
                **fields)


def start(proxy_factory, store, sas, extra="", **fields):
    return proxy_factory(extra_config=azure_cred(store, sas, **fields) + extra,
                         env={"PC_SDK_SUBSCRIPTION_KEY": KEY})


def gdal_env(p):
    return {"GDAL_HTTP_PROXY": p.authority, "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR", "GDAL_HTTP_MAX_RETRY": "0",
            "CPL_VSIL_CURL_CHUNK_SIZE": "16384", "VSI_CACHE": "FALSE"}


def checksum(path):
    m = re.search(r"Checksum=(\d+)", run("gdalinfo", "-checksum", path))
    assert m
    return int(m.group(1))


def window(source, dest, env=None):
    run("gdal_translate", "-q", "-srcwin", "333", "517", "300", "260", source, dest, env=env)
    return checksum(dest)


def sigs(sas):
    """Every SAS signature the token endpoint issued, as issued and percent-encoded."""
    out = set()
    for e in sas.token_requests():
        if e.get("sig"):
            out |= {e["sig"], quote(e["sig"], safe="")}
    assert out
    return out


def assert_no_sas(texts, sas):
    for text in texts:
        for s in sigs(sas) | {KEY}:
            assert s not in text
            assert s[:12] not in text


# ---------------------------------------------------------------------------------------------------------
# GDAL reads a COG from Blob Storage through the proxy
# ---------------------------------------------------------------------------------------------------------

def test_gdal_reads_the_cog_with_range_requests_and_one_token(proxy_factory, rig, cog, tmp_path):
    store, sas = rig
    p = start(proxy_factory, store, sas)
    url = "/vsicurl/" + store.blob_url("cogs", "scenes/cog.tif")
    info = run("gdalinfo", url, env=gdal_env(p))
    assert "Driver: GTiff/GeoTIFF" in info and "Size is 1024, 1024" in info and "LAYOUT=COG" in info
    assert window(url, str(tmp_path / "remote.tif"), env=gdal_env(p)) == window(cog[0], str(tmp_path / "local.tif"))
    seen = store.requests()
    assert seen and all(e["outcome"] == "ok" for e in seen), [(e["outcome"], e["range"]) for e in seen]
    assert sum(1 for e in seen if e["status"] == 206) >= 3, [e["range"] for e in seen]
    assert {e["sig"] for e in seen} == {e["sig"] for e in sas.token_requests()}
    (t,) = sas.token_requests()
    assert t["path"] == "/api/sas/v1/token/pcstore/cogs" and t["key"] == "ok" and t["status"] == 200
    assert "Ocp-Apim-Subscription-Key" not in seen[0]["headers"]


def test_collection_endpoint_with_a_container_map(proxy_factory, rig, cog, tmp_path):
    store, sas = rig
    p = start(proxy_factory, store, sas, token_url=sas.url + "/api/sas/v1/token/{collection}",
              extra='collections = { "pcstore/cogs" = "test-cogs", "more" = "more-cogs" }\n')
    for container, name in (("cogs", "scenes/cog.tif"), ("more", "cog.tif")):
        url = "/vsicurl/" + store.blob_url(container, name)
        assert window(url, str(tmp_path / (container + ".tif")), env=gdal_env(p)) == \
            window(cog[0], str(tmp_path / "local.tif"))
    assert sorted(e["path"] for e in sas.token_requests()) == ["/api/sas/v1/token/more-cogs",
                                                               "/api/sas/v1/token/test-cogs"]
    assert all(e["outcome"] == "ok" for e in store.requests())


# ---------------------------------------------------------------------------------------------------------
# Single flight, expiry, rejection
# ---------------------------------------------------------------------------------------------------------

def test_one_token_request_per_container_however_many_requests_wait(proxy_factory, rig, cog):
    store, sas = rig
    sas.delay = 0.5
    p = start(proxy_factory, store, sas)
    data = cog[1]

    def read(i):
        container, name = (("cogs", "scenes/cog.tif"), ("more", "cog.tif"))[i % 2]
        a = (i * 1000) % (len(data) - 500)
        with requests.Session() as s:  # one per thread: a Session is not thread-safe
            s.trust_env = False
            r = via(p, s, "GET", store.blob_url(container, name), headers={"Range": "bytes=%d-%d" % (a, a + 499)})
        return r.status_code, r.content == data[a:a + 500]

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(read, range(64)))
    assert results == [(206, True)] * 64
    assert sorted(e["path"] for e in sas.token_requests()) == ["/api/sas/v1/token/pcstore/cogs",
                                                               "/api/sas/v1/token/pcstore/more"]
    assert len(store.requests()) == 64 and set(store.outcomes()) == {"ok"}


def test_an_expiring_token_is_replaced_before_it_is_used(proxy_factory, rig, cog, session):
    store, sas = rig
    sas.ttl = 3
    p = start(proxy_factory, store, sas)
    url = store.blob_url("cogs", "scenes/cog.tif")
    assert via(p, session, "GET", url, headers={"Range": "bytes=0-99"}).status_code == 206
    time.sleep(3.3)  # past msft:expiry: the blob store would refuse the first SAS now
    r = via(p, session, "GET", url, headers={"Range": "bytes=100-199"})
    assert r.status_code == 206 and r.content == cog[1][100:200]
    assert len(sas.token_requests()) == 2
    assert store.outcomes() == ["ok", "ok"]  # the expired SAS was never sent
    first, second = [e["sig"] for e in store.requests()]
    assert first != second


def test_a_rekeyed_account_is_answered_by_a_new_sas_and_a_retry(proxy_factory, rig, cog, session, tmp_path):
    store, sas = rig
    p = start(proxy_factory, store, sas)
    url = store.blob_url("cogs", "scenes/cog.tif")
    assert via(p, session, "GET", url, headers={"Range": "bytes=0-99"}).status_code == 206
    store.rotate_key()  # every SAS signed so far now fails: 403 AuthenticationFailed
    r = via(p, session, "GET", url, headers={"Range": "bytes=500-599"})
    assert r.status_code == 206 and r.content == cog[1][500:600]
    assert store.outcomes() == ["ok", "AuthenticationFailed", "ok"]
    assert len(sas.token_requests()) == 2
    # HEAD answers carry the code in the head only: the same.
    store.rotate_key()
    r = via(p, session, "HEAD", url)
    assert r.status_code == 200 and r.headers["Content-Length"] == str(len(cog[1]))
    assert store.outcomes()[3:] == ["AuthenticationFailed", "ok"]
    # And GDAL, across a rotation, reads on as if nothing happened.
    store.rotate_key()
    gdal_url = "/vsicurl/" + url
    assert window(gdal_url, str(tmp_path / "r.tif"), env=gdal_env(p)) == window(cog[0], str(tmp_path / "l.tif"))
    assert len(sas.token_requests()) == 4


def test_a_sas_the_store_refuses_when_fresh_is_relayed_not_looped(proxy_factory, rig, session):
    store, sas = rig
    sas.signing_key = BlobStore().key  # the endpoint signs with a key the account does not have
    p = start(proxy_factory, store, sas)
    url = store.blob_url("cogs", "scenes/cog.tif")
    r = via(p, session, "GET", url)
    # The SAS was fetched for this very request: the store refusing it says new ones will not do better.
    assert r.status_code == 403 and r.headers["x-ms-error-code"] == "AuthenticationFailed"
    assert "<Code>AuthenticationFailed</Code>" in r.text
    assert store.outcomes() == ["AuthenticationFailed"] and len(sas.token_requests()) == 1
    for _ in range(3):
        assert via(p, session, "GET", url).status_code == 403
    assert len(store.requests()) <= 1 + 3 * 2 and len(sas.token_requests()) <= 1 + 3
    assert_no_sas([r.text, json.dumps(dict(r.headers)), p.log_text()], sas)


def test_prefetch_keeps_the_sas_of_each_container_prefix_ready(proxy_factory, rig, session):
    store, sas = rig
    sas.ttl = 4
    p = start_with_admin(proxy_factory, azure_cred(store, sas, match=[store.url + "/cogs", store.url + "/more/"],
                                                   prefetch=True), env={"PC_SDK_SUBSCRIPTION_KEY": KEY})
    deadline = time.time() + 10
    while admin_get(p, "/readyz").status_code != 200 and time.time() < deadline:
        time.sleep(0.1)
    assert admin_get(p, "/readyz").json() == {"ready": True}
    # Both containers' SAS were fetched with no request, and are refreshed before they expire, still with none.
    assert sorted({e["path"] for e in sas.token_requests()}) == ["/api/sas/v1/token/pcstore/cogs",
                                                                 "/api/sas/v1/token/pcstore/more"]
    time.sleep(4.5)
    assert len(sas.token_requests()) >= 4 and store.requests() == []
    r = via(p, session, "GET", store.blob_url("more", "cog.tif"), headers={"Range": "bytes=0-9"})
    assert r.status_code == 206 and store.outcomes() == ["ok"]


# ---------------------------------------------------------------------------------------------------------
# Failures of the token endpoint
# ---------------------------------------------------------------------------------------------------------

def test_token_endpoint_down_is_a_502_naming_credential_and_endpoint(proxy_factory, rig):
    store, sas = rig
    dead = "http://127.0.0.1:%d" % harness.closed_port()
    p = start(proxy_factory, store, sas, token_url=dead + ACCOUNT_CONTAINER)
    r, body = harness.fetch(p, "GET", store.blob_url("cogs", "scenes/cog.tif"))
    err = harness.assert_error_json(r.status, r.getheader, body, 502)
    assert "'pc'" in err["message"], err
    assert "SAS token endpoint %s/api/sas/v1/token/pcstore/cogs" % dead in err["message"], err
    assert KEY not in body.decode() and KEY not in p.log_text()
    assert store.requests() == []


def test_token_endpoint_errors_are_502s_that_say_what_it_answered(proxy_factory, rig):
    store, sas = rig
    p = start(proxy_factory, store, sas)
    url = store.blob_url("cogs", "scenes/cog.tif")
    sas.set_mode("unavailable")
    r, body = harness.fetch(p, "GET", url)
    err = harness.assert_error_json(r.status, r.getheader, body, 502)
    assert "'pc'" in err["message"] and "answered HTTP 503" in err["message"], err
    sas.set_mode("empty")
    r, body = harness.fetch(p, "GET", store.blob_url("more", "cog.tif"))
    err = harness.assert_error_json(r.status, r.getheader, body, 502)
    assert "/api/sas/v1/token/pcstore/more answered HTTP 200 without a JSON object" in err["message"], err
    assert store.requests() == []


def test_a_refused_subscription_key_is_a_502_that_never_shows_it(proxy_factory, rig):
    store, sas = rig
    p = proxy_factory(extra_config=azure_cred(store, sas), env={"PC_SDK_SUBSCRIPTION_KEY": "wrong-key-987654"})
    r, body = harness.fetch(p, "GET", store.blob_url("cogs", "scenes/cog.tif"))
    err = harness.assert_error_json(r.status, r.getheader, body, 502)
    assert "'pc'" in err["message"] and "refused the subscription key" in err["message"], err
    assert "wrong-key-987654" not in body.decode() and "wrong-key-987654" not in p.log_text()
    assert [e["key"] for e in sas.token_requests()] == ["invalid"]
    assert store.requests() == []
    # Without any key the endpoint's 401 says one is wanted.
    q = proxy_factory(extra_config=azure_cred(store, sas, name="nokey", subscription_key=None))
    r, body = harness.fetch(q, "GET", store.blob_url("cogs", "scenes/cog.tif"))
    err = harness.assert_error_json(r.status, r.getheader, body, 502)
    assert "wants a subscription key" in err["message"], err


def test_a_url_that_names_no_container_is_a_502_without_a_token_request(proxy_factory, rig):
    store, sas = rig
    p = start(proxy_factory, store, sas)
    r, body = harness.fetch(p, "GET", store.url + "/Not_A_Container/x.tif")
    err = harness.assert_error_json(r.status, r.getheader, body, 502)
    assert "'pc'" in err["message"] and "container" in err["message"], err
    assert sas.token_requests() == [] and store.requests() == []


# ---------------------------------------------------------------------------------------------------------
# The client's own SAS, and secrecy
# ---------------------------------------------------------------------------------------------------------

def test_the_clients_own_sas_fields_are_replaced(proxy_factory, rig, cog, session):
    store, sas = rig
    p = start(proxy_factory, store, sas)
    url = store.blob_url("cogs", "scenes/cog.tif") + "?sv=2019-02-02&si=old-policy&se=2000-01-01&sig=stale&foo=bar"
    r = via(p, session, "GET", url, headers={"Range": "bytes=0-9"})
    assert r.status_code == 206 and r.content == cog[1][:10]
    (e,) = store.requests()
    fields = parse_qsl(e["query"])
    assert [k for k, _ in fields].count("sig") == 1 and ("foo", "bar") in fields and "si" not in dict(fields)
    assert dict(fields)["sig"] == sas.token_requests()[0]["sig"]


def test_the_sas_reaches_no_head_log_status_page_or_metrics(proxy_factory, rig, session):
    store, sas = rig
    p = start_with_admin(proxy_factory, azure_cred(store, sas), env={"PC_SDK_SUBSCRIPTION_KEY": KEY})
    blob = via(p, session, "GET", store.blob_url("cogs", "scenes/cog.tif"), headers={"Range": "bytes=0-99"})
    assert blob.status_code == 206
    missing = via(p, session, "GET", store.blob_url("cogs", "nope.tif"))
    assert missing.status_code == 404 and "BlobNotFound" in missing.text
    assert all(e["sig"] for e in store.requests())  # the store did get the SAS ...
    received = [missing.text, json.dumps(dict(missing.headers)), json.dumps(dict(blob.headers))]
    access = "\n".join(harness.access_lines_text(p))
    assert "/cogs/scenes/cog.tif" in access and "credential=pc" in access
    status = admin_get(p, "/status.json")
    (pc,) = [c for c in status.json()["credentials"] if c["name"] == "pc"]
    assert pc["type"] == "azure-sas", pc
    assert sas.url + "/api/sas/v1/token/pcstore/cogs" in status.text  # the token's scope is shown ...
    page, metrics = admin_get(p, "/").text, admin_get(p, "/metrics").text
    assert 'credential="pc"' in metrics
    # ... and no SAS, no subscription key anywhere a client or an operator reads.
    assert_no_sas(received + [access, p.log_text(), status.text, page, metrics], sas)


def test_the_sas_is_scrubbed_from_a_body_that_echoes_the_url(proxy_factory, rig, origin, session):
    store, sas = rig
    # The credential also covers an origin that echoes the URL it was asked for (as a tile server or an error page
    # in front of a blob store may): container "echo".
    p = start(proxy_factory, store, sas, match=[store.url + "/", origin.url + "/echo"])
    echo = via(p, session, "GET", origin.url + "/echo?f=json")
    assert echo.status_code == 200
    assert "sig=" in json.dumps(origin.request_log()[-1])  # the origin did get the SAS ...
    assert_no_sas([echo.text, json.dumps(dict(echo.headers))], sas)  # ... and the client none of it
    assert echo.json()["path"] == "/echo"


def test_configuration_errors_name_the_key(proxy_binary, tmp_path):
    cases = [
        ('token_url = "https://pc.example/api/sas/v1/token/{colection}"', "token_url"),
        ('token_url = "https://pc.example/api/sas/v1/token/{collection}"', "collection"),
        ('token_url = "https://pc.example/api/sas/v1/token/{account}/{container}"\ncollection = "naip"',
         "collection"),
        ('token_url = "https://pc.example/api/sas/v1/token/{collection}"\ncollections = { "NAIP" = "naip" }',
         "collections"),
        ('token_url = "https://pc.example/api/sas/v1/token/{account}/{container}"\naccount = "Not-An-Account"',
         "account"),
    ]
    for body, key in cases:
        conf = tmp_path / "bad.conf"
        conf.write_text('[proxy]\nlisten = ["127.0.0.1:3128"]\n\n[[credential]]\nname = "pc"\ntype = "azure-sas"\n'
                        'match = "https://naipeuwest.blob.core.windows.net/"\n' + body + "\n")
        out = harness.run_cli(["check", "--config", str(conf)])
        assert out.returncode == 2, (body, out.stdout, out.stderr)
        assert key in out.stderr, (body, out.stderr)
    good = tmp_path / "good.conf"
    good.write_text('[proxy]\nlisten = ["127.0.0.1:3128"]\n\n[[credential]]\nname = "pc"\ntype = "azure-sas"\n'
                    'match = "https://sentinel2l2a01.blob.core.windows.net/"\n'
                    'token_url = "https://planetarycomputer.microsoft.com/api/sas/v1/token/{account}/{container}"\n')
    out = harness.run_cli(["check", "--config", str(good)])
    assert out.returncode == 0, (out.stdout, out.stderr)
