#!/usr/bin/env python3
"""Test origin server for the authproxy end-to-end suite.

Standard library only.  Threaded, HTTP/1.1 with keep-alive.  Usable

* in-process:   ``srv = OriginServer().start(); ...; srv.stop()``
* as a process: ``python3 origin.py --port 0 --print-port [--host H] [--tls CERT KEY]``

Endpoints (all answer GET; most answer HEAD/POST/PUT/DELETE/PATCH too; any
request body is consumed and hashed before the response is produced):

  /json                 small JSON object
  /esri/query           ESRI JSON FeatureServer query result (3 points)
  /echo                 JSON: method, target, path, query, headers ([name, value]
                        pairs in order), body_length, body_sha256, remote_port,
                        conn_requests (request counter local to the connection)
  /upload               same as /echo (size + sha256 of the streamed body)
  /bytes?n=N            N bytes of pattern(), Content-Length, 64 KiB writes
  /chunked?n=N          same, Transfer-Encoding: chunked (64 KiB chunks)
  /close?n=N            same, close-delimited (no length, Connection: close)
  /drip?count=C&size=B&interval=I
                        Content-Length C*B, B bytes every I seconds
  /status/N             status N (204/304/1xx-free, no body for 204/304)
  /cookies              three Set-Cookie headers
  /gzip                 GZIP_BODY with Content-Encoding: gzip
  /stall?s=S[&phase=body]
                        sleep S seconds before answering; with phase=body the
                        head and 5 of 10 body bytes are sent first
  /hop                  response carrying hop-by-hop headers
  /__stats              counters (JSON)
  /__requests           the last requests seen (JSON)

Counters: connections (TCP accepts), requests (excluding /__*), aborted
(a write to the client failed mid-response), body_bytes_sent, active_bodies.
"""

import argparse
import gzip
import hashlib
import json
import signal
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from loopback_port import LoopbackServer

# ---------------------------------------------------------------------------
# Deterministic payloads shared with the tests
# ---------------------------------------------------------------------------

PATTERN_PERIOD = 251
WRITE_SIZE = 64 * 1024
_BLOCK = bytes(i % PATTERN_PERIOD for i in range(WRITE_SIZE + PATTERN_PERIOD))
_BLOCK_VIEW = memoryview(_BLOCK)


def pattern_slice(offset, size):
    """Bytes [offset, offset+size) of the infinite pattern (a memoryview when
    size <= WRITE_SIZE, else bytes)."""
    start = offset % PATTERN_PERIOD
    if size <= WRITE_SIZE:
        return _BLOCK_VIEW[start:start + size]
    return b"".join(bytes(pattern_slice(offset + o, min(WRITE_SIZE, size - o)))
                    for o in range(0, size, WRITE_SIZE))


def iter_pattern(n, write_size=WRITE_SIZE):
    off = 0
    while off < n:
        size = min(write_size, n - off)
        yield pattern_slice(off, size)
        off += size


def pattern(n):
    return b"".join(bytes(c) for c in iter_pattern(n))


_sha_cache = {}


def pattern_sha256(n):
    if n not in _sha_cache:
        h = hashlib.sha256()
        for c in iter_pattern(n):
            h.update(c)
        _sha_cache[n] = h.hexdigest()
    return _sha_cache[n]


GZIP_PLAIN = b"authproxy gzip test line, relayed untouched\n" * 500
GZIP_BODY = gzip.compress(GZIP_PLAIN, compresslevel=9, mtime=0)

JSON_DOC = {"hello": "world", "n": 42, "list": [1, 2, 3]}

