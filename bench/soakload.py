#!/usr/bin/env python3
"""Load generator, sampler and verdict of bench/soak.sh (standard library only; loopback only).

Sends a light, steady mix of requests through authproxy for a given time, reads the proxy's VmRSS, open fds
and threads from /proc every few seconds into a TSV, and prints the curve, the counts and the verdict at the
end. Exit status 0 = PASS, 1 = FAIL. The rule is in bench/soak.sh's header (and `verdict()` below).

Traffic (rates scale with --rate; the light kinds share what the heavy ones leave):
  query_get     GET  <arcgis>/…/FeatureServer/0/query?where=1%3D1&f=json   arcgis-token, token in the query
  query_post    POST the same query urlencoded                              arcgis-token, token in the form
  plain_get     GET  <origin>/small.json or /echo?f=json (token checked)    api-key
  https_get     GET  https://localhost:P/small.json or /echo, via CONNECT   interception + server-trust + api-key
  download      GET  <origin>/dl.bin (4 MiB), length checked                api-key
  upload_arcgis POST 3 MiB to <arcgis>/…/upload, Content-Length / chunked   arcgis-token (replay spill file)
  upload_origin POST 2 MiB to <origin>/upload, Content-Length / chunked     api-key
  abort         GET  <origin>/big.bin (32 MiB), read 64 KiB-1 MiB, close or RST
and every --expire-seconds a POST /__admin/expire to the test server (straight, not through the proxy), so
the proxy's next requests get 498 and must refresh and replay. Client connections are kept alive and
reopened every 20-200 requests.
"""

import argparse
import collections
import http.client
import json
import os
import random
import socket
import ssl
import statistics
import struct
import sys
import threading
import time
import urllib.parse
import urllib.request

KIB = 1024
MIB = 1024 * 1024
DOWNLOAD_BYTES = 4 * MIB
ABORT_FILE_BYTES = 32 * MIB
UPLOAD_ARCGIS_BYTES = 3 * MIB
UPLOAD_ORIGIN_BYTES = 2 * MIB
SMALL_BYTES = 2023
TIMEOUT = 30.0


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by = collections.Counter()        # (kind, outcome) -> n; outcome is the status or a label
        self.errors = collections.Counter()    # (kind, description) -> n
        self.first_error = {}                  # (kind, description) -> first detail
        self.late = collections.Counter()      # kind -> schedule slots skipped (the generator fell behind)
        self.total = 0

    def ok(self, kind, outcome):
        with self.lock:
            self.by[(kind, outcome)] += 1
            self.total += 1

    def error(self, kind, desc, detail="", outcome=None):
        with self.lock:
            self.by[(kind, outcome if outcome is not None else desc)] += 1
            self.errors[(kind, desc)] += 1
            self.first_error.setdefault((kind, desc), detail[:300])
            self.total += 1


class Stop:
    def __init__(self):
        self.ev = threading.Event()

    def wait(self, s):
        return self.ev.wait(max(0.0, s))

    @property
    def set(self):
        return self.ev.is_set()


def proc_figures(pid):
    st = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.strip()
    kb = lambda k: int(st[k].split()[0]) if k in st else -1
    fds = len(os.listdir("/proc/%d/fd" % pid))
    with open("/proc/%d/stat" % pid) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12])
    return {"rss_kb": kb("VmRSS"), "anon_kb": kb("RssAnon"), "hwm_kb": kb("VmHWM"),
            "fds": fds, "threads": int(st.get("Threads", "-1")), "cpu_ticks": ticks,
            "minflt": int(fields[7])}


