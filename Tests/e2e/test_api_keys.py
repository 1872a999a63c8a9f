"""API key credentials through the real binary against the ArcGIS test server: two slots, a key the server
invalidates mid-run (the client never sees the 498, the proxy says so once and stays on the other slot), expiry in
`check`, /status.json and /metrics, a key restricted to referrers, the rotation recipe of docs/credentials-arcgis.md,
and never a key in a log line, metric or page."""
from concurrent.futures import ThreadPoolExecutor
import json
import re
import shutil
import signal
import subprocess
import time

import pytest
import requests

import harness
from arcgis import ArcGISServer
from test_admin import admin_get, samples, start_with_admin, value
from test_credentials import via

SWITCH_LINE = "API key rejected by the server: switching to the other slot"


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def key_cred(ags, slots, name="keys", **extra):
    """An api-key credential whose `keys` are `slots`: [(key value or reference, expires epoch s)]."""
    lines = ["", "[[credential]]", 'name = "%s"' % name, 'type = "api-key"',
             "match = [%s]" % json.dumps(ags.server_root)]
    lines.append("keys = [%s]" % ", ".join(
        '{ key = %s, expires = "%s" }' % (json.dumps(k), rfc3339(e)) for k, e in slots))
    for k, v in extra.items():
        lines.append("%s = %s" % (k, json.dumps(v)))
    return "\n".join(lines) + "\n"


@pytest.fixture
def ags():
    s = ArcGISServer(role="server", ttl=60).start()
    yield s
    s.stop()


def slots_seen(ags):
    """(outcome, api_key_slot) of every request the server saw since the last reset."""
    return [(e["outcome"], e.get("api_key_slot")) for e in ags.request_log()]


def assert_no_key_anywhere(p, keys):
    """No key in the proxy's log, /metrics, /status.json or the status page."""
    pages = [p.log_text()]
    if getattr(p, "admin", None):
        pages += [admin_get(p, path).text for path in ("/metrics", "/status.json", "/")]
    for k in keys:
        for text in pages:
            assert k not in text
            assert k[:24] not in text and k[-12:] not in text


def test_invalidated_slot_switches_once_and_the_client_never_sees_the_498(proxy_factory, ags, session, tmp_path):
    k1 = ags.create_api_key("item", 1)
    k2 = ags.create_api_key("item", 2)
    secret = tmp_path / "key2"
    secret.write_text(k2 + "\n")
    later = time.time() + 300 * 86400
    p = start_with_admin(proxy_factory, key_cred(ags, [("${KEY_1}", later), ("file:%s" % secret, later + 86400)]),
                         env={"KEY_1": k1})
    assert via(p, session, "GET", ags.query_url() + "?where=1%3D1&f=json").json()["features"]
    assert slots_seen(ags) == [("ok", 1)]

    ags.invalidate_api_key("item", 1)
    ags.reset_stats()
    # The first request after the invalidation is a POST form (its body is replayed with the other key)...
    r = via(p, session, "POST", ags.query_url(), data={"where": "1=1", "outFields": "*", "f": "json"})
    assert r.status_code == 200 and len(r.json()["features"]) == 3, r.text[:300]
    assert slots_seen(ags) == [("498", 1), ("ok", 2)]
    # ... then curl and requests keep going on slot 2: slot 1 is not tried again.
    for _ in range(3):
        c = harness.curl("-x", p.url, "-o", "-", "-w", "\n%{http_code}", ags.query_url() + "?where=1%3D1&f=json")
        body, _, status = c.stdout.decode().rpartition("\n")
        assert status == "200" and json.loads(body)["features"], c.stdout[:300]
        assert via(p, session, "GET", ags.query_url() + "?f=json").status_code == 200
    assert slots_seen(ags) == [("498", 1), ("ok", 2)] + [("ok", 2)] * 6
    assert [e["reason"] for e in ags.request_log()][0] == "revoked"

    # Loudly, once: one warning naming the credential and the slots, a metric, the status page.
    assert p.wait_for_log(lambda l: SWITCH_LINE in l)
    lines = [l for l in p.log_lines() if SWITCH_LINE in l]
    assert len(lines) == 1, lines
    assert "credential=keys" in lines[0] and "rejected_slot=1" in lines[0] and "slot=2" in lines[0], lines[0]
    smp = samples(p)
    assert value(smp, "authproxy_api_key_rejections_total", credential="keys", slot="1") == 1
    assert value(smp, "authproxy_api_key_slot", credential="keys", slot="1", state="rejected") == 1
    assert value(smp, "authproxy_api_key_slot", credential="keys", slot="2", state="in_use") == 1
    status = admin_get(p, "/status.json").json()
    c = next(c for c in status["credentials"] if c["name"] == "keys")
    assert [(s["slot"], s["state"]) for s in c["keySlots"]] == [(1, "rejected"), (2, "in_use")]
    assert c["keySlots"][0]["rejectedAt"]
    # The kind's own summary (as `check` prints it), never the keys.
    assert c["tokenSource"] == "fixed"
    assert [d["name"] for d in c["details"]] == ["keys"] and "slot 1" in c["details"][0]["value"]
    assert "key slot 1: rejected" in admin_get(p, "/").text
    assert_no_key_anywhere(p, [k1, k2])


