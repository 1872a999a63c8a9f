"""Self-tests of the AWS test servers (no proxy involved, no authproxy binary).

Run from the repo root:  python3 -m pytest Tests/e2e/aws -q -p no:cacheprovider
"""

import datetime
import hashlib
import re
import socket
import threading

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from aws import pmtiles_archive
from aws.counting_relay import CountingRelay
from aws.moto_s3 import MotoS3, moto_available
from aws.skewed_s3 import SkewedS3
from aws.sts_relay import STSRelay

needs_moto = pytest.mark.skipif(not moto_available(), reason="moto[server] is not installed")


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    m = MotoS3(str(tmp_path_factory.mktemp("moto") / "moto.log"), bucket="selftest").start()
    yield m
    m.stop()


def signed_get(url, key_id, secret, token=None, when=None):
    req = AWSRequest(method="GET", url=url, headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"})
    auth = SigV4Auth(Credentials(key_id, secret, token), "s3", "us-east-1")
    if when is not None:
        import unittest.mock as mock
        with mock.patch("botocore.auth.get_current_datetime", return_value=when):
            auth.add_auth(req)
    else:
        auth.add_auth(req)
    return requests.get(url, headers=dict(req.headers), timeout=10)


@needs_moto
def test_moto_checks_every_signature(moto):
    moto.put("k.txt", b"hello")
    url = moto.endpoint + "/selftest/k.txt"
    assert requests.get(url, timeout=10).status_code == 403
    assert signed_get(url, moto.access_key_id, moto.secret_access_key).content == b"hello"
    bad = signed_get(url, moto.access_key_id, "not-the-secret")
    assert bad.status_code == 403 and b"SignatureDoesNotMatch" in bad.content


@needs_moto
def test_sts_relay_hands_out_credentials_moto_accepts(moto):
    moto.put("w.txt", b"web identity")
    role = moto.create_web_identity_role("selftest-role")
    sts = STSRelay(moto, lifetime=30).start()
    try:
        r = requests.post(sts.url, data={"Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15",
                                         "RoleArn": role, "RoleSessionName": "s", "WebIdentityToken": "tok-1"},
                          timeout=10)
        assert r.status_code == 200, r.text
        assert sts.tokens() == ["tok-1"]
        key = re.search(r"<AccessKeyId>([^<]+)<", r.text).group(1)
        secret = re.search(r"<SecretAccessKey>([^<]+)<", r.text).group(1)
        session = re.search(r"<SessionToken>([^<]+)<", r.text).group(1)
        expiration = re.search(r"<Expiration>([^<]+)<", r.text).group(1)
        left = (datetime.datetime.strptime(expiration, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
                - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        assert 25 <= left <= 31, expiration
        url = moto.endpoint + "/selftest/w.txt"
        assert signed_get(url, key, secret, session).content == b"web identity"
        # moto checks the session token that goes with temporary keys (S3's 400 InvalidToken).
        wrong = signed_get(url, key, secret, "other-session")
        assert wrong.status_code == 400 and b"InvalidToken" in wrong.content
    finally:
        sts.stop()


def test_skewed_s3_refuses_requests_outside_fifteen_minutes():
    s = SkewedS3(offset=1200).start()
    try:
        now = datetime.datetime.now(datetime.timezone.utc)
        late = signed_get(s.url + "/b/k", "AKIA", "secret", when=now)
        assert late.status_code == 403
        assert re.search(rb"<Code>RequestTimeTooSkewed</Code>.*<ServerTime>[0-9T:Z-]+</ServerTime>", late.content)
        in_time = signed_get(s.url + "/b/k", "AKIA", "secret", when=now + datetime.timedelta(seconds=1150))
        assert in_time.status_code == 200
        assert requests.get(s.url + "/b/k", timeout=10).status_code == 403  # unsigned
    finally:
        s.stop()


def test_counting_relay_counts_parallel_connections_and_payload_hashes():
    seen = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    both = threading.Barrier(2, timeout=10)

    def answer(c):
        c.recv(65536)
        both.wait()  # neither answers before both connections are open: two at once
        c.sendall(b"ok")
        c.close()

    def serve():
        for _ in range(2):
            c, _ = srv.accept()
            seen.append(c)
            threading.Thread(target=answer, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    relay = CountingRelay(srv.getsockname()[1]).start()
    try:
        a = socket.create_connection(("127.0.0.1", relay.port))
        b = socket.create_connection(("127.0.0.1", relay.port))
        a.sendall(b"PUT /x HTTP/1.1\r\nHost: h\r\nX-Amz-Content-SHA256: abc\r\n\r\n")
        b.sendall(b"GET /y HTTP/1.1\r\nHost: h\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\r\n")
        assert a.recv(10) == b"ok" and b.recv(10) == b"ok"
        assert relay.max_open == 2
        assert sorted(relay.payload_hashes) == ["UNSIGNED-PAYLOAD", "abc"]
    finally:
        relay.stop()
        srv.close()


def test_pmtiles_archive_round_trip():
    tiles = {(0, 0, 0): b"a", (3, 5, 2): b"bb", (3, 2, 5): b"ccc"}
    archive = pmtiles_archive.write(tiles)
    h = pmtiles_archive.read_header(archive)
    assert h["version"] == 3 and h["tile_entries"] == 3
    entries = pmtiles_archive.decode_directory(archive[h["root_offset"]:h["root_offset"] + h["root_length"]])
    for (z, x, y), data in tiles.items():
        tid = pmtiles_archive.zxy_to_tile_id(z, x, y)
        off, length = [(o, n) for t, o, n, _ in entries if t == tid][0]
        assert archive[h["data_offset"] + off:h["data_offset"] + off + length] == data
    # The reference reader, when installed, reads it too.
    try:
        from pmtiles.reader import Reader, MemorySource
        from pmtiles.tile import zxy_to_tileid
    except ImportError:
        return
    r = Reader(MemorySource(archive))
    assert all(r.get(z, x, y) == d for (z, x, y), d in tiles.items())
    assert all(zxy_to_tileid(z, x, y) == pmtiles_archive.zxy_to_tile_id(z, x, y)
               for z in range(4) for x in range(2 ** z) for y in range(2 ** z))
    # Deterministic bytes (gzip without a time stamp): the same tiles make the same archive.
    assert hashlib.sha256(pmtiles_archive.write(tiles)).digest() == hashlib.sha256(archive).digest()
