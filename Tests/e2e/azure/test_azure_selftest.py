"""Self-tests of the Azure Blob Storage and SAS token endpoint test servers (no proxy, no authproxy binary).

Run from the repo root:  python3 -m pytest Tests/e2e/azure -q -p no:cacheprovider
"""
import os
import re
import sys
import time
from urllib.parse import parse_qsl, quote

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from azure import BlobStore, SASTokenService, make_sas, signature, string_to_sign  # noqa: E402

DATA = bytes(range(256)) * 40  # 10240 bytes


@pytest.fixture
def http():
    s = requests.Session()
    s.trust_env = False
    yield s
    s.close()


@pytest.fixture
def rig():
    store = BlobStore(account="pcstore").start()
    store.put("cogs", "dir/a.tif", DATA)
    store.add_container("empty")
    sas = SASTokenService(store, ttl=60, collections={"test-cogs": "cogs"}).start()
    yield store, sas
    sas.stop()
    store.stop()


def token(http, url, **kw):
    r = http.get(url, timeout=10, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def signed(store, sas_token, name="dir/a.tif", container="cogs"):
    return store.blob_url(container, name) + "?" + sas_token


def assert_auth_failed(r, detail, head=False):
    assert r.status_code == 403
    assert r.headers["x-ms-error-code"] == "AuthenticationFailed"
    if head:
        assert r.content == b""
    else:
        assert r.headers["Content-Type"] == "application/xml"
        assert r.text.startswith('<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthenticationFailed</Code>')
        assert detail in r.text


def test_account_container_token_reads_whole_ranged_and_head(rig, http):
    store, sas = rig
    t = token(http, sas.token_url("pcstore", "cogs"))
    assert set(t) == {"msft:expiry", "token"}
    fields = dict(parse_qsl(t["token"]))
    assert fields["sr"] == "c" and fields["sp"] == "rl" and fields["se"] == t["msft:expiry"]
    assert "%3A" in t["token"]  # values percent-encoded, as Planetary Computer's
    r = http.get(signed(store, t["token"]), timeout=10)
    assert r.status_code == 200 and r.content == DATA
    assert r.headers["x-ms-blob-type"] == "BlockBlob" and r.headers["Accept-Ranges"] == "bytes"
    r = http.get(signed(store, t["token"]), headers={"Range": "bytes=100-199"}, timeout=10)
    assert r.status_code == 206 and r.content == DATA[100:200]
    assert r.headers["Content-Range"] == "bytes 100-199/10240"
    r = http.get(signed(store, t["token"]), headers={"Range": "bytes=-10"}, timeout=10)
    assert r.status_code == 206 and r.content == DATA[-10:]
    r = http.get(signed(store, t["token"]), headers={"x-ms-range": "bytes=10240-"}, timeout=10)
    assert r.status_code == 416 and r.headers["x-ms-error-code"] == "InvalidRange"
    r = http.head(signed(store, t["token"]), timeout=10)
    assert r.status_code == 200 and r.headers["Content-Length"] == str(len(DATA)) and r.content == b""
    assert [e["outcome"] for e in store.requests()] == ["ok", "ok", "ok", "InvalidRange", "ok"]
    assert len(sas.token_requests()) == 1


def test_collection_token_and_unknown_ids(rig, http):
    store, sas = rig
    t = token(http, sas.token_url("test-cogs"))
    assert http.get(signed(store, t["token"]), timeout=10).status_code == 200
    r = http.get(sas.token_url("nope"), timeout=10)
    assert r.status_code == 404 and r.json() == {"detail": "Collection not found: nope"}
    r = http.get(sas.token_url("pcstore", "missing"), timeout=10)
    assert r.status_code == 404 and "pcstore/missing" in r.json()["detail"]
    r = http.get(sas.token_url("otheraccount", "cogs"), timeout=10)
    assert r.status_code == 404
    assert [e["status"] for e in sas.token_requests()] == [200, 404, 404, 404]


def test_a_container_token_does_not_open_another_container(rig, http):
    store, sas = rig
    t = token(http, sas.token_url("pcstore", "empty"))
    assert_auth_failed(http.get(signed(store, t["token"]), timeout=10), "Signature did not match")
    r = http.get(signed(store, t["token"], name="x", container="empty"), timeout=10)
    assert r.status_code == 404 and r.headers["x-ms-error-code"] == "BlobNotFound"


def test_no_sas_is_public_access_not_permitted(rig, http):
    store, _ = rig
    r = http.get(store.blob_url("cogs", "dir/a.tif"), timeout=10)
    assert r.status_code == 409 and r.headers["x-ms-error-code"] == "PublicAccessNotPermitted"
    assert store.outcomes() == ["PublicAccessNotPermitted"]


def test_tampered_duplicated_or_incomplete_sas_fails_authentication(rig, http):
    store, sas = rig
    t = token(http, sas.token_url("pcstore", "cogs"))["token"]
    fields = dict(parse_qsl(t))
    bad = t.replace("sp=rl", "sp=rwl")  # a permission added after signing
    assert_auth_failed(http.get(signed(store, bad), timeout=10), "Signature did not match. String to sign used was rwl")
    assert_auth_failed(http.head(signed(store, bad), timeout=10), None, head=True)
    assert_auth_failed(http.get(signed(store, t + "&sig=x"), timeout=10), "Signature fields not well formed.")
    no_se = "&".join(p for p in t.split("&") if not p.startswith("se="))
    assert_auth_failed(http.get(signed(store, no_se), timeout=10), "Signature fields not well formed.")
    # The string to sign is Azure's, field for field (sv >= 2020-12-06, sr=c).
    expected = "\n".join(["rl", fields["st"], fields["se"], "/blob/pcstore/cogs", "", "", "", fields["sv"], "c",
                          "", "", "", "", "", "", ""])
    assert string_to_sign(fields, "pcstore", "cogs") == expected
    assert signature(store.key, expected) == fields["sig"]


def test_expired_and_not_yet_valid_sas(rig, http):
    store, sas = rig
    sas.ttl = 1
    t = token(http, sas.token_url("pcstore", "cogs"))["token"]
    assert http.get(signed(store, t), timeout=10).status_code == 200
    time.sleep(1.2)
    assert_auth_failed(http.get(signed(store, t), timeout=10), "Signature not valid in the specified time frame")
    future = make_sas(store.key, "pcstore", "cogs", time.time() + 600, time.time() + 1200)
    assert_auth_failed(http.get(signed(store, future), timeout=10), "Signature not valid in the specified time frame")


def test_rotated_key_fails_every_earlier_sas(rig, http):
    store, sas = rig
    t = token(http, sas.token_url("pcstore", "cogs"))["token"]
    store.rotate_key()
    assert_auth_failed(http.get(signed(store, t), timeout=10), "Signature did not match")
    fresh = token(http, sas.token_url("pcstore", "cogs"))["token"]
    assert http.get(signed(store, fresh), timeout=10).status_code == 200


def test_blob_sas_protocol_and_permissions(rig, http):
    store, _ = rig
    now = time.time()
    fields = {"se": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 60)), "sp": "r", "sv": "2024-11-04",
              "sr": "b"}
    fields["sig"] = signature(store.key, string_to_sign(fields, "pcstore", "cogs", "dir/a.tif"))
    q = "&".join("%s=%s" % (k, quote(v, safe="")) for k, v in fields.items())
    assert http.get(signed(store, q), timeout=10).status_code == 200
    assert_auth_failed(http.get(signed(store, q, name="dir/b.tif"), timeout=10), "Signature did not match")
    https_only = make_sas(store.key, "pcstore", "cogs", now - 60, now + 60, protocol="https")
    r = http.get(signed(store, https_only), timeout=10)
    assert r.status_code == 403 and r.headers["x-ms-error-code"] == "AuthorizationProtocolMismatch"
    list_only = make_sas(store.key, "pcstore", "cogs", now - 60, now + 60, permissions="l")
    r = http.get(signed(store, list_only), timeout=10)
    assert r.status_code == 403 and r.headers["x-ms-error-code"] == "AuthorizationPermissionMismatch"


