"""`refresh = "on_demand"` (issue 36, item 6) through the real binary against the ArcGIS test server: a sidecar
scaled to zero makes no token traffic while no request needs a token, and pays one token request on the first
request after expiry; without it (`"ahead"`, the default) a request inside the refresh margin is answered with the
token held while a refresh runs in the background, as before."""
import time

import pytest

from arcgis import ArcGISServer
from test_credentials import arcgis_cred, via


def _calls(s):
    return len(s.token_calls("server.generateToken"))


def _wait_for(pred, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.mark.parametrize("where", ["credential", "proxy"])
def test_on_demand_idle_proxy_asks_for_no_token_across_expiries(proxy_factory, session, where):
    s = ArcGISServer(role="server", ttl=3).start()
    try:
        if where == "credential":
            p = proxy_factory(extra_config=arcgis_cred(s, refresh="on_demand"))
        else:
            p = proxy_factory(proxy={"refresh": "on_demand"}, extra_config=arcgis_cred(s))
        r = via(p, session, "GET", s.query_url() + "?f=json")
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        assert _calls(s) == 1
        s.reset_stats()
        # Idle across three token lifetimes: nothing goes to the token service.
        time.sleep(10)
        assert _calls(s) == 0, s.token_calls()
        # The first request after expiry: exactly one token request, in its own time, and it succeeds.
        r = via(p, session, "GET", s.query_url() + "?f=json")
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        assert _calls(s) == 1, s.token_calls()
        assert [e["status"] for e in s.request_log() if "FeatureServer" in e["path"]] == [200]
        time.sleep(1.5)
        assert _calls(s) == 1, s.token_calls()
        assert "alice-pass" not in p.log_text()
    finally:
        s.stop()


@pytest.mark.parametrize("mode", ["ahead", "on_demand"])
def test_a_request_inside_the_refresh_margin(proxy_factory, session, mode):
    # 12 s tokens: the refresh margin is their last 1.2 s (10 % of the lifetime).
    s = ArcGISServer(role="server", ttl=12).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s, refresh=mode))
        url = s.query_url() + "?f=json"
        assert via(p, session, "GET", url).status_code == 200
        issued = time.time()
        first = [e["token"] for e in s.request_log() if "FeatureServer" in e["path"]][-1]
        assert _calls(s) == 1
        time.sleep(max(0.0, issued + 11.4 - time.time()))  # inside the margin, before expiry
        r = via(p, session, "GET", url)
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        calls_when_answered = _calls(s)
        carried = [e["token"] for e in s.request_log() if "FeatureServer" in e["path"]][-1]
        if mode == "ahead":
            # Today's behaviour: the token held serves the request; its refresh runs in the background.
            assert carried == first
            assert _wait_for(lambda: _calls(s) == 2), s.token_calls()
        else:
            # On demand: the request waited for one new token; nothing is left running after it.
            assert carried != first
            assert calls_when_answered == 2, s.token_calls()
            time.sleep(1.5)
            assert _calls(s) == 2, s.token_calls()
    finally:
        s.stop()


def test_prefetch_keeps_fetching_while_idle_and_cannot_be_on_demand(proxy_factory, session, tmp_path):
    # The background traffic on_demand removes: prefetch refreshes with no request at all.
    s = ArcGISServer(role="server", ttl=3).start()
    try:
        proxy_factory(extra_config=arcgis_cred(s, prefetch=True))
        assert _wait_for(lambda: _calls(s) >= 3, timeout=12), s.token_calls()
    finally:
        s.stop()
    import harness
    conf = tmp_path / "both.conf"
    conf.write_text('[proxy]\nlisten = ["127.0.0.1:0"]\nrefresh = "on_demand"\n'
                    + arcgis_cred(s, prefetch=True))
    r = harness.run_cli(["check", "--config", str(conf)])
    assert r.returncode != 0
    assert "prefetch" in r.stderr and "on_demand" in r.stderr, r.stderr


def test_on_demand_after_a_token_service_outage_sends_no_probe(proxy_factory, session):
    s = ArcGISServer(role="server", ttl=60).start()
    try:
        p = proxy_factory(extra_config=arcgis_cred(s, refresh="on_demand"))
        s.set_token_service(mode="error")
        r = via(p, session, "GET", s.query_url() + "?f=json")
        assert r.status_code == 502, r.text[:300]
        # A request during the backoff is answered at once; no probe follows when the backoff ends.
        r = via(p, session, "GET", s.query_url() + "?f=json")
        assert r.status_code == 502
        assert _calls(s) == 1, s.token_calls()
        s.set_token_service(mode="ok")
        time.sleep(3.5)
        assert _calls(s) == 1, s.token_calls()
        # The next request asks, and succeeds.
        r = via(p, session, "GET", s.query_url() + "?f=json")
        assert r.status_code == 200, r.text[:300]
        assert _calls(s) == 2, s.token_calls()
    finally:
        s.stop()