class Client:
    """One keep-alive client connection to the proxy (plain, or a CONNECT tunnel with TLS inside)."""

    def __init__(self, args, tunnel=None):
        self.args, self.tunnel = args, tunnel
        self.conn, self.left = None, 0

    def get(self):
        if self.conn is None or self.left <= 0:
            self.close()
            if self.tunnel:
                ctx = ssl.create_default_context(cafile=self.args.ca)
                c = http.client.HTTPSConnection(self.args.proxy_host, self.args.proxy_port,
                                                timeout=TIMEOUT, context=ctx)
                c.set_tunnel(*self.tunnel)
            else:
                c = http.client.HTTPConnection(self.args.proxy_host, self.args.proxy_port, timeout=TIMEOUT)
            self.conn, self.left = c, random.randint(20, 200)
        self.left -= 1
        return self.conn

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def request(self, method, url, body=None, headers=None, sink=False):
        """-> (status, body bytes or length when sink). The connection is dropped after any error."""
        c = self.get()
        try:
            c.request(method, url, body=body, headers=headers or {})
            r = c.getresponse()
            if sink:
                n = 0
                while True:
                    b = r.read(256 * KIB)
                    if not b:
                        break
                    n += len(b)
                data = n
            else:
                data = r.read()
            if r.will_close:
                self.close()
            return r.status, data
        except BaseException:
            self.close()
            raise


def chunks(data, size=64 * KIB):
    for i in range(0, len(data), size):
        yield data[i:i + size]