ESRI_DOC = {
    "objectIdFieldName": "OBJECTID",
    "globalIdFieldName": "",
    "geometryType": "esriGeometryPoint",
    "spatialReference": {"wkid": 4326, "latestWkid": 4326},
    "fields": [
        {"name": "OBJECTID", "type": "esriFieldTypeOID", "alias": "OBJECTID"},
        {"name": "name", "type": "esriFieldTypeString", "alias": "Name", "length": 64},
        {"name": "population", "type": "esriFieldTypeInteger", "alias": "Population"},
    ],
    "features": [
        {"attributes": {"OBJECTID": 1, "name": "Alpha", "population": 1100},
         "geometry": {"x": -122.4194, "y": 37.7749}},
        {"attributes": {"OBJECTID": 2, "name": "Bravo", "population": 2200},
         "geometry": {"x": 2.3522, "y": 48.8566}},
        {"attributes": {"OBJECTID": 3, "name": "Charlie", "population": 3300},
         "geometry": {"x": 139.6917, "y": 35.6895}},
    ],
    "exceededTransferLimit": False,
}

COOKIES = [
    "a=1; Path=/",
    "b=2; HttpOnly",
    "c=3; Expires=Wed, 21 Oct 2037 07:28:00 GMT; Path=/x",
]


class ClientGone(Exception):
    """A write to the client failed (client/proxy went away mid-response)."""


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------

