"""Token lifecycle through the real binary against the ArcGIS test server (issue 9, part 2): the client never
sees a failure the proxy could absorb, and a token service is never hammered."""
import hashlib
import threading
import time

import pytest
import requests

import harness
from harness import cred
from arcgis import ArcGISServer, federate
from test_credentials import arcgis_cred, via


# ---------------------------------------------------------------------------------------------------------
# Rejection detection: compressed bodies, the unwrapped shape
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("enc,form", [("gzip", "json"), ("deflate", "json"), ("gzip", "unwrapped"), (None, "unwrapped")])
def test_encoded_or_unwrapped_rejection_is_retried(proxy_factory, session, enc, form):
    s = ArcGISServer(role="server", ttl=60, content_encoding=enc).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        url = s.query_url() + "?f=json&__err=" + form
        assert via(p, session, "GET", url).status_code == 200
        s.expire_all()
        s.reset_stats()
        r = via(p, session, "GET", url, headers={"Accept-Encoding": enc or "identity"})
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        log = s.request_log()
        assert [e["outcome"] for e in log] == ["498", "ok"], log
        assert log[0]["content_encoding"] == enc
        st = s.stats()
        assert st["tokens_issued"]["generate_password"] == 1, st
    finally:
        s.stop()


@pytest.mark.parametrize("enc", ["gzip", "deflate"])
def test_encoded_answers_reach_the_client_byte_identical(proxy_factory, session, enc):
    s = ArcGISServer(role="server", ttl=60, content_encoding=enc).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s))
        for path in ["/rest/services/Secure/Points/FeatureServer/0/query?f=json",
                     "/rest/services/Secure/Points/FeatureServer/0/nosuch?f=json"]:  # a 400 error body, not a token error
            r = via(p, session, "GET", s.server_root + path, headers={"Accept-Encoding": enc}, stream=True)
            raw = r.raw.read(decode_content=False)
            assert r.headers["Content-Encoding"] == enc
            assert hashlib.sha256(raw).hexdigest() == s.request_log()[-1]["sent_sha256"]
        assert s.stats()["tokens_issued"]["generate_password"] == 1
    finally:
        s.stop()
