"""`type = "aws-sigv4"`: private S3 objects read and written through the proxy by clients that know nothing of AWS,
against a real S3 implementation that checks every signature (moto in server mode with IAM enforcement on, see
Tests/e2e/aws/README.md).

- GDAL reads a COG as a plain `/vsicurl/http://…` URL with `GDAL_HTTP_PROXY` and no AWS settings: range requests,
  several in parallel.
- curl reads a PMTiles archive by ranges (header, root directory, a tile); the `pmtiles` Python reader too.
- A PUT with a small body is signed with its SHA-256; a larger one streams with `UNSIGNED-PAYLOAD`.
- Web identity: `AssumeRoleWithWebIdentity` at moto's STS, the token file read again at the next exchange.
- Virtual-host style (`cogs.localhost:PORT/key`) through a parent proxy that resolves the bucket's host name.
- A wrong secret: moto's 403 `SignatureDoesNotMatch` relayed, and a log line naming the credential.
- A wrong clock: an S3 endpoint whose clock is 20 minutes ahead answers `RequestTimeTooSkewed`; the log says so.
No secret appears in any log line.
"""

import hashlib
import os
import re
import subprocess
import time

import pytest
import requests

import harness
from aws.counting_relay import CountingRelay
from aws.moto_s3 import MotoS3, moto_available
from aws import pmtiles_archive
from aws.skewed_s3 import SkewedS3
from aws.sts_relay import STSRelay
from forwarding_proxy import ForwardingProxy

pytestmark = pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed (pip install 'moto[server]')")

BUCKET = "cogs"
CRED = "s3-cogs"
TILES = {(0, 0, 0): b"tile z0 " * 40, (1, 0, 0): b"tile z1 0 0", (1, 1, 1): b"tile z1 1 1 " * 9, (2, 3, 1): b"z2"}


def _gdal_env(proxy, extra=None):
    """GDAL through the proxy with no AWS setting of its own (the host's AWS_* variables removed too)."""
    env = {k: v for k, v in harness.clean_env().items() if not k.startswith("AWS_")}
    env.update({"GDAL_HTTP_PROXY": proxy.authority, "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR",
                "CPL_VSIL_CURL_CHUNK_SIZE": "16384", "GDAL_HTTP_MAX_RETRY": "0"})
    env.update(extra or {})
    return env


def _make_cog(d):
    """A 1024×1024 byte raster of noise (incompressible: every 256×256 tile is a range of its own) as a COG."""
    raw = d / "noise.bin"
    raw.write_bytes(os.urandom(1024 * 1024))
    (d / "noise.hdr").write_text(
        "ENVI\nsamples = 1024\nlines = 1024\nbands = 1\nheader offset = 0\nfile type = ENVI Standard\n"
        "data type = 1\ninterleave = bsq\nbyte order = 0\n")
    cog = d / "dem.tif"
    subprocess.run(["gdal_translate", "-q", "-of", "COG", "-co", "BLOCKSIZE=256", "-co", "OVERVIEWS=NONE",
                    str(raw), str(cog)], check=True, capture_output=True, timeout=60)
    return cog