class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0
        self.aborted = 0
        self.body_bytes_sent = 0
        self.active_bodies = 0
        self.paths = {}
        self.log = []

    def snapshot(self):
        with self.lock:
            return {
                "connections": self.connections,
                "requests": self.requests,
                "aborted": self.aborted,
                "body_bytes_sent": self.body_bytes_sent,
                "active_bodies": self.active_bodies,
                "paths": dict(self.paths),
            }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "e2e-origin/1.0"
    sys_version = ""

    def version_string(self):
        return self.server_version
    timeout = 120  # socket timeout; nothing hangs forever

    # -- connection lifecycle ------------------------------------------------
    def setup(self):
        ctx = self.server.ssl_context
        if ctx is not None:
            self.request.settimeout(self.timeout)
            self.request = ctx.wrap_socket(self.request, server_side=True)
        super().setup()
        self.conn_requests = 0
        with self.server.stats.lock:
            self.server.stats.connections += 1

    def log_message(self, fmt, *args):  # quiet
        if self.server.verbose:
            sys.stderr.write("origin: " + (fmt % args) + "\n")

    def handle(self):
        try:
            super().handle()
        except (ConnectionError, socket.timeout, ssl.SSLError, OSError):
            pass

    # -- helpers -------------------------------------------------------------
    @property
    def stats(self):
        return self.server.stats

    def _write(self, data):
        try:
            self.wfile.write(data)
        except (ConnectionError, socket.timeout, ssl.SSLError, OSError) as e:
            raise ClientGone() from e

    def _write_body(self, data):
        self._write(data)
        with self.stats.lock:
            self.stats.body_bytes_sent += len(data)

    def _read_body(self):
        """Consume the request body (Content-Length or chunked); return (len, sha)."""
        h = hashlib.sha256()
        total = 0
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise ClientGone()
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                remaining = size
                while remaining:
                    buf = self.rfile.read(min(remaining, 1 << 20))
                    if not buf:
                        raise ClientGone()
                    h.update(buf)
                    total += len(buf)
                    remaining -= len(buf)
                self.rfile.readline(3)
        else:
            cl = self.headers.get("Content-Length")
            remaining = int(cl) if cl else 0
            while remaining:
                buf = self.rfile.read(min(remaining, 1 << 20))
                if not buf:
                    raise ClientGone()
                h.update(buf)
                total += len(buf)
                remaining -= len(buf)
        return total, h.hexdigest()

    def _start(self, status, headers=(), reason=None):
        self.send_response(status, reason)
        for k, v in headers:
            self.send_header(k, v)
        try:
            self.end_headers()  # writes the buffered head to the socket
        except (ConnectionError, socket.timeout, ssl.SSLError, OSError) as e:
            raise ClientGone() from e

    def _send_bytes(self, status, body, ctype="application/octet-stream", headers=()):
        hdrs = [("Content-Type", ctype), ("Content-Length", str(len(body)))]
        hdrs.extend(headers)
        self._start(status, hdrs)
        if self.command != "HEAD" and body:
            self._write_body(body)

    def _send_json(self, obj, status=200, headers=()):
        body = json.dumps(obj).encode() + b"\n"
        self._send_bytes(status, body, "application/json", headers)

    def _stream(self, n, mode):
        hdrs = [("Content-Type", "application/octet-stream")]
        if mode == "length":
            hdrs.append(("Content-Length", str(n)))
        elif mode == "chunked":
            hdrs.append(("Transfer-Encoding", "chunked"))
        elif mode == "close":
            hdrs.append(("Connection", "close"))
            self.close_connection = True
        self._start(200, hdrs)
        if self.command == "HEAD":
            return
        with self.stats.lock:
            self.stats.active_bodies += 1
        try:
            for c in iter_pattern(n):
                if mode == "chunked":
                    self._write(b"%x\r\n" % len(c))
                    self._write_body(c)
                    self._write(b"\r\n")
                else:
                    self._write_body(c)
            if mode == "chunked":
                self._write(b"0\r\n\r\n")
        finally:
            with self.stats.lock:
                self.stats.active_bodies -= 1

    # -- dispatch ------------------------------------------------------------
    def _dispatch(self):
        target = self.path
        split = urlsplit(target)
        path = split.path or "/"
        query = split.query
        q = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        control = path.startswith("/__")
        self.conn_requests += 1
        if not control:
            with self.stats.lock:
                self.stats.requests += 1
                self.stats.paths[path] = self.stats.paths.get(path, 0) + 1
                self.stats.log.append({
                    "method": self.command, "target": target,
                    "version": self.request_version,
                    "headers": [[k, v] for k, v in self.headers.items()],
                    "remote_port": self.client_address[1],
                })
                del self.stats.log[:-200]
        try:
            body_len, body_sha = self._read_body()
        except (ValueError, ClientGone):
            self.close_connection = True
            return
        try:
            self._route(path, query, q, target, body_len, body_sha)
        except ClientGone:
            with self.stats.lock:
                self.stats.aborted += 1
            self.close_connection = True

    def _route(self, path, query, q, target, body_len, body_sha):
        cmd = self.command
        if path in ("/echo", "/upload"):
            self._send_json({
                "method": cmd,
                "target": target,
                "path": path,
                "query": query,
                "version": self.request_version,
                "headers": [[k, v] for k, v in self.headers.items()],
                "body_length": body_len,
                "body_sha256": body_sha,
                "size": body_len,
                "sha256": body_sha,
                "remote_port": self.client_address[1],
                "conn_requests": self.conn_requests,
            })
        elif path == "/json":
            self._send_json(JSON_DOC)
        elif path == "/esri/query":
            self._send_json(ESRI_DOC)
        elif path == "/bytes":
            self._stream(int(q.get("n", "0")), "length")
        elif path == "/chunked":
            self._stream(int(q.get("n", "0")), "chunked")
        elif path == "/close":
            self._stream(int(q.get("n", "0")), "close")
        elif path == "/drip":
            count = int(q.get("count", "5"))
            size = int(q.get("size", "100"))
            interval = float(q.get("interval", "0.5"))
            self._start(200, [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(count * size))])
            if cmd == "HEAD":
                return
            off = 0
            for i in range(count):
                if i:
                    time.sleep(interval)
                self._write_body(bytes(pattern_slice(off, size)))
                off += size
        elif path.startswith("/status/"):
            code = int(path.split("/")[2])
            if code in (204, 304):
                hdrs = [("X-Status", str(code))]
                if code == 304:
                    hdrs.append(("ETag", '"v1"'))
                self._start(code, hdrs)
            else:
                self._send_json({"status": code}, status=code)
        elif path == "/cookies":
            body = b"cookies\n"
            hdrs = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]
            hdrs += [("Set-Cookie", c) for c in COOKIES]
            self._start(200, hdrs)
            if cmd != "HEAD":
                self._write_body(body)
        elif path == "/gzip":
            self._send_bytes(200, GZIP_BODY, "text/plain",
                             [("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding")])
        elif path == "/stall":
            s = float(q.get("s", "5"))
            if q.get("phase") == "body":
                self._start(200, [("Content-Type", "application/octet-stream"),
                                  ("Content-Length", "10")])
                self._write_body(b"01234")
                time.sleep(s)
                self._write_body(b"56789")
            else:
                time.sleep(s)
                self._send_json({"stalled": s})
        elif path == "/hop":
            body = b"hop\n"
            self._start(200, [
                ("Content-Type", "text/plain"),
                ("Content-Length", str(len(body))),
                ("Connection", "X-Foo, X-Bar"),
                ("X-Foo", "bar"),
                ("X-Bar", "baz"),
                ("Keep-Alive", "timeout=30, max=100"),
                ("Proxy-Connection", "keep-alive"),
                ("Trailer", "X-Checksum"),
                ("Upgrade", "example/1"),
                ("Proxy-Authorization", "Basic c2VjcmV0OnNlY3JldA=="),
                ("TE", "trailers"),
                ("X-End-To-End", "kept"),
                ("Via", "1.1 origin"),
            ])
            if cmd != "HEAD":
                self._write_body(body)
        elif path == "/__stats":
            self._send_json(self.stats.snapshot())
        elif path == "/__requests":
            with self.stats.lock:
                log = list(self.stats.log)
            self._send_json(log)
        else:
            self._send_json({"error": "not found", "path": path}, status=404)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _dispatch


