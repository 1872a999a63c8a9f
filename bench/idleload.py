#!/usr/bin/env python3
"""Idle keep-alive connections: what each one costs a server in resident memory.

Used by bench/idle.sh. Against one server process (PID, listening on 127.0.0.1) it:

  1. warms up: WINDOW connections, one exchange each, closed (so libcurl's handles, upstream pool and
     code pages exist before the baseline);
  2. reads the server's RSS (VmRSS, RssAnon from /proc/PID/status) after it settles: "before";
  3. opens CONNS connections and sends nothing; waits until the server holds them all (its fd count),
     lets it settle, reads RSS: "bare";
  4. sends one GET on each of them (at most WINDOW in flight), reads and checks each response (status 200,
     body size), and keeps every connection open and idle; lets the server settle, reads RSS: "idle";
  5. checks that the server closed none of them, then closes them all.

Per-connection cost = (RSS at the phase − RSS before) ÷ CONNS. Prints one JSON object on stdout.
Every address is loopback; the run is bounded in connections and time.
"""
import argparse
import json
import os
import selectors
import socket
import subprocess
import sys
import time


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                out[k] = int(v.split()[0])
    return out


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle(pid, seconds):
    """Waits `seconds`, then reads RSS twice a second apart until two reads agree within 64 kB (at most
    10 s more); returns the last status and the reads taken."""
    time.sleep(seconds)
    reads = [proc_status(pid)]
    for _ in range(10):
        time.sleep(1)
        reads.append(proc_status(pid))
        if abs(reads[-1]["VmRSS"] - reads[-2]["VmRSS"]) <= 64:
            break
    return reads[-1], [r["VmRSS"] for r in reads]


