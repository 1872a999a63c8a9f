"""[cluster] limits shared by the fleet: three real authproxy replicas on one real Redis (Debian's redis-server on
loopback) enforce one rate_limit with scope = "credential" and one daily_quota between them; with Redis stopped
each replica enforces its share (limit ÷ replicas) and says so (log, /status.json, the status page, a metric);
with Redis back the fleet counts together again.

The rate limits use one-hour windows (per_seconds = 3600) so that a phase of the test cannot straddle a window
boundary (the fleet's windows are aligned on the clock): the test waits for the next window when the current one
ends too soon, and likewise for the UTC day of the daily quota."""
import json
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from test_admin import admin_get, samples, start_with_admin, value
from test_fleet import RedisServer
from test_limits import header_cred

STATE_KEY = "cluster-limits-state-key-0123456789"
REPLICAS = 3
FALLBACK_LINE = "Redis cannot be used for the fleet's limits"
BACK_LINE = "Redis reachable again: the fleet's limits are counted together again"

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server (Debian package) is not installed")


class HitOrigin:
    """An origin on 127.0.0.1 that counts the requests it receives by their first path segment."""

    def __init__(self):
        self.lock = threading.Lock()
        self.hits = {}
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                segment = self.path.split("/")[1].split("?")[0]
                with origin.lock:
                    origin.hits[segment] = origin.hits.get(segment, 0) + 1
                body = json.dumps({"path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 256

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, segment):
        with self.lock:
            return self.hits.get(segment, 0)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hit_origin():
    o = HitOrigin()
    yield o
    o.stop()


@pytest.fixture
def redis_server(tmp_path):
    r = RedisServer(tmp_path).start()
    yield r
    r.stop()


def rate(n=30):
    return 'rate_limit = { requests = %d, per_seconds = 3600, scope = "credential" }\n' % n


def start_fleet(proxy_factory, redis, origin):
    config = (
        "[cluster]\nredis = \"%s\"\nreplicas = %d\ntimeout_ms = 2000\n" % (redis.url(), REPLICAS)
        + header_cred("shared", origin.url + "/rate", "k-rate", rate())
        + header_cred("metered", origin.url + "/daily", "k-daily", "daily_quota = 20\n")
        + header_cred("outage", origin.url + "/outage", "k-outage", rate())
        + header_cred("again", origin.url + "/again", "k-again", rate())
    )
    return [start_with_admin(proxy_factory, config, proxy={"state_key": STATE_KEY, "workers": 1})
            for _ in range(REPLICAS)]


def get(p, url):
    s = requests.Session()
    s.trust_env = False
    try:
        r = s.get(url, proxies=p.proxies, timeout=60)
        return r.status_code, r.headers.get("Retry-After"), r.text
    finally:
        s.close()


def spread(fleet, url, n, workers=24):
    """`n` requests at once, request i through replica i mod 3: [(replica index, status, Retry-After, body)]."""
    with ThreadPoolExecutor(workers) as pool:
        answers = list(pool.map(lambda i: get(fleet[i % len(fleet)], url + "/%d" % i), range(n)))
    return [(i % len(fleet),) + a for i, a in enumerate(answers)]


def wait_for_room(period, margin):
    """Sleeps into the next window of `period` seconds when the current one ends within `margin` seconds."""
    left = period - time.time() % period
    if left < margin:
        time.sleep(left + 1)


def status(p):
    return admin_get(p, "/status.json").json()


def limit_of(st, name):
    return next(l for l in st["limits"] if l["name"] == name)


def test_fleet_shares_rate_limit_and_daily_quota_then_falls_back_to_shares(proxy_factory, hit_origin, redis_server):
    wait_for_room(3600, 150)
    wait_for_room(86400, 150)
    fleet = start_fleet(proxy_factory, redis_server, hit_origin)

    # --- one window of 30 per hour for the whole fleet: 90 requests from many clients over three replicas.
    got = spread(fleet, hit_origin.url + "/rate", 90)
    ok = [g for g in got if g[1] == 200]
    limited = [g for g in got if g[1] == 429]
    assert len(ok) + len(limited) == 90, sorted({g[1] for g in got})
    assert hit_origin.count("rate") <= 30
    assert hit_origin.count("rate") == len(ok) == 30, (len(ok), hit_origin.count("rate"))
    assert {g[0] for g in ok} == {0, 1, 2} or len(ok) == 30  # spread over the replicas (the bound is what counts)
    for g in limited:
        assert g[2] is not None and 1 <= int(g[2]) <= 3600, g
        assert "all clients of all replicas together" in g[3], g[3][:300]
    m = [samples(p) for p in fleet]
    assert sum(value(s, "authproxy_rate_limited_total", credential="shared", reason="rate") for s in m) == 60
    assert all(value(s, "authproxy_cluster_limits_fallback") == 0 for s in m)
    assert sum(value(s, "authproxy_cluster_limit_leases_total") for s in m) >= 1
    for p in fleet:
        st = status(p)
        assert st["cluster"]["limits"] == "shared" and st["cluster"]["replicas"] == REPLICAS, st["cluster"]
        assert limit_of(st, "shared")["fleet"] == "fleet"
    # The fleet's count lives in Redis under a name that does not show the credential.
    qkeys = [k for k in redis_server.keys() if k.startswith("authproxy:q:")]
    assert qkeys and not any("shared" in k or "metered" in k for k in qkeys), redis_server.keys()
    assert 30 in [int(redis_server.cli("GET", k).strip() or 0) for k in qkeys]

    # --- a daily quota of 20 for the fleet, counted per UTC day.
    got = spread(fleet, hit_origin.url + "/daily", 45)
    assert hit_origin.count("daily") == len([g for g in got if g[1] == 200]) == 20
    refused = [g for g in got if g[1] == 429]
    assert len(refused) == 25
    midnight = 86400 - int(time.time()) % 86400
    for g in refused:
        assert abs(int(g[2]) - midnight) <= 10, (g[2], midnight)
        assert "Daily quota of credential 'metered' used up" in g[3]
    assert sum(limit_of(status(p), "metered")["dailyQuotaUsed"] >= 20 for p in fleet) >= 1
    for p in fleet:
        assert FALLBACK_LINE not in p.log_text()

    # --- Redis stops: each replica enforces its share, 30 ÷ 3 = 10 per window, and says so.
    redis_server.kill()
    per_replica = []
    for k, p in enumerate(fleet):
        codes = [get(p, hit_origin.url + "/outage/%d-%d" % (k, i)) for i in range(15)]
        per_replica.append([c[0] for c in codes])
        assert all("this replica's share" in c[2] and int(c[1]) >= 1 for c in codes if c[0] == 429), codes[-1]
    assert per_replica == [[200] * 10 + [429] * 5] * REPLICAS, per_replica
    assert hit_origin.count("outage") == 30
    # The fleet's window of "shared" was used up when Redis went: nothing left to share out.
    assert all(get(p, hit_origin.url + "/rate/after")[0] == 429 for p in fleet)
    assert hit_origin.count("rate") == 30
    for p in fleet:
        st = status(p)
        assert st["cluster"]["limits"] == "fallback" and st["cluster"]["limitsProblem"], st["cluster"]
        assert limit_of(st, "outage")["fleet"] == "share" and limit_of(st, "outage")["rateLimitShare"] == 10
        page = admin_get(p, "/").text
        assert "fallback: this replica enforces its share (each limit ÷ 3 replicas)" in page
        row = re.search(r'<tr class="limit" data-scope="credential" data-name="outage">.*?</tr>', page).group(0)
        assert "30/3600s per credential" in row and "this replica's share" in row and "share 10" in row, row
        assert value(samples(p), "authproxy_cluster_limits_fallback") == 1
        # Once per transition, however many requests met it.
        assert p.log_text().count(FALLBACK_LINE) == 1, p.log_text()[-3000:]

    # --- Redis is back (empty: no persistence): after their backoff the replicas count together again.
    redis_server.start()
    deadline = time.time() + 90
    back = set()
    while len(back) < REPLICAS:
        assert time.time() < deadline, [status(p)["cluster"] for p in fleet]
        for k, p in enumerate(fleet):
            if k not in back:
                get(p, hit_origin.url + "/outage/probe")
                if status(p)["cluster"]["limits"] == "shared":
                    back.add(k)
        time.sleep(0.5)
    for p in fleet:
        assert p.log_text().count(BACK_LINE) == 1, p.log_text()[-3000:]
        assert value(samples(p), "authproxy_cluster_limits_fallback") == 0
    # What each replica allowed alone in this window was reported with its first lease.
    counts = [int(redis_server.cli("GET", k).strip() or 0) for k in redis_server.keys() if k.startswith("authproxy:q:")]
    assert max(counts) >= 30, counts
    # A limit the fleet had not touched: one window of 30 again between the three.
    got = spread(fleet, hit_origin.url + "/again", 60)
    assert hit_origin.count("again") == len([g for g in got if g[1] == 200]) == 30
    assert len([g for g in got if g[1] == 429]) == 30


def test_a_batch_of_permits_left_unspent_goes_back_to_the_fleet(proxy_factory, hit_origin, redis_server):
    """200 per hour over 3 replicas: a replica leases 6 permits at a time (a tenth of its share). One request
    spends one; the 5 left unspent go back to Redis's count after the idle time (2 s), so other replicas can have
    them before the window ends."""
    wait_for_room(3600, 60)
    config = ("[cluster]\nredis = \"%s\"\nreplicas = 3\ntimeout_ms = 2000\n" % redis_server.url()
              + header_cred("batch", hit_origin.url + "/batch", "k-batch", rate(200)))
    p = start_with_admin(proxy_factory, config, proxy={"state_key": STATE_KEY, "workers": 1})

    def count():
        keys = [k for k in redis_server.keys() if k.startswith("authproxy:q:")]
        return [int(redis_server.cli("GET", k).strip() or 0) for k in keys]

    assert get(p, hit_origin.url + "/batch/1")[0] == 200
    assert count() == [6], count()
    deadline = time.time() + 20
    while count() != [1]:
        assert time.time() < deadline, count()
        time.sleep(0.2)
    # Leased again when needed.
    assert get(p, hit_origin.url + "/batch/2")[0] == 200
    assert count() == [7], count()
    assert hit_origin.count("batch") == 2