class _Server(LoopbackServer, ThreadingHTTPServer):
    server_label = "origin"
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, family, ssl_context, verbose):
        self.address_family = family
        self.ssl_context = ssl_context
        self.verbose = verbose
        self.stats = _Stats()
        super().__init__(addr, _Handler)


class OriginServer:
    """In-process origin.  ``tls=(cert, key)`` serves HTTPS."""

    def __init__(self, host="127.0.0.1", port=0, tls=None, verbose=False):
        ctx = None
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.host = host
        self.tls = bool(tls)
        self.httpd = _Server((host, port), family, ctx, verbose)
        self.port = self.httpd.server_port
        self._thread = None

    @property
    def authority(self):
        h = "[%s]" % self.host if ":" in self.host else self.host
        return "%s:%d" % (h, self.port)

    @property
    def url(self):
        return "%s://%s" % ("https" if self.tls else "http", self.authority)

    def start(self):
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="origin-%d" % self.port, daemon=True)
        self._thread.start()
        return self

    def stats(self):
        return self.httpd.stats.snapshot()

    def request_log(self):
        with self.httpd.stats.lock:
            return list(self.httpd.stats.log)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class HalfCloseEchoServer:
    """Raw TCP server: reads until EOF, then replies
    ``b"got <n> <sha256>\\n"`` followed by the received bytes, then closes.
    Verifies that a tunnel propagates a half-close and keeps the other direction open."""

    def __init__(self, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()

    def start(self):
        threading.Thread(target=self._loop, daemon=True).start()
        return self

    def _loop(self):
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _serve(c):
        c.settimeout(30)
        data = bytearray()
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                data += b
            c.sendall(b"got %d %s\n" % (len(data), hashlib.sha256(data).hexdigest().encode()))
            c.sendall(bytes(data))
        except OSError:
            pass
        finally:
            c.close()

    def stop(self):
        self._stop.set()
        self.sock.close()


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--print-port", action="store_true",
                    help="print the bound port on stdout (one line) once listening")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    srv = OriginServer(a.host, a.port, tls=a.tls, verbose=a.verbose)
    if a.print_port:
        print(srv.port, flush=True)
    else:
        print("origin listening on %s" % srv.url, file=sys.stderr, flush=True)

    def _term(*_):
        threading.Thread(target=srv.httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _term)
    signal.signal(signal.SIGINT, _term)
    srv.httpd.serve_forever(poll_interval=0.1)
    srv.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