def test_subscription_key_is_required_when_set(http):
    store = BlobStore().start()
    store.add_container("c01")
    sas = SASTokenService(store, subscription_key="k-123").start()
    try:
        r = http.get(sas.token_url("pcstore", "c01"), timeout=10)
        assert r.status_code == 401 and "missing subscription key" in r.json()["message"]
        r = http.get(sas.token_url("pcstore", "c01"), headers={"Ocp-Apim-Subscription-Key": "wrong"}, timeout=10)
        assert r.status_code == 401 and "invalid subscription key" in r.json()["message"]
        assert token(http, sas.token_url("pcstore", "c01"), headers={"Ocp-Apim-Subscription-Key": "k-123"})
        assert token(http, sas.token_url("pcstore", "c01") + "?subscription-key=k-123")
        assert [e["key"] for e in sas.token_requests()] == ["missing", "invalid", "ok", "ok"]
    finally:
        sas.stop()
        store.stop()


def test_failure_modes(rig, http):
    store, sas = rig
    sas.set_mode("unavailable")
    assert http.get(sas.token_url("pcstore", "cogs"), timeout=10).status_code == 503
    sas.set_mode("throttled", retry_after=7)
    r = http.get(sas.token_url("pcstore", "cogs"), timeout=10)
    assert r.status_code == 429 and r.headers["Retry-After"] == "7"
    sas.set_mode("empty")
    r = http.get(sas.token_url("pcstore", "cogs"), timeout=10)
    assert r.status_code == 200 and r.content == b""
    sas.set_mode("stall")
    with pytest.raises(requests.exceptions.ReadTimeout):
        http.get(sas.token_url("pcstore", "cogs"), timeout=0.5)
    sas.set_mode("ok")
    assert token(http, sas.token_url("pcstore", "cogs"))


