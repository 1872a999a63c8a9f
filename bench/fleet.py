#!/usr/bin/env python3
"""Token requests of a fleet with and without [cluster] (issue 29).

Starts Debian's redis-server and the project's ArcGIS test server (tokens of TTL seconds) on loopback, then N
real authproxy replicas, first without [cluster], then with it, each driven by a light constant load (one
request per replica every INTERVAL seconds) for DURATION seconds; counts generateToken calls at the server and
scales them to an hour. Also times requests: a request on a replica whose token another replica already put in
Redis (a shared-cache miss) against one served from memory.

    python3 bench/fleet.py BINARY [--replicas 10] [--ttl 30] [--duration 60] [--interval 0.5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "Tests", "e2e"))

import requests  # noqa: E402

import harness  # noqa: E402
from arcgis import ArcGISServer  # noqa: E402

STATE_KEY = "bench-fleet-state-key-0123456789"
PASSWORD = "bench-redis-pass"


def start_redis(d):
    port = harness.free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--save", "",
                          "--appendonly", "no", "--requirepass", PASSWORD], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    harness_wait(port)
    return p, port


def harness_wait(port, timeout=10):
    import socket
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("port %d did not open" % port)


def start_replicas(binary, d, ags, n, redis_port):
    procs = []
    for i in range(n):
        port = harness.free_port()
        state = os.path.join(d, "state%d-%d" % (redis_port or 0, i))
        os.makedirs(state, exist_ok=True)
        conf = os.path.join(d, "r%d-%d.conf" % (redis_port or 0, i))
        text = ('[proxy]\nlisten = ["127.0.0.1:%d"]\nstate_dir = "%s"\nstate_key = "%s"\nworkers = 1\n'
                '[log]\nlevel = "warning"\n' % (port, state, STATE_KEY))
        if redis_port:
            text += '[cluster]\nredis = "redis://:%s@127.0.0.1:%d/0"\n' % (PASSWORD, redis_port)
        text += harness.cred("gis", "arcgis-token", ags.server_root, username="alice", password="alice-pass")
        with open(conf, "w") as f:
            f.write(text)
        p = subprocess.Popen([binary, "serve", "--config", conf], stdout=subprocess.DEVNULL,
                             stderr=open(conf + ".log", "w"), env=harness.clean_env())
        harness_wait(port)
        procs.append((p, port))
    return procs


def run_mode(binary, d, ags, n, redis_port, duration, interval):
    replicas = start_replicas(binary, d, ags, n, redis_port)
    time.sleep(1.0)  # [cluster]: let the replicas connect
    before = len([c for c in ags.token_calls() if c["endpoint"].endswith("generateToken")])
    stop = time.time() + duration
    errors = []
    latencies = []

    def drive(port):
        s = requests.Session()
        proxies = {"http": "http://127.0.0.1:%d" % port}
        while time.time() < stop:
            t = time.perf_counter()
            r = s.get(ags.query_url() + "?where=1%3D1&f=json", proxies=proxies, timeout=30)
            latencies.append(time.perf_counter() - t)
            if r.status_code != 200:
                errors.append(r.status_code)
            time.sleep(interval)

    threads = [threading.Thread(target=drive, args=(port,)) for _, port in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    calls = len([c for c in ags.token_calls() if c["endpoint"].endswith("generateToken")]) - before
    for p, _ in replicas:
        p.terminate()
        p.wait(10)
    return calls, errors, latencies


def first_request_times(binary, d, ags, n, redis_port):
    """Time the first request of each replica: the first fetches (a miss everywhere), the others take the token
    from Redis (a shared-cache miss in memory) or, without [cluster], fetch their own."""
    replicas = start_replicas(binary, d, ags, n, redis_port)
    time.sleep(1.0)
    out = []
    for _, port in replicas:
        t = time.perf_counter()
        r = requests.get(ags.query_url() + "?where=1%3D1&f=json", proxies={"http": "http://127.0.0.1:%d" % port},
                         timeout=30)
        out.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, r.text[:200]
    warm = []
    for _, port in replicas:
        t = time.perf_counter()
        requests.get(ags.query_url() + "?where=1%3D1&f=json", proxies={"http": "http://127.0.0.1:%d" % port}, timeout=30)
        warm.append((time.perf_counter() - t) * 1000)
    for p, _ in replicas:
        p.terminate()
        p.wait(10)
    return out, warm


def waiting_times(binary, d, ags, n, redis_port):
    """Every replica asks at once while the token service takes a second: with [cluster] one replica fetches and
    the others wait for its token; without, each fetches its own. Returns the request times (ms)."""
    replicas = start_replicas(binary, d, ags, n, redis_port)
    time.sleep(1.0)
    times = [0.0] * n

    def one(i, port):
        t = time.perf_counter()
        r = requests.get(ags.query_url() + "?where=1%3D1&f=json", proxies={"http": "http://127.0.0.1:%d" % port},
                         timeout=60)
        times[i] = (time.perf_counter() - t) * 1000
        assert r.status_code == 200, r.text[:200]

    threads = [threading.Thread(target=one, args=(i, port)) for i, (_, port) in enumerate(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p, _ in replicas:
        p.terminate()
        p.wait(10)
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--replicas", type=int, default=10)
    ap.add_argument("--ttl", type=float, default=30.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=0.5)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="bench-fleet-")
    redis, rport = start_redis(d)
    try:
        for mode, port in (("without [cluster]", None), ("with [cluster]", rport)):
            ags = ArcGISServer(role="server", ttl=a.ttl).start()
            try:
                calls, errors, lat = run_mode(a.binary, d, ags, a.replicas, port, a.duration, a.interval)
                per_hour = calls * 3600.0 / a.duration
                print("%-18s %2d replicas, token TTL %4.0f s, %3.0f s: %4d token requests (%6.0f per hour), "
                      "%d errors, p50 %.1f ms" % (mode, a.replicas, a.ttl, a.duration, calls, per_hour, len(errors),
                                                   statistics.median(lat) * 1000))
            finally:
                ags.stop()
            ags = ArcGISServer(role="server", ttl=600).start()
            try:
                first, warm = first_request_times(a.binary, d, ags, a.replicas, port)
                print("%-18s first request: replica 1 %.1f ms, replicas 2..%d median %.1f ms; from memory median %.1f ms"
                      % (mode, first[0], a.replicas, statistics.median(first[1:]), statistics.median(warm)))
            finally:
                ags.stop()
            ags = ArcGISServer(role="server", ttl=600, token_delay=1.0).start()
            try:
                times = sorted(waiting_times(a.binary, d, ags, a.replicas, port))
                calls = len([c for c in ags.token_calls() if c["endpoint"].endswith("generateToken")])
                print("%-18s all at once, token service taking 1 s: %d token requests, request times min %.0f ms, "
                      "median %.0f ms, max %.0f ms" % (mode, calls, times[0], statistics.median(times), times[-1]))
            finally:
                ags.stop()
    finally:
        redis.terminate()
        redis.wait(10)


if __name__ == "__main__":
    main()