class Load:
    def __init__(self, args, counts, stop):
        self.a, self.c, self.stop = args, counts, stop
        self.arcgis = args.arcgis.rstrip("/")
        self.origin = args.origin.rstrip("/")
        self.query = self.arcgis + "/arcgis/rest/services/Secure/Points/FeatureServer/0/query"
        self.upload = self.arcgis + "/arcgis/rest/services/Secure/Uploads/GPServer/upload"
        self.up_arcgis = os.urandom(UPLOAD_ARCGIS_BYTES)
        self.up_origin = os.urandom(UPLOAD_ORIGIN_BYTES)
        self.token_mark = ("token=" + args.api_key).encode()

    # -- one request of each kind: returns nothing, records the outcome -----------------------------------
    def _json_ok(self, kind, status, body):
        if status != 200:
            self.c.error(kind, "status %d" % status, body[:200].decode("latin-1"), outcome=status)
        elif b'"features"' not in body:
            self.c.error(kind, "200 without features (token error passed through?)",
                         body[:200].decode("latin-1"), outcome="200-bad-body")
        else:
            self.c.ok(kind, 200)

    def query_get(self, cl, n):
        st, body = cl.request("GET", self.query + "?where=1%%3D1&outFields=*&f=json&n=%d" % n)
        self._json_ok("query_get", st, body)

    def query_post(self, cl, n):
        form = "where=1%%3D1&outFields=*&returnGeometry=true&f=json&n=%d" % n
        st, body = cl.request("POST", self.query, body=form.encode(),
                              headers={"Content-Type": "application/x-www-form-urlencoded"})
        self._json_ok("query_post", st, body)

    def _small_or_echo(self, kind, cl, base, n):
        if n % 4 == 0:   # every 4th: the origin echoes the query it got, so injection is checked
            st, body = cl.request("GET", base + "/echo?f=json")
            if st != 200:
                self.c.error(kind, "status %d" % st, body[:200].decode("latin-1"), outcome=st)
            elif self.token_mark not in body:
                self.c.error(kind, "echo without the api key", body[:200].decode("latin-1"), outcome="200-no-key")
            else:
                self.c.ok(kind, 200)
            return
        st, body = cl.request("GET", base + "/small.json")
        if st != 200:
            self.c.error(kind, "status %d" % st, body[:200].decode("latin-1"), outcome=st)
        elif len(body) != SMALL_BYTES:
            self.c.error(kind, "wrong length %d" % len(body), outcome="200-short")
        else:
            self.c.ok(kind, 200)

    def plain_get(self, cl, n):
        self._small_or_echo("plain_get", cl, self.origin, n)

    def https_get(self, cl, n):
        self._small_or_echo("https_get", cl, "", n)   # origin-form inside the tunnel

    def download(self, cl, n):
        st, length = cl.request("GET", self.origin + "/dl.bin", sink=True)
        if st != 200:
            self.c.error("download", "status %d" % st, outcome=st)
        elif length != DOWNLOAD_BYTES:
            self.c.error("download", "wrong length %d" % length, outcome="200-short")
        else:
            self.c.ok("download", 200)

    def upload_arcgis(self, cl, n):
        chunked = n % 2 == 1
        body = chunks(self.up_arcgis) if chunked else self.up_arcgis
        hdrs = {"Content-Type": "application/octet-stream"}   # an iterator body: http.client sends it chunked
        st, data = cl.request("POST", self.upload + "?f=json", body=body, headers=hdrs)
        kind = "upload_arcgis"
        if st != 200:
            self.c.error(kind, "status %d" % st, data[:200].decode("latin-1"), outcome=st)
            return
        try:
            doc = json.loads(data)
        except ValueError:
            doc = {}
        if doc.get("size") != len(self.up_arcgis) or not doc.get("token_seen"):
            self.c.error(kind, "bad upload answer", data[:200].decode("latin-1"), outcome="200-bad-body")
        else:
            self.c.ok(kind, 200)

    def upload_origin(self, cl, n):
        chunked = n % 2 == 1
        body = chunks(self.up_origin) if chunked else self.up_origin
        hdrs = {"Content-Type": "application/octet-stream"}   # an iterator body: http.client sends it chunked
        st, data = cl.request("POST", self.origin + "/upload", body=body, headers=hdrs)
        if st != 200:
            self.c.error("upload_origin", "status %d" % st, data[:200].decode("latin-1"), outcome=st)
        elif self.token_mark not in data:
            self.c.error("upload_origin", "upload without the api key", data[:200].decode("latin-1"),
                         outcome="200-no-key")
        else:
            self.c.ok("upload_origin", 200)

    def abort(self, cl, n):
        """A client that goes away mid-download: read part of a 32 MiB body, then close (or RST)."""
        s = socket.create_connection((self.a.proxy_host, self.a.proxy_port), timeout=TIMEOUT)
        try:
            host = urllib.parse.urlsplit(self.origin).netloc
            s.sendall(("GET %s/big.bin HTTP/1.1\r\nHost: %s\r\n\r\n" % (self.origin, host)).encode())
            want, got, head = random.randint(64 * KIB, MIB), 0, b""
            while got < want:
                b = s.recv(64 * KIB)
                if not b:
                    break
                if not head:
                    head = b[:12]
                got += len(b)
            if not head.startswith(b"HTTP/1.1 200"):
                self.c.error("abort", "status line %r" % head, outcome="bad-head")
                return
            if n % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # RST
                self.c.ok("abort", "reset after %s" % ("<256K" if got < 256 * KIB else ">=256K"))
            else:
                self.c.ok("abort", "closed after %s" % ("<256K" if got < 256 * KIB else ">=256K"))
        finally:
            s.close()

    # -- paced lanes ----------------------------------------------------------------------------------------
    def lane(self, kind, rate, tunnel=None):
        """Calls kind's method `rate` times a second on one keep-alive client; never bursts to catch up."""
        fn = getattr(self, kind)
        cl = Client(self.a, tunnel)
        period = 1.0 / rate
        nxt = time.monotonic() + random.random() * period
        n = 0
        while not self.stop.set:
            now = time.monotonic()
            if now < nxt:
                if self.stop.wait(nxt - now):
                    break
            elif now - nxt > 1.0:                  # fell behind by more than a second: skip, count it
                skipped = int((now - nxt) / period)
                with self.c.lock:
                    self.c.late[kind] += skipped
                nxt += skipped * period
            nxt += period
            n += 1
            try:
                fn(cl, n)
            except Exception as e:   # connection error, timeout, TLS failure: all errors
                self.c.error(kind, type(e).__name__, repr(e), outcome="exception")
        cl.close()