def test_runs_as_a_process(tmp_path):
    import subprocess
    blob = tmp_path / "a.bin"
    blob.write_bytes(DATA)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server.py")
    p = subprocess.Popen([sys.executable, here, "--file", "cogs/a.bin=%s" % blob, "--print-port"],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().split()
        ports = dict(x.split("=") for x in line)
        s = requests.Session()
        s.trust_env = False
        t = s.get("http://127.0.0.1:%s/api/sas/v1/token/pcstore/cogs" % ports["sas"], timeout=10).json()["token"]
        r = s.get("http://127.0.0.1:%s/cogs/a.bin?%s" % (ports["blob"], t), timeout=10)
        assert r.status_code == 200 and r.content == DATA
    finally:
        p.terminate()
        p.wait(timeout=10)


def test_gdal_reads_a_cog_from_the_store_with_a_signed_url(rig, http, tmp_path):
    import shutil
    import subprocess
    if not shutil.which("gdal_translate"):
        pytest.skip("GDAL is not installed")
    store, sas = rig
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update({"GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR", "VSI_CACHE": "FALSE"})
    cog = str(tmp_path / "c.tif")
    subprocess.run(["gdal_create", "-q", "-of", "COG", "-outsize", "600", "600", "-bands", "1", "-burn", "9",
                    "-a_srs", "EPSG:4326", "-a_ullr", "0", "1", "1", "0", "-co", "BLOCKSIZE=256", cog],
                   check=True, timeout=60)
    with open(cog, "rb") as f:
        store.put("cogs", "c.tif", f.read())
    t = token(http, sas.token_url("pcstore", "cogs"))["token"]
    url = "/vsicurl/" + store.blob_url("cogs", "c.tif") + "?" + t
    info = subprocess.run(["gdalinfo", "-checksum", url], capture_output=True, text=True, timeout=60, env=env)
    assert info.returncode == 0, info.stderr
    assert "Size is 600, 600" in info.stdout and "LAYOUT=COG" in info.stdout
    local = subprocess.run(["gdalinfo", "-checksum", cog], capture_output=True, text=True, timeout=60).stdout
    assert re.findall(r"Checksum=\d+", info.stdout) == re.findall(r"Checksum=\d+", local)
    assert any(e["status"] == 206 for e in store.requests()) and set(store.outcomes()) == {"ok"}
    # A SAS the account's key did not sign: GDAL fails, as it would against Azure.
    sas.signing_key = BlobStore().key
    bad = token(http, sas.token_url("pcstore", "cogs"))["token"]
    store.reset()
    out = subprocess.run(["gdalinfo", "/vsicurl/" + store.blob_url("cogs", "c.tif") + "?" + bad],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0 and set(store.outcomes()) == {"AuthenticationFailed"}