def log(msg):
    print(f"[idleload {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True, help="host:port the load connects to (127.x only)")
    ap.add_argument("--origin", required=True, help="host:port of the origin (Host header, absolute URL)")
    ap.add_argument("--mode", choices=("forward", "direct"), required=True,
                    help="forward: absolute-form request line; direct: origin-form")
    ap.add_argument("--pid", type=int, required=True, help="server process whose RSS is read")
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--window", type=int, default=32, help="requests in flight at most (and warm-up connections)")
    ap.add_argument("--path", default="/small.json")
    ap.add_argument("--expect-bytes", type=int, required=True, help="body size every response must have")
    ap.add_argument("--sources", type=int, default=0,
                    help="number of source addresses 127.0.0.1, 127.0.0.2, ... (0: one per 20,000 connections)")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds to wait before reading RSS")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds in all")
    ap.add_argument("--header-bytes", type=int, default=0,
                    help="add an X-Pad header of this many bytes to each request (browser-sized heads)")
    ap.add_argument("--read-delay", type=float, default=0.0,
                    help="seconds to wait after sending a request before reading its response (a slow reader: the "
                         "server has to queue the response)")
    ap.add_argument("--on-idle", default="",
                    help="shell command run once every connection is idle, before they are closed (e.g. to "
                         "snapshot a heap profile)")
    a = ap.parse_args()

    host, port = a.server.rsplit(":", 1)
    port = int(port)
    if not host.startswith("127."):
        sys.exit("idleload: loopback servers only")
    deadline = time.monotonic() + a.timeout
    nsrc = a.sources or (a.conns + 19999) // 20000
    sources = [f"127.0.0.{i + 1}" for i in range(nsrc)]
    target = f"http://{a.origin}{a.path}" if a.mode == "forward" else a.path
    pad = f"X-Pad: {'p' * a.header_bytes}\r\n" if a.header_bytes > 0 else ""
    req = f"GET {target} HTTP/1.1\r\nHost: {a.origin}\r\nUser-Agent: idleload\r\n{pad}\r\n".encode()

    def connect(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if nsrc > 1 or sources[0] != "127.0.0.1":
            s.bind((sources[i % nsrc], 0))
        s.settimeout(10)
        s.connect((host, port))
        s.setblocking(False)
        return s

    def exchange_all(socks):
        """One request on each socket, at most `window` in flight; returns (ok, errors list)."""
        sel = selectors.DefaultSelector()
        pending = list(range(len(socks)))
        pending.reverse()
        inflight = {}
        delayed = []  # (time to start reading, index)
        ok = 0
        errors = []

        def start(i):
            s = socks[i]
            try:
                s.send(req)  # small: the loopback socket takes it whole
            except OSError as e:
                errors.append(f"send: {e}")
                return
            inflight[i] = bytearray()
            if a.read_delay > 0:
                delayed.append((time.monotonic() + a.read_delay, i))
            else:
                sel.register(s, selectors.EVENT_READ, i)

        while (pending or inflight) and time.monotonic() < deadline:
            while pending and len(inflight) < a.window:
                start(pending.pop())
            now = time.monotonic()
            while delayed and delayed[0][0] <= now:
                _, j = delayed.pop(0)
                sel.register(socks[j], selectors.EVENT_READ, j)
            if not sel.get_map():
                time.sleep(max(0.0, min(1.0, delayed[0][0] - now)) if delayed else 0.01)
                continue
            for key, _ in sel.select(timeout=min(1.0, max(0.0, delayed[0][0] - now)) if delayed else 1):
                i = key.data
                s = socks[i]
                try:
                    chunk = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError as e:
                    chunk = b""
                    errors.append(f"recv: {e}")
                buf = inflight[i]
                if not chunk:
                    errors.append(f"connection {i} closed after {len(buf)} response bytes")
                    sel.unregister(s)
                    del inflight[i]
                    continue
                buf += chunk
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    continue
                head = bytes(buf[:end]).decode("latin-1").split("\r\n")
                clen = None
                close = False
                for h in head[1:]:
                    k, _, v = h.partition(":")
                    if k.strip().lower() == "content-length":
                        clen = int(v.strip())
                    if k.strip().lower() == "connection" and "close" in v.lower():
                        close = True
                if clen is None:
                    errors.append(f"no Content-Length: {head[0]}")
                    clen = 0
                if len(buf) - end - 4 < clen:
                    continue
                sel.unregister(s)
                del inflight[i]
                if not head[0].startswith("HTTP/1.1 200") or clen != a.expect_bytes or close:
                    errors.append(f"{head[0]!r} body {clen} bytes close={close}")
                else:
                    ok += 1
        if pending or inflight:
            errors.append(f"timed out with {len(pending) + len(inflight)} exchanges unfinished")
        sel.close()
        return ok, errors

    def still_open(socks):
        """Connections the server has not closed (nothing readable, or bytes that are not an EOF)."""
        sel = selectors.DefaultSelector()
        for i, s in enumerate(socks):
            sel.register(s, selectors.EVENT_READ, i)
        closed = 0
        for key, _ in sel.select(timeout=0):
            try:
                if key.fileobj.recv(1, socket.MSG_PEEK) == b"":
                    closed += 1
            except OSError:
                closed += 1
        sel.close()
        return len(socks) - closed

    t0 = time.monotonic()
    # 1. Warm-up.
    warm = [connect(i) for i in range(a.window)]
    ok, errs = exchange_all(warm)
    for s in warm:
        s.close()
    if errs:
        sys.exit(f"idleload: warm-up failed: {errs[:3]}")
    # 2. Baseline.
    before, before_reads = settle(a.pid, a.settle)
    fds0 = fd_count(a.pid)
    log(f"before: VmRSS {before['VmRSS']} kB (reads {before_reads}), {fds0} fds, {before['Threads']} threads")

    # 3. Bare connections.
    t_conn = time.monotonic()
    socks = []
    for i in range(a.conns):
        socks.append(connect(i))
        if len(socks) % 500 == 0 or len(socks) == a.conns:
            # Let the server's accept loop keep up (its listen backlog is finite).
            while fd_count(a.pid) < fds0 + len(socks) - 200 and time.monotonic() < deadline:
                time.sleep(0.05)
    t_open = time.monotonic()
    while fd_count(a.pid) < fds0 + a.conns and time.monotonic() < deadline:
        time.sleep(0.1)
    fds1 = fd_count(a.pid)
    if fds1 < fds0 + a.conns:
        sys.exit(f"idleload: server holds {fds1 - fds0} of {a.conns} connections")
    bare, bare_reads = settle(a.pid, a.settle)
    log(f"bare: {a.conns} connections opened in {t_open - t_conn:.1f} s; VmRSS {bare['VmRSS']} kB (reads {bare_reads})")

    # 4. One exchange on each, then idle.
    t1 = time.monotonic()
    ok, errs = exchange_all(socks)
    t2 = time.monotonic()
    if errs:
        log(f"{len(errs)} errors, first: {errs[:3]}")
    idle, idle_reads = settle(a.pid, a.settle)
    log(f"idle: {ok} exchanges in {t2 - t1:.1f} s; VmRSS {idle['VmRSS']} kB (reads {idle_reads})")
    open_ = still_open(socks)
    fds2 = fd_count(a.pid)
    if a.on_idle:
        log(f"running --on-idle: {a.on_idle}")
        subprocess.run(a.on_idle, shell=True, check=False)
    for s in socks:
        s.close()

    n = a.conns
    print(json.dumps({
        "conns": n, "sources": nsrc, "ok": ok, "errors": len(errs), "first_errors": errs[:3],
        "still_open": open_, "server_fds": {"before": fds0, "bare": fds1, "idle": fds2},
        "threads": {"before": before["Threads"], "bare": bare["Threads"], "idle": idle["Threads"]},
        "rss_kb": {"before": before["VmRSS"], "bare": bare["VmRSS"], "idle": idle["VmRSS"]},
        "anon_kb": {"before": before["RssAnon"], "bare": bare["RssAnon"], "idle": idle["RssAnon"]},
        "rss_reads_kb": {"before": before_reads, "bare": bare_reads, "idle": idle_reads},
        "bytes_per_conn": {
            "bare": (bare["VmRSS"] - before["VmRSS"]) * 1024 / n,
            "idle": (idle["VmRSS"] - before["VmRSS"]) * 1024 / n,
            "bare_anon": (bare["RssAnon"] - before["RssAnon"]) * 1024 / n,
            "idle_anon": (idle["RssAnon"] - before["RssAnon"]) * 1024 / n,
        },
        "seconds": {"open": round(t_open - t_conn, 2), "exchanges": round(t2 - t1, 2)},
    }))
    return 0 if (not errs and open_ == n) else 1


if __name__ == "__main__":
    sys.exit(main())