def expirer(args, stop, state):
    """POST /__admin/expire every --expire-seconds, straight to the test server."""
    while not stop.wait(args.expire_seconds):
        try:
            req = urllib.request.Request(args.arcgis.rstrip("/") + "/__admin/expire", data=b"what=access",
                                         method="POST")
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=10) as r:
                r.read()
            state["expiries"] += 1
        except Exception as e:
            state["expire_errors"] += 1
            print("expire failed: %r" % e, file=sys.stderr)


def arcgis_stats(args):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(args.arcgis.rstrip("/") + "/__stats", timeout=10) as r:
        return json.loads(r.read())


def lanes_for(rate):
    """[(kind, rate per lane, lanes)]: heavy kinds at fixed rates scaled by rate/180, light ones the rest."""
    k = rate / 180.0
    heavy = [("download", 1.0 * k, 1), ("upload_arcgis", 0.5 * k, 1), ("upload_origin", 0.5 * k, 1),
             ("abort", 0.2 * k, 1)]
    rest = rate - sum(r for _, r, _ in heavy)
    light = [("query_get", 0.34, 3), ("query_post", 0.16, 2), ("plain_get", 0.25, 2), ("https_get", 0.25, 3)]
    out = [(kind, rest * share / n, n) for kind, share, n in light]
    return out + [(kind, r, n) for kind, r, n in heavy]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def verdict(samples, warmup_s, rss_growth_limit=0.10):
    """The rule stated in bench/soak.sh. -> (pass, lines)."""
    post = [s for s in samples if s["t"] >= warmup_s]
    lines, ok = [], True
    if len(post) < 2:
        return False, ["too few samples after the warm-up (%d): run longer or sample more often" % len(post)]
    k = max(1, min(3, len(post) // 3))
    head, tail = post[:k], post[-k:]
    base = median([s["rss_kb"] for s in head])
    end = median([s["rss_kb"] for s in tail])
    growth = (end - base) / base
    good = growth <= rss_growth_limit
    ok &= good
    lines.append("RSS   %s  after warm-up %.1f MB (median of first %d samples from %.0f s), end %.1f MB "
                 "(median of last %d): %+.1f %% (limit +%.0f %%)"
                 % ("ok  " if good else "FAIL", base / 1024, k, post[0]["t"], end / 1024, k, growth * 100,
                    rss_growth_limit * 100))
    for key in ("fds", "threads"):
        hi = max(s[key] for s in head)
        lo = min(s[key] for s in tail)
        good = lo <= hi
        ok &= good
        lines.append("%-7s %s  min of last %d samples %d vs max of first %d after warm-up %d"
                     % (key, "ok  " if good else "FAIL", k, lo, k, hi))
    return ok, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proxy", required=True, help="HOST:PORT of authproxy")
    ap.add_argument("--pid", type=int, required=True, help="authproxy's pid (sampled from /proc)")
    ap.add_argument("--arcgis", required=True, help="http://127.0.0.1:PORT of the ArcGIS test server")
    ap.add_argument("--origin", required=True, help="http://127.0.0.1:PORT of the plain origin")
    ap.add_argument("--https-port", type=int, required=True, help="port of the https origin (localhost:PORT)")
    ap.add_argument("--ca", required=True, help="authproxy's CA certificate (clients trust it)")
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--rate", type=float, default=180)
    ap.add_argument("--sample-seconds", type=float, default=30)
    ap.add_argument("--warmup-minutes", type=float, default=None,
                    help="default: 5, or a third of the run when that is shorter")
    ap.add_argument("--expire-seconds", type=float, default=60)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    a.proxy_host, _, p = a.proxy.rpartition(":")
    a.proxy_port = int(p)
    duration = a.minutes * 60
    warmup = (a.warmup_minutes * 60) if a.warmup_minutes is not None else min(300.0, duration / 3)
    os.makedirs(a.out, exist_ok=True)

    counts, stop = Counts(), Stop()
    load = Load(a, counts, stop)
    exp_state = collections.Counter()
    threads = []
    plan = lanes_for(a.rate)
    for kind, r, n in plan:
        for _ in range(n):
            tunnel = ("localhost", a.https_port) if kind == "https_get" else None
            threads.append(threading.Thread(target=load.lane, args=(kind, r, tunnel), daemon=True))
    threads.append(threading.Thread(target=expirer, args=(a, stop, exp_state), daemon=True))

    tsv_path = os.path.join(a.out, "samples.tsv")
    tsv = open(tsv_path, "w")
    cols = ["t_s", "rss_kb", "anon_kb", "fds", "threads", "cpu_s", "minflt", "requests", "req_per_s",
            "tokens_issued", "rejected_498", "errors"]
    tsv.write("\t".join(cols) + "\n")
    clk = os.sysconf("SC_CLK_TCK")
    samples = []

    def sample(t, last):
        f = proc_figures(a.pid)
        try:
            st = arcgis_stats(a)
            tok, rej = st.get("tokens_issued_total", -1), st.get("rejected_498", -1)
        except Exception:
            tok = rej = -1
        with counts.lock:
            total, errs = counts.total, sum(counts.errors.values())
        rps = (total - last["req"]) / max(1e-9, t - last["t"]) if samples else 0.0
        s = dict(t=t, rss_kb=f["rss_kb"], anon_kb=f["anon_kb"], fds=f["fds"], threads=f["threads"],
                 cpu_s=f["cpu_ticks"] / clk, minflt=f["minflt"], requests=total, rps=rps, tokens=tok, rej=rej,
                 errors=errs)
        last.update(req=total, t=t)
        tsv.write("%.0f\t%d\t%d\t%d\t%d\t%.1f\t%d\t%d\t%.1f\t%d\t%d\t%d\n" % (
            t, s["rss_kb"], s["anon_kb"], s["fds"], s["threads"], s["cpu_s"], s["minflt"], total, rps, tok, rej,
            errs))
        tsv.flush()
        print("[soak] t=%5.0fs rss=%6.1f MB anon=%6.1f MB fds=%3d threads=%2d cpu=%6.1fs minflt=%d req=%7d (%.0f/s) "
              "tokens=%d 498s=%d errors=%d" % (t, s["rss_kb"] / 1024, s["anon_kb"] / 1024, s["fds"], s["threads"],
                                               s["cpu_s"], s["minflt"], total, rps, tok, rej, errs), flush=True)
        return s

    print("[soak] %d lanes: %s" % (len(threads) - 1, ", ".join("%s %.1f/s x%d" % (k, r, n) for k, r, n in plan)),
          flush=True)
    t0 = time.monotonic()
    last = {"req": 0, "t": 0.0}
    samples.append(sample(0.0, last))
    for th in threads:
        th.start()
    next_sample = a.sample_seconds
    while True:
        now = time.monotonic() - t0
        if now >= duration:
            break
        stop.wait(min(next_sample, duration) - now)
        now = time.monotonic() - t0
        if now >= next_sample - 0.01:
            samples.append(sample(now, last))
            next_sample += a.sample_seconds
        try:
            os.kill(a.pid, 0)
        except OSError:
            print("[soak] authproxy (pid %d) is gone" % a.pid, flush=True)
            break
    if samples[-1]["t"] < duration - 1 and os.path.exists("/proc/%d" % a.pid):
        samples.append(sample(time.monotonic() - t0, last))
    elapsed = time.monotonic() - t0
    stop.ev.set()
    for th in threads:
        th.join(TIMEOUT + 5)
    alive = os.path.exists("/proc/%d" % a.pid)
    quiet = None
    if alive:
        time.sleep(10)   # load stopped, clients gone (an unwoken libdispatch worker exits after 5 s): what the proxy holds at rest
        quiet = proc_figures(a.pid)
    tsv.close()
    try:
        st = arcgis_stats(a)
    except Exception as e:
        st = {"error": repr(e)}

    # -- report ----------------------------------------------------------------------------------------------
    out = []
    P = out.append
    P("# authproxy soak: %.1f min at %.0f req/s target (sample every %.0f s, warm-up %.1f min)"
      % (a.minutes, a.rate, a.sample_seconds, warmup / 60))
    P("")
    P("## Curve (every sample)")
    P("")
    P("| t (min) | RSS MB | RssAnon MB | fds | threads | CPU s | req/s | tokens issued | 498s | errors |")
    P("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in samples:
        P("| %.1f | %.1f | %.1f | %d | %d | %.0f | %.0f | %d | %d | %d |" % (
            s["t"] / 60, s["rss_kb"] / 1024, s["anon_kb"] / 1024, s["fds"], s["threads"], s["cpu_s"], s["rps"],
            s["tokens"], s["rej"], s["errors"]))
    if quiet:
        P("| rest (10 s after load) | %.1f | %.1f | %d | %d | %.0f | | | | |" % (
            quiet["rss_kb"] / 1024, quiet["anon_kb"] / 1024, quiet["fds"], quiet["threads"],
            quiet["cpu_ticks"] / clk))
    P("")
    P("## Requests")
    P("")
    kinds = sorted({k for k, _ in counts.by})
    with counts.lock:
        total = counts.total
        P("%d requests in %.0f s (%.1f/s); by kind and outcome:" % (total, elapsed, total / max(1, elapsed)))
        P("")
        for kind in kinds:
            outs = sorted(((o, n) for (k, o), n in counts.by.items() if k == kind), key=lambda x: str(x[0]))
            P("- %-13s %7d  %s%s" % (kind, sum(n for _, n in outs), ", ".join("%s: %d" % (o, n) for o, n in outs),
                                      ("  (fell behind: %d slots skipped)" % counts.late[kind])
                                      if counts.late[kind] else ""))
        nerr = sum(counts.errors.values())
        P("")
        P("Forced expiries: %d (failed: %d)" % (exp_state["expiries"], exp_state["expire_errors"]))
        if "error" not in st:
            P("Test server: tokens issued %s (%s), token requests %d, token failures %s, rejected 498: %s, 499: %s,"
              " accepted %s, connections %s, upload bytes %s"
              % (st.get("tokens_issued_total"), json.dumps(st.get("tokens_issued")),
                 len(st.get("token_requests", [])), st.get("token_failures_total"), st.get("rejected_498"),
                 st.get("rejected_499"), st.get("accepted"), st.get("connections"), st.get("upload_bytes")))
        else:
            P("Test server stats unavailable: %s" % st["error"])
        P("")
        P("Errors: %d" % nerr)
        for (kind, desc), n in sorted(counts.errors.items()):
            P("- %s: %s x%d, first: %s" % (kind, desc, n, counts.first_error[(kind, desc)]))
    P("")
    P("## Verdict")
    P("")
    ok, vlines = verdict(samples, warmup)
    for l in vlines:
        P("- " + l)
    if not alive:
        ok = False
        P("- FAIL  authproxy exited during the soak")
    if nerr:
        ok = False
        P("- FAIL  %d requests failed (unexpected status, wrong body, or connection error)" % nerr)
    else:
        P("- ok    no request failed")
    if total < 0.8 * a.rate * elapsed:
        P("- note  the generator reached %.0f %% of the target rate" % (100 * total / (a.rate * elapsed)))
    P("")
    P("**%s**" % ("PASS" if ok else "FAIL"))
    text = "\n".join(out) + "\n"
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(text)
    with open(os.path.join(a.out, "arcgis-stats.json"), "w") as f:
        json.dump(st, f, indent=1)
    print(text, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:   # a crash of the generator is not a FAIL verdict (exit 1)
        import traceback
        traceback.print_exc()
        sys.exit(3)
