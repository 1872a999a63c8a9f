"""Minimal raw HTTP/1.x client used where exact bytes / framing matter
(pipelining, malformed requests, HTTP/1.0, interim responses, CONNECT)."""

import json
import socket
import time


class Response:
    def __init__(self, version, status, reason, headers, body=b"", interim=()):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value) in order
        self.body = body
        self.interim = list(interim)  # earlier 1xx responses

    def get_all(self, name):
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def get(self, name, default=None):
        v = self.get_all(name)
        return v[0] if v else default

    def has(self, name):
        return bool(self.get_all(name))

    def json(self):
        return json.loads(self.body.decode())

    def __repr__(self):
        return "<Response %s %s %r body=%d bytes>" % (self.status, self.reason,
                                                      self.headers, len(self.body))


class ConnectionClosed(Exception):
    pass


class RawConn:
    def __init__(self, host, port, timeout=10.0, family=None, rcvbuf=None):
        if family is None:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        self.buf = bytearray()
        self.eof = False

    # -- io -----------------------------------------------------------------
    def send(self, data):
        if isinstance(data, str):
            data = data.encode("latin-1")
        self.sock.sendall(data)

    def settimeout(self, t):
        self.sock.settimeout(t)

    def _fill(self, n=65536):
        if self.eof:
            return False
        b = self.sock.recv(n)
        if not b:
            self.eof = True
            return False
        self.buf += b
        return True

    def read_until(self, delim, limit=1 << 20):
        while True:
            i = self.buf.find(delim)
            if i >= 0:
                out = bytes(self.buf[:i + len(delim)])
                del self.buf[:i + len(delim)]
                return out
            if len(self.buf) > limit:
                raise ValueError("delimiter not found within limit")
            if not self._fill():
                raise ConnectionClosed("EOF while waiting for %r (have %r)" % (delim, bytes(self.buf[:200])))

    def read_exact(self, n):
        while len(self.buf) < n:
            if not self._fill(max(65536, n - len(self.buf))):
                raise ConnectionClosed("EOF after %d of %d bytes" % (len(self.buf), n))
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_to_eof(self):
        while self._fill():
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def read_some(self, n=65536):
        if self.buf:
            out = bytes(self.buf[:n])
            del self.buf[:n]
            return out
        b = self.sock.recv(n)
        if not b:
            self.eof = True
        return b

    def closed_by_peer(self, timeout=3.0):
        """True if the peer closes (EOF or reset) within timeout with no further data.
        Raises AssertionError if unexpected bytes arrive."""
        if self.buf:
            raise AssertionError("unexpected extra bytes: %r" % bytes(self.buf[:200]))
        if self.eof:
            return True
        old = self.sock.gettimeout()
        self.sock.settimeout(timeout)
        try:
            b = self.sock.recv(65536)
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
        finally:
            try:
                self.sock.settimeout(old)
            except OSError:
                pass
        if b:
            raise AssertionError("unexpected extra bytes: %r" % b[:200])
        self.eof = True
        return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- http ---------------------------------------------------------------
    def read_head(self):
        head = self.read_until(b"\r\n\r\n", limit=256 * 1024)
        lines = head.decode("latin-1").split("\r\n")
        status_line = lines[0]
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ValueError("bad status line %r" % status_line)
        version, status = parts[0], int(parts[1])
        reason = parts[2] if len(parts) > 2 else ""
        headers = []
        for line in lines[1:]:
            if not line:
                continue
            k, _, v = line.partition(":")
            headers.append((k.strip(), v.strip()))
        return version, status, reason, headers

    def read_response(self, method="GET", body=True):
        """Read one response, collecting 1xx interim responses (except 101)."""
        interim = []
        while True:
            version, status, reason, headers = self.read_head()
            if 100 <= status < 200 and status != 101:
                interim.append(Response(version, status, reason, headers))
                continue
            break
        resp = Response(version, status, reason, headers, interim=interim)
        if not body:
            return resp
        resp.body = self.read_body(resp, method)
        return resp

    def read_body(self, resp, method="GET"):
        if method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200:
            return b""
        if method == "CONNECT" and 200 <= resp.status < 300:
            return b""
        te = ",".join(resp.get_all("Transfer-Encoding")).lower()
        if te:
            if te.replace(" ", "").split(",")[-1] != "chunked":
                return self.read_to_eof()
            return self.read_chunked()
        cl = resp.get_all("Content-Length")
        if cl:
            return self.read_exact(int(cl[0]))
        return self.read_to_eof()

    def read_chunked(self):
        out = bytearray()
        while True:
            line = self.read_until(b"\r\n")
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while self.read_until(b"\r\n") != b"\r\n":
                    pass
                return bytes(out)
            out += self.read_exact(size)
            if self.read_exact(2) != b"\r\n":
                raise ValueError("bad chunk terminator")


def request_bytes(method, target, headers=(), body=b"", version="HTTP/1.1"):
    lines = ["%s %s %s" % (method, target, version)]
    for k, v in headers:
        lines.append("%s: %s" % (k, v))
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (body or b"")


def wait_until(pred, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            return v
        time.sleep(interval)
