#!/usr/bin/env python3
"""Load driver of bench/refresh.sh: C concurrent requests (closed loop, one keep-alive connection each) through
authproxy to the ArcGIS test server (Tests/e2e/arcgis/server.py), in two windows of equal length:

- steady: right after the credential's first token was issued, far from its refresh and its expiry;
- expiry: centred on the moment the token falls due: it enters its refresh margin, a tenth of its lifetime
  before it expires (`ahead` refreshes it then, in the background; under `on_demand` it counts as used up then,
  so that is its effective expiry). The window ends at the token's expiry.

For each window: requests, errors, p50 / p99 / max latency (send → last body byte), and the token requests the
server received meanwhile (its /__stats). Single flight means one token request in the expiry window and none in
the steady one. The token fetch's own duration is measured next to it: generateToken posted straight to the
server (as another user, so the proxy's token is untouched) a few times during the steady window, under the same
load; those calls are not counted as the proxy's.

Loopback only; every wait is bounded. Prints a markdown report; exits 1 when the counts are wrong (errors, or a
token request count other than 0 and 1).
"""

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.parse
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_json(url, data=None, timeout=30):
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    with OPENER.open(urllib.request.Request(url, data=body), timeout=timeout) as r:
        return json.loads(r.read())


class Window:
    def __init__(self, name):
        self.name = name
        self.latencies = []
        self.errors = 0
        self.first_error = None
        self.token_requests = None
        self.start = self.end = 0.0

    def pct(self, p):
        if not self.latencies:
            return float("nan")
        s = sorted(self.latencies)
        return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    if length is None:
        raise ValueError("response without Content-Length")
    body = await reader.readexactly(length)
    return status, body


async def worker(proxy, request, state, stop_at):
    host, port = proxy
    reader = writer = None
    try:
        while time.time() < stop_at:
            window = state["window"]
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30)
                t0 = time.time()
                writer.write(request)
                status, body = await asyncio.wait_for(read_response(reader), 60)
                t1 = time.time()
                ok = status == 200 and b'"features"' in body
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                ok, t0, t1 = False, 0, 0
                status, body = repr(e), b""
                if writer is not None:
                    writer.close()
                reader = writer = None
            if window is None:
                if not ok:
                    await asyncio.sleep(0.05)
                continue
            if ok and t0 >= window.start and t1 <= window.end:
                window.latencies.append(t1 - t0)
            elif not ok:
                window.errors += 1
                if window.first_error is None:
                    window.first_error = "%s %s" % (status, body[:200])
                await asyncio.sleep(0.05)
    finally:
        if writer is not None:
            writer.close()


async def probe_token_fetch(server_root, user, password, count, start, end, out):
    """generateToken straight to the server, `count` times spread over [start, end]: its duration under load."""
    loop = asyncio.get_running_loop()
    form = {"username": user, "password": password, "client": "referer", "referer": "app://bench", "f": "json",
            "expiration": "60"}
    for i in range(count):
        at = start + (i + 0.5) * (end - start) / count
        await asyncio.sleep(max(0, at - time.time()))
        t0 = time.time()
        r = await loop.run_in_executor(None, lambda: http_json(server_root + "/tokens/generateToken", form))
        if "token" not in r:
            raise SystemExit("generateToken probe failed: %s" % r)
        out.append(time.time() - t0)


def stats(server):
    return http_json(server + "/__stats")


def issued(server):
    return stats(server)["tokens_issued_total"]