def _checksum(path, env=None):
    out = subprocess.run(["gdalinfo", "-checksum", path], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    return re.findall(r"Checksum=(\d+)", out.stdout)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    d = tmp_path_factory.mktemp("moto")
    m = MotoS3(str(d / "moto.log"), bucket=BUCKET).start()
    m.cog_path = _make_cog(d)
    m.put("dem.tif", m.cog_path.read_bytes())
    m.pmtiles = pmtiles_archive.write(TILES)
    m.put("tiles.pmtiles", m.pmtiles)
    m.relay = CountingRelay(m.port).start()
    yield m
    m.relay.stop()
    m.stop()


def _static_cred(s3, match, secret="${TEST_S3_SECRET}", **extra):
    return harness.cred(CRED, "aws-sigv4", match, region="us-east-1", access_key_id="${TEST_S3_KEY_ID}",
                        secret_access_key=secret, **extra)


def _env(s3):
    return {"TEST_S3_KEY_ID": s3.access_key_id, "TEST_S3_SECRET": s3.secret_access_key}


def _no_secret_in(p, *secrets):
    text = p.log_text()
    for s in secrets:
        assert s not in text


def _curl(proxy, url, *args):
    out = subprocess.run(["curl", "-sS", "-x", proxy.url, "-o", "-", "-w", "\n%{http_code}", *args, url],
                         capture_output=True, timeout=30, env=harness.clean_env())
    body, _, status = out.stdout.rpartition(b"\n")
    return int(status or 0), body


def test_moto_refuses_unsigned_requests(s3):
    # The premise of every test below: without a valid signature moto answers 403.
    assert requests.get(s3.relay.url + "/%s/dem.tif" % BUCKET, timeout=10).status_code == 403


def test_gdal_reads_a_private_cog_through_the_proxy_with_parallel_range_requests(s3, proxy_factory, tmp_path):
    p = proxy_factory(env=_env(s3), extra_config=_static_cred(s3, s3.relay.url + "/%s/" % BUCKET))
    url = "/vsicurl/%s/%s/dem.tif" % (s3.relay.url, BUCKET)
    info = subprocess.run(["gdalinfo", url], capture_output=True, text=True, timeout=60, env=_gdal_env(p))
    assert info.returncode == 0, info.stderr
    assert "Size is 1024, 1024" in info.stdout and "LAYOUT=COG" in info.stdout, info.stdout

    s3.relay.reset()
    out = tmp_path / "window.tif"
    t = subprocess.run(["gdal_translate", "-q", "-srcwin", "0", "0", "1024", "1024", url, str(out)],
                       capture_output=True, text=True, timeout=60,
                       env=_gdal_env(p, {"GDAL_NUM_THREADS": "ALL_CPUS"}))
    assert t.returncode == 0, t.stderr
    # The window read through the proxy is the raster itself.
    assert _checksum(str(out)) == _checksum(str(s3.cog_path))
    ranges = re.findall(r'"GET /%s/dem\.tif HTTP/1\.1" 206' % BUCKET, s3.log_text())
    assert len(ranges) >= 4, "range requests: %d" % len(ranges)
    # Several at once: GDAL fetched tiles in parallel, so the proxy held several upstream connections open.
    assert s3.relay.max_open >= 2, s3.relay.max_open
    # GETs are signed with UNSIGNED-PAYLOAD: the proxy never holds a body it streams.
    assert s3.relay.payload_hashes and set(s3.relay.payload_hashes) == {"UNSIGNED-PAYLOAD"}
    line = [l for l in harness.access_lines_text(p) if "dem.tif" in l][-1]
    assert "credential=%s" % CRED in line, line
    _no_secret_in(p, s3.secret_access_key)


def test_pmtiles_are_read_by_ranges(s3, proxy_factory):
    p = proxy_factory(env=_env(s3), extra_config=_static_cred(s3, s3.relay.url + "/%s/" % BUCKET))
    url = "%s/%s/tiles.pmtiles" % (s3.relay.url, BUCKET)
    status, head = _curl(p, url, "-r", "0-126")
    assert status == 206, head
    assert len(head) == 127 and head[:7] == b"PMTiles"
    h = pmtiles_archive.read_header(head)
    assert h["version"] == 3
    status, root = _curl(p, url, "-r", "%d-%d" % (h["root_offset"], h["root_offset"] + h["root_length"] - 1))
    assert status == 206
    entries = {tid: (off, length) for tid, off, length, _ in pmtiles_archive.decode_directory(root)}
    off, length = entries[pmtiles_archive.zxy_to_tile_id(1, 1, 1)]
    start = h["data_offset"] + off
    status, tile = _curl(p, url, "-r", "%d-%d" % (start, start + length - 1))
    assert status == 206 and tile == TILES[(1, 1, 1)]
    # The PMTiles reader of the `pmtiles` package, each of its reads a range request through the proxy.
    try:
        from pmtiles.reader import Reader
    except ImportError:
        pytest.skip("the pmtiles package is not installed (pip install pmtiles); curl's reads above passed")
    session = requests.Session()
    session.trust_env = False

    def get_bytes(offset, length):
        r = session.get(url, headers={"Range": "bytes=%d-%d" % (offset, offset + length - 1)},
                        proxies={"http": p.url}, timeout=10)
        assert r.status_code == 206, r.status_code
        return r.content

    reader = Reader(get_bytes)
    assert reader.get(2, 3, 1) == TILES[(2, 3, 1)] and reader.get(0, 0, 0) == TILES[(0, 0, 0)]
    assert reader.metadata()["name"] == "authproxy test"
    _no_secret_in(p, s3.secret_access_key)


def test_put_signs_a_small_body_and_streams_a_large_one_unsigned(s3, proxy_factory):
    p = proxy_factory(env=_env(s3), extra_config=_static_cred(
        s3, s3.relay.url + "/%s/" % BUCKET, max_signed_body_bytes=65536))
    session = requests.Session()
    session.trust_env = False
    small, large = os.urandom(40000), os.urandom(300000)
    s3.relay.reset()
    # The client's own (wrong) signature is replaced by the proxy's.
    r = session.put("%s/%s/small.bin" % (s3.relay.url, BUCKET), data=small, proxies={"http": p.url}, timeout=20,
                    headers={"Authorization": "AWS4-HMAC-SHA256 Credential=CLIENT/20200101/us-east-1/s3/aws4_request, "
                                              "SignedHeaders=host, Signature=00", "x-amz-meta-origin": "authproxy-test"})
    assert r.status_code == 200, r.text
    assert s3.relay.payload_hashes == [hashlib.sha256(small).hexdigest()]
    r = session.put("%s/%s/large.bin" % (s3.relay.url, BUCKET), data=large, proxies={"http": p.url}, timeout=20)
    assert r.status_code == 200, r.text
    assert s3.relay.payload_hashes[1:] == ["UNSIGNED-PAYLOAD"]
    assert s3.get("small.bin") == small and s3.get("large.bin") == large
    head = s3.client("s3").head_object(Bucket=BUCKET, Key="small.bin")
    assert head["Metadata"] == {"origin": "authproxy-test"}
    _no_secret_in(p, s3.secret_access_key)


def test_a_wrong_secret_is_relayed_with_a_log_line_naming_the_credential(s3, proxy_factory):
    wrong = "wrong/secret+" + "x" * 27
    p = proxy_factory(env={"TEST_S3_KEY_ID": s3.access_key_id, "TEST_S3_WRONG": wrong},
                      extra_config=_static_cred(s3, s3.relay.url + "/%s/" % BUCKET, secret="${TEST_S3_WRONG}"))
    status, body = _curl(p, "%s/%s/dem.tif" % (s3.relay.url, BUCKET), "-r", "0-99")
    assert status == 403
    assert b"SignatureDoesNotMatch" in body  # the upstream's answer, relayed
    hits = p.wait_for_log(lambda l: CRED in l and "SignatureDoesNotMatch" in l, timeout=5)
    assert hits, p.log_text()[-3000:]
    assert "secret_access_key" in hits[0]
    _no_secret_in(p, wrong, s3.secret_access_key)


def test_a_clock_off_by_twenty_minutes_is_explained(proxy_factory):
    skewed = SkewedS3(offset=1200).start()
    try:
        p = proxy_factory(env={"TEST_S3_KEY_ID": "AKIAEXAMPLEEXAMPLE", "TEST_S3_SECRET": "skew-secret-value"},
                          extra_config=harness.cred(CRED, "aws-sigv4", skewed.url + "/", region="eu-west-1",
                                                    access_key_id="${TEST_S3_KEY_ID}",
                                                    secret_access_key="${TEST_S3_SECRET}"))
        status, body = _curl(p, skewed.url + "/%s/dem.tif" % BUCKET)
        assert status == 403 and b"RequestTimeTooSkewed" in body
        assert skewed.requests and skewed.requests[-1][3], skewed.requests  # it was signed
        hits = p.wait_for_log(lambda l: CRED in l and "RequestTimeTooSkewed" in l, timeout=5)
        assert hits, p.log_text()[-3000:]
        m = re.search(r"by about (\d+) s: it is behind", hits[0])
        assert m and 1190 <= int(m.group(1)) <= 1210, hits[0]
        _no_secret_in(p, "skew-secret-value")
    finally:
        skewed.stop()


def test_web_identity_credentials_from_sts_and_the_token_file_read_again(s3, proxy_factory, tmp_path):
    role = s3.create_web_identity_role()
    token = tmp_path / "token"
    token.write_text("eyJ.first-web-identity-token.sig\n")
    sts = STSRelay(s3, lifetime=6).start()
    try:
        p = proxy_factory(extra_config=harness.cred(
            CRED, "aws-sigv4", s3.relay.url + "/%s/" % BUCKET, region="us-east-1", role_arn=role,
            web_identity_token_file=str(token), sts_endpoint=sts.url, role_session_name="cog-reader-test"))
        url = "%s/%s/tiles.pmtiles" % (s3.relay.url, BUCKET)
        status, head = _curl(p, url, "-r", "0-126")
        assert status == 206 and head[:7] == b"PMTiles", head[:200]
        assert sts.tokens() == ["eyJ.first-web-identity-token.sig"]
        assert sts.exchanges[0]["RoleArn"] == role and sts.exchanges[0]["RoleSessionName"] == "cog-reader-test"
        # One exchange serves every request until the refresh margin before Expiration.
        assert _curl(p, url, "-r", "0-6")[0] == 206
        assert len(sts.tokens()) == 1
        # The projected token is rotated under the proxy: the next exchange reads the new one.
        token.write_text("eyJ.second-web-identity-token.sig\n")
        deadline = time.monotonic() + 15
        while len(sts.tokens()) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            assert _curl(p, url, "-r", "0-6")[0] == 206
        assert sts.tokens() == ["eyJ.first-web-identity-token.sig", "eyJ.second-web-identity-token.sig"]
        assert _curl(p, url, "-r", "0-6")[0] == 206
        secrets = []
        for _, text in sts.answers:
            secrets += re.findall(r"<(?:SecretAccessKey|SessionToken)>([^<]+)<", text)
            secrets += re.findall(r'"(?:SecretAccessKey|SessionToken)"\s*:\s*"([^"]+)"', text)
        assert len(secrets) == 4, sts.answers
        _no_secret_in(p, "first-web-identity-token", "second-web-identity-token", *secrets)
    finally:
        sts.stop()


def test_virtual_host_style_through_a_parent_that_resolves_the_bucket_host(s3, proxy_factory):
    parent = ForwardingProxy("parent", hosts={"cogs.localhost": "127.0.0.1"}).start()
    try:
        host = "cogs.localhost:%d" % s3.port
        p = proxy_factory(env=_env(s3), proxy={"upstream_proxy": "http://" + parent.address},
                          extra_config=_static_cred(s3, "http://%s/" % host))
        status, head = _curl(p, "http://%s/tiles.pmtiles" % host, "-r", "0-126")
        assert status == 206 and head == s3.pmtiles[:127]
        assert "http://%s/tiles.pmtiles" % host in parent.saw("GET")
        _no_secret_in(p, s3.secret_access_key)
    finally:
        parent.stop()