def test_ogrinfo_reads_the_layer_across_an_invalidation(proxy_factory, ags):
    if not shutil.which("ogrinfo"):
        pytest.skip("ogrinfo (gdal-bin) not installed")
    k1, k2 = ags.create_api_key("item", 1), ags.create_api_key("item", 2)
    later = time.time() + 300 * 86400
    p = proxy_factory(extra_config=key_cred(ags, [(k1, later), (k2, later)]))
    env = harness.clean_env({"GDAL_HTTP_PROXY": p.authority, "GDAL_HTTP_TIMEOUT": "30", "GDAL_HTTP_MAX_RETRY": "0"})
    url = ags.query_url() + "?where=1%3D1&outFields=*&f=json"
    for step in range(2):
        r = subprocess.run(["ogrinfo", "-ro", "-al", "-so", url], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and "Feature Count: 3" in r.stdout, r.stdout + r.stderr
        if step == 0:
            ags.invalidate_api_key("item", 1)
    outcomes = slots_seen(ags)
    assert ("498", 1) in outcomes and outcomes[-1] == ("ok", 2), outcomes
    assert len([l for l in p.log_lines() if SWITCH_LINE in l]) == 1


def test_both_slots_rejected_is_a_clear_502_until_a_reload_puts_a_new_key_in(proxy_factory, ags, session, tmp_path):
    k1, k2 = ags.create_api_key("item", 1), ags.create_api_key("item", 2)
    later = time.time() + 300 * 86400
    conf_keys = tmp_path / "key1"
    conf_keys.write_text(k1)
    p = proxy_factory(proxy={"watch_config": True},
                      extra_config=key_cred(ags, [("file:%s" % conf_keys, later), (k2, later)]))
    assert p.wait_for_log(lambda l: "watching the configuration for changes" in l)
    ags.invalidate_api_key("item", 1)
    ags.invalidate_api_key("item", 2)
    r = via(p, session, "GET", ags.query_url() + "?f=json")
    assert r.status_code == 502, r.text[:300]
    assert "Credential 'keys'" in r.text and "both of its API keys" in r.text, r.text
    assert k1 not in r.text and k2 not in r.text
    # Still no 498 for the next client: the key rejected longest ago is tried again, the answer is the same 502.
    r = via(p, session, "GET", ags.query_url() + "?f=json")
    assert r.status_code == 502 and "both of its API keys" in r.text
    assert p.wait_for_log(lambda l: "no other slot is usable" in l)

    # A new key in slot 1's secret file: watch_config reloads, and slot 1 is used again (its rejection belonged to
    # the old key).
    k1b = ags.create_api_key("item", 1)
    tmp = tmp_path / "key1.new"
    tmp.write_text(k1b + "\n")
    tmp.rename(conf_keys)
    assert p.wait_for_log(lambda l: "configuration reloaded" in l and "changed=keys" in l, timeout=10)
    ags.reset_stats()
    assert via(p, session, "GET", ags.query_url() + "?f=json").json()["features"]
    assert slots_seen(ags) == [("ok", 1)]
    assert_no_key_anywhere(p, [k1, k2, k1b])


def test_rotation_recipe(proxy_factory, ags, session, tmp_path):
    """docs/credentials-arcgis.md: put the new key in the free slot, reload, invalidate the old one in the portal.
    No request fails at any step."""
    k1 = ags.create_api_key("item", 1)
    later = time.time() + 300 * 86400
    cfg_slot2 = tmp_path / "key2"
    p = proxy_factory(extra_config=key_cred(ags, [(k1, later)]))
    url = ags.query_url() + "?f=json"
    assert via(p, session, "GET", url).status_code == 200
    # 1. a new key in the free slot (slot 2), 2. reload
    k2 = ags.create_api_key("item", 2)
    cfg_slot2.write_text(k2)
    # The new key goes after the old one: the old key stays in use until the portal invalidates it.
    text = re.sub(r"(keys = \[.*)\]$", lambda m: m.group(1) + ', { key = "file:%s", expires = "%s" }]' % (
        cfg_slot2, rfc3339(later + 86400)), p.config_text, count=1, flags=re.M)
    assert "file:%s" % cfg_slot2 in text
    open(p.config_path, "w").write(text)
    p.signal(signal.SIGHUP)
    assert p.wait_for_log(lambda l: "configuration reloaded" in l, timeout=10)
    ags.reset_stats()
    assert via(p, session, "GET", url).status_code == 200
    # 3. invalidate the old key in the portal: the next request goes through on the new one.
    ags.invalidate_api_key("item", 1)
    for _ in range(3):
        r = via(p, session, "GET", url)
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
    seen = slots_seen(ags)
    assert all(o == "ok" or (o, s) == ("498", 1) for o, s in seen), seen
    assert seen[-1] == ("ok", 2)


def test_expiry_in_check_status_and_metrics(proxy_factory, ags, session, tmp_path):
    k1, k2 = ags.create_api_key("item", 1), ags.create_api_key("item", 2)
    expired, soon = time.time() - 3600, time.time() + 5 * 86400 + 600
    conf = key_cred(ags, [(k1, expired), (k2, soon)])
    cfg = tmp_path / "check.toml"
    cfg.write_text('[proxy]\nlisten = ["127.0.0.1:%d"]\nstate_dir = "%s"\n' % (harness.free_port(), tmp_path) + conf)
    r = harness.run_cli(["check", "--config", str(cfg)])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "the API key in slot 1 expired at %s and is not used" % rfc3339(expired) in out, out
    assert "the API key in slot 2 expires at %s (in 5 days)" % rfc3339(soon) in out, out
    assert k1 not in out and k2 not in out

    p = start_with_admin(proxy_factory, conf)
    assert p.wait_for_log(lambda l: "slot 2 expires at" in l and "warning" in l.lower())
    # The expired slot is never sent.
    assert via(p, session, "GET", ags.query_url() + "?f=json").json()["features"]
    assert slots_seen(ags) == [("ok", 2)]
    status = admin_get(p, "/status.json").json()
    c = next(c for c in status["credentials"] if c["name"] == "keys")
    exp = {e["which"]: e for e in c["expiries"] if e["what"] == "key"}
    assert exp["1"]["expiresInSeconds"] < 0 and exp["1"]["dueSoon"] and exp["1"]["expires"] == rfc3339(expired)
    assert 4 * 86400 < exp["2"]["expiresInSeconds"] <= 5 * 86400 + 600 and exp["2"]["dueSoon"]
    assert [(s["slot"], s["state"]) for s in c["keySlots"]] == [(1, "expired"), (2, "in_use")]
    smp = samples(p)
    assert value(smp, "authproxy_credential_expiry_timestamp_seconds", credential="keys", which="1",
                 what="key") == int(expired)
    assert value(smp, "authproxy_credential_expiry_timestamp_seconds", credential="keys", which="2",
                 what="key") == int(soon)
    assert value(smp, "authproxy_api_key_slot", credential="keys", slot="1", state="expired") == 1
    page = admin_get(p, "/").text
    assert "key 1 expired" in page and "key 2 expires in" in page
    assert_no_key_anywhere(p, [k1, k2])


def test_single_expired_key_is_not_sent(proxy_factory, ags, session):
    k = ags.create_api_key("legacy", 1)
    conf = harness.cred("one", "api-key", ags.server_root, key=k) + 'expires = "%s"\n' % rfc3339(time.time() - 60)
    p = proxy_factory(extra_config=conf)
    r = via(p, session, "GET", ags.query_url() + "?f=json")
    assert r.status_code == 502 and "Credential 'one'" in r.text and "expired" in r.text, r.text
    assert ags.request_log() == []
    assert k not in r.text and k not in p.log_text()


def test_referrer_restricted_key_works_whatever_referer_the_client_sends(proxy_factory, ags, session):
    k1 = ags.create_api_key("web", 1, referrers=["https://app.example.com/*"])
    k2 = ags.create_api_key("web", 2)
    later = time.time() + 300 * 86400
    p = proxy_factory(extra_config=key_cred(ags, [(k1, later), (k2, later)], referer="https://app.example.com/maps"))
    for ref in (None, "https://evil.example.com/", "https://app.example.com/other"):
        r = via(p, session, "GET", ags.query_url() + "?f=json", headers={"Referer": ref} if ref else {})
        assert r.status_code == 200 and r.json()["features"], (ref, r.text[:300])
        r = harness.curl("-x", p.url, "-o", "/dev/null", "-w", "%{http_code}",
                         *(["-e", ref] if ref else []), ags.query_url() + "?f=json")
        assert r.stdout == b"200", (ref, r.stdout, r.stderr)
    log = ags.request_log()
    assert {e["referer"] for e in log} == {"https://app.example.com/maps"}
    assert {(e["outcome"], e.get("api_key_slot")) for e in log} == {("ok", 1)}
    assert not [l for l in p.log_lines() if SWITCH_LINE in l]


def test_a_compressed_rejection_is_still_seen(proxy_factory, session):
    """The rejection of a key with a second slot must come back in a coding the proxy reads: br and zstd are taken
    out of the client's Accept-Encoding; a gzip'd 498 is recognised and the request replayed."""
    s = ArcGISServer(role="server", ttl=60, content_encoding="gzip").start()
    try:
        k1, k2 = s.create_api_key("item", 1), s.create_api_key("item", 2)
        later = time.time() + 300 * 86400
        p = proxy_factory(extra_config=key_cred(s, [(k1, later), (k2, later)]))
        s.invalidate_api_key("item", 1)
        r = via(p, session, "GET", s.query_url() + "?f=json", headers={"Accept-Encoding": "gzip, deflate, br, zstd"})
        assert r.status_code == 200 and r.json()["features"], r.text[:300]
        log = s.request_log()
        assert [(e["outcome"], e.get("api_key_slot"), e["content_encoding"]) for e in log] == [
            ("498", 1, "gzip"), ("ok", 2, "gzip")], log
    finally:
        s.stop()


def test_concurrent_requests_at_the_invalidation_switch_once(proxy_factory, ags):
    """Requests in flight with the revoked key are each sent again with the other one; the warning is logged once."""
    k1, k2 = ags.create_api_key("item", 1), ags.create_api_key("item", 2)
    later = time.time() + 300 * 86400
    p = proxy_factory(extra_config=key_cred(ags, [(k1, later), (k2, later)]))
    ags.invalidate_api_key("item", 1)

    def one(_):
        with requests.Session() as s:
            s.trust_env = False
            r = s.get(ags.query_url() + "?f=json", proxies=p.proxies, timeout=30)
            return r.status_code, bool(r.json().get("features"))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(48)))
    assert results == [(200, True)] * 48
    outcomes = slots_seen(ags)
    assert all(o in (("498", 1), ("ok", 2)) for o in outcomes), outcomes
    assert outcomes.count(("ok", 2)) == 48
    assert p.wait_for_log(lambda l: SWITCH_LINE in l)
    assert len([l for l in p.log_lines() if SWITCH_LINE in l]) == 1