async def run(a):
    host, port = a.proxy.rsplit(":", 1)
    proxy = (host, int(port))
    target = a.url
    u = urllib.parse.urlsplit(target)
    request = ("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: refreshload\r\n\r\n" % (target, u.netloc)).encode()
    server = "%s://%s" % (u.scheme, u.netloc)

    # The first token: one request, then when the server issued it (its clock is this machine's).
    OPENER.open(urllib.request.Request(server + "/__stats/reset", data=b""), timeout=30).read()
    first = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://" + a.proxy}))
    with first.open(target, timeout=60) as r:
        assert r.status == 200, r.status
        r.read()
    st = stats(server)
    assert st["tokens_issued_total"] == 1, st
    issued_at = st["token_request_times"][-1]
    expires = issued_at + a.ttl
    due = expires - a.ttl / 10  # the refresh margin: a tenth of the lifetime (IssuedToken.refreshMargin)

    length = a.window
    steady = Window("steady (no expiry)")
    steady.start = issued_at + 2
    steady.end = steady.start + length
    around = Window("expiry in the window")
    around.start = due - length / 2
    around.end = around.start + length
    if around.start < steady.end + 1:
        raise SystemExit("--ttl %.0f is too short for --window %.0f: the windows overlap" % (a.ttl, length))

    state = {"window": None}
    stop_at = around.end + 0.5
    tasks = []
    for i in range(a.concurrency):  # connections opened in batches, so the listener's backlog is not overrun
        tasks.append(asyncio.create_task(worker(proxy, request, state, stop_at)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)
    probes = []
    for w in (steady, around):
        await asyncio.sleep(max(0, w.start - time.time()))
        before = issued(server)
        state["window"] = w
        if w is steady:
            await probe_token_fetch(u.scheme + "://" + u.netloc + a.server_path, a.probe_user, a.probe_password,
                                    a.probes, w.start + 0.5, w.end - 0.5, probes)
        await asyncio.sleep(max(0, w.end - time.time()))
        state["window"] = None
        w.token_requests = issued(server) - before - (len(probes) if w is steady else 0)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)

    ms = lambda s: "%.1f" % (s * 1000)
    print("| window | requests | errors | p50 (ms) | p99 (ms) | max (ms) | token requests |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for w in (steady, around):
        print("| %s | %d | %d | %s | %s | %s | %d |" % (w.name, len(w.latencies), w.errors, ms(w.pct(0.5)),
                                                       ms(w.pct(0.99)), ms(max(w.latencies, default=0)),
                                                       w.token_requests))
    print()
    print("Token fetch (generateToken straight to the server during the steady window, %d calls): median %s ms, "
          "max %s ms." % (len(probes), ms(statistics.median(probes)), ms(max(probes))))
    grow = around.pct(0.99) - steady.pct(0.99)
    print("p99 with the expiry − p99 without: %s ms (%.2f token fetches)." % (ms(grow), grow / statistics.median(probes)))
    print()
    print("Token lifetime %.0f s: issued at +0, refresh margin from +%.1f s, expiry at +%.1f s; windows: steady "
          "+%.1f…+%.1f s, expiry +%.1f…+%.1f s; %d concurrent connections." % (
              a.ttl, due - issued_at, expires - issued_at, steady.start - issued_at, steady.end - issued_at,
              around.start - issued_at, around.end - issued_at, a.concurrency))
    bad = []
    for w in (steady, around):
        if w.errors:
            bad.append("%s: %d errors, first: %s" % (w.name, w.errors, w.first_error))
    if steady.token_requests != 0:
        bad.append("steady window: %d token requests (expected 0)" % steady.token_requests)
    if around.token_requests != 1:
        bad.append("expiry window: %d token requests (expected 1: single flight)" % around.token_requests)
    for b in bad:
        print("FAILED: " + b)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proxy", required=True, help="HOST:PORT of authproxy")
    ap.add_argument("--url", required=True, help="the secured query URL (through the proxy)")
    ap.add_argument("--server-path", default="/arcgis")
    ap.add_argument("--ttl", type=float, required=True, help="the server's token lifetime (s)")
    ap.add_argument("--window", type=float, default=8, help="length of each window (s)")
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=5)
    ap.add_argument("--probe-user", default="bob")
    ap.add_argument("--probe-password", default="bob-pass")
    a = ap.parse_args()
    sys.exit(asyncio.run(run(a)))


if __name__ == "__main__":
    main()
