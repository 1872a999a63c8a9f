"""Helpers for driving the authproxy binary from the e2e tests."""

import http.client
import json
import os
import re
import signal
import random
import socket
import ssl
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEFAULT_BIN = os.path.join(REPO_ROOT, ".build", "debug", "authproxy")

PROXY_ENV_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy")

STARTUP_TIMEOUT = 15.0


def proxy_bin():
    """The binary every test runs: $AUTHPROXY_BIN (the release build in scripts/test.sh's release pass), else the
    debug build. Absolute, so tests that run it from another directory run the same one."""
    return os.path.abspath(os.environ.get("AUTHPROXY_BIN") or DEFAULT_BIN)


def clean_env(extra=None):
    """os.environ without *_proxy variables (so curl/GDAL/requests never bypass
    or chain proxies behind our back), plus extra."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_ENV_VARS}
    if extra:
        env.update(extra)
    return env


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


_EPHEMERAL = _ephemeral_range()


def free_port(host="127.0.0.1"):
    """A port free on `host` now, for a server a test starts next (the proxy, from its config).

    Taken at random below the kernel's ephemeral range, not with bind(0): a port from that range can be the source
    port of some other test's outgoing connection a moment later, and a listener cannot then be made on it
    (EADDRINUSE), which with the end-to-end files running in parallel happened in practice."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    low = 10000 if _EPHEMERAL[0] > 12000 else 1024
    high = min(_EPHEMERAL[0] - 1, 32767) if _EPHEMERAL[0] > low + 1000 else None
    for _ in range(200 if high else 0):
        port = random.randint(low, high)
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def closed_port(host="127.0.0.1"):
    """A port on which nothing listens (bound then released)."""
    return free_port(host)


def ipv6_available():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def hostport(host, port):
    return ("[%s]:%d" % (host, port)) if ":" in host else ("%s:%d" % (host, port))


# ---------------------------------------------------------------------------
# Config rendering
# ---------------------------------------------------------------------------

def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # TOML basic strings are compatible for our inputs
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(v)


def cred(name, type_, match, **fields):
    """One [[credential]] entry in TOML (strings JSON-quoted, so backslashes in DOMAIN\\user survive)."""
    lines = ["", "[[credential]]", 'name = "%s"' % name, 'type = "%s"' % type_]
    m = match if isinstance(match, list) else [match]
    lines.append("match = [%s]" % ", ".join(json.dumps(x) for x in m))
    for k, v in fields.items():
        if isinstance(v, bool):
            lines.append("%s = %s" % (k, "true" if v else "false"))
        elif isinstance(v, int):
            lines.append("%s = %d" % (k, v))
        else:
            lines.append("%s = %s" % (k, json.dumps(v)))
    return "\n".join(lines) + "\n"


def render_config(proxy, log):
    out = ["[proxy]"]
    for k, v in proxy.items():
        if v is not None:
            out.append("%s = %s" % (k, _toml_value(v)))
    out.append("")
    out.append("[log]")
    for k, v in log.items():
        if v is not None:
            out.append("%s = %s" % (k, _toml_value(v)))
    return "\n".join(out) + "\n"


def default_proxy_section(port, state_dir):
    return {
        "listen": ["127.0.0.1:%d" % port],
        "connect_ports": [443],
        "unmatched": "relay",
        "state_dir": state_dir,
        "upstream_timeout_seconds": 30,
        "header_timeout_seconds": 10,
        "idle_timeout_seconds": 60,
        "shutdown_grace_seconds": 3,
        # Which client carries plain http:// upstreams (the default, "native", unless the run asks for libcurl).
        **({"http_client": os.environ["AUTHPROXY_TEST_HTTP_CLIENT"]} if os.environ.get("AUTHPROXY_TEST_HTTP_CLIENT") else {}),
    }


def default_log_section():
    return {"level": "info", "format": "text"}


# ---------------------------------------------------------------------------
# /proc helpers
# ---------------------------------------------------------------------------

def proc_status(pid):
    """Memory figures from /proc/PID/status in bytes (VmRSS, VmHWM, ...)."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            v = v.strip()
            if v.endswith(" kB"):
                out[k] = int(v[:-3]) * 1024
    return out


def rss(pid):
    return proc_status(pid)["VmRSS"]


def hwm(pid):
    return proc_status(pid)["VmHWM"]


MB = 1024 * 1024


# ---------------------------------------------------------------------------
# Proxy process
# ---------------------------------------------------------------------------

class ProxyStartError(Exception):
    pass


class Proxy:
    """A running authproxy process."""

    def __init__(self, binary, config_path, log_path, host, port, env=None,
                 args=None, healthz=True):
        self.binary = binary
        self.config_path = config_path
        self.log_path = log_path
        self.host = host
        self.port = port
        self.env = env
        self.args = args or ["serve", "--config", config_path]
        self._healthz = healthz
        self.proc = None
        self._logf = None

    # -- identity ------------------------------------------------------------
    @property
    def authority(self):
        return hostport(self.host, self.port)

    @property
    def url(self):
        return "http://%s" % self.authority

    @property
    def pid(self):
        return self.proc.pid

    @property
    def proxies(self):
        """For requests: proxies=proxy.proxies."""
        return {"http": self.url, "https": self.url}

    # -- lifecycle -----------------------------------------------------------
    def start(self, timeout=STARTUP_TIMEOUT):
        self._logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.binary] + self.args,
                                     stdin=subprocess.DEVNULL,
                                     stdout=self._logf, stderr=self._logf,
                                     env=self.env if self.env is not None else clean_env(),
                                     start_new_session=True)
        if self._healthz:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=STARTUP_TIMEOUT, host=None, port=None):
        host = host or self.host
        port = port or self.port
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ProxyStartError("authproxy exited with %s during startup; log:\n%s"
                                      % (self.proc.returncode, self.log_text()[-4000:]))
            try:
                status, body = healthz(host, port, timeout=1.0)
                if status == 200:
                    return
                last = "status %s body %r" % (status, body)
            except OSError as e:
                last = repr(e)
            time.sleep(0.05)
        raise ProxyStartError("authproxy not ready on %s within %.0fs (last: %s); log:\n%s"
                              % (hostport(host, port), timeout, last, self.log_text()[-4000:]))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.signalled = True
        self.proc.send_signal(sig)

    def unexpected_exit(self):
        """Exit code if the process died on its own (not via stop()/signal())."""
        if self.proc is None or getattr(self, "signalled", False) or getattr(self, "stopping", False):
            return None
        return self.proc.poll()

    def stop(self, grace=15.0):
        """SIGTERM, wait, then SIGKILL.  Returns the exit code."""
        if self.proc is None:
            return None
        self.stopping = True
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._logf:
            self._logf.close()
            self._logf = None
        return self.proc.returncode

    # -- observation ---------------------------------------------------------
    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_lines(self):
        return [l for l in self.log_text().splitlines() if l.strip()]

    def wait_for_log(self, pred, timeout=3.0):
        """Wait until some log line satisfies pred (callable or regex string)."""
        if isinstance(pred, str):
            rx = re.compile(pred)
            pred_fn = lambda l: rx.search(l)  # noqa: E731
        else:
            pred_fn = pred
        deadline = time.monotonic() + timeout
        while True:
            hits = [l for l in self.log_lines() if pred_fn(l)]
            if hits or time.monotonic() >= deadline:
                return hits
            time.sleep(0.05)

    def rss(self):
        return rss(self.pid)

    def hwm(self):
        return hwm(self.pid)


def healthz(host, port, timeout=2.0):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def default_workers(usable_cpus):
    """`[proxy] workers` when not configured: 2 per usable CPU, at least 4, at most 32 (CPUBudget.defaultWorkers)."""
    return max(4, min(2 * usable_cpus, 32))


def run_cli(args, timeout=30, env=None):
    """Run the binary with args; returns CompletedProcess (text)."""
    return subprocess.run([proxy_bin()] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=env if env is not None else clean_env(),
                          stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------------
# Assertions
# ---------------------------------------------------------------------------

def assert_error_json(status, headers_get, body, expected_status):
    """Check the proxy's own error format.  headers_get: callable(name) -> value."""
    assert status == expected_status, "expected %d, got %d; body=%r" % (expected_status, status, body[:500])
    ctype = headers_get("Content-Type") or ""
    assert ctype.split(";")[0].strip().lower() == "application/json", "Content-Type=%r" % ctype
    doc = json.loads(body.decode() if isinstance(body, bytes) else body)
    assert isinstance(doc, dict) and isinstance(doc.get("error"), dict), doc
    err = doc["error"]
    assert err.get("code") == expected_status, doc
    assert isinstance(err.get("message"), str) and err["message"], doc
    assert isinstance(err.get("details", []), list), doc
    return err


def parse_kv(line):
    """key=value pairs of a text log line (values without spaces, or "quoted")."""
    out = {}
    for m in re.finditer(r'([A-Za-z_][\w.\-]*)=("(?:[^"\\]|\\.)*"|\S*)', line):
        v = m.group(2)
        if v.startswith('"') and v.endswith('"') and len(v) >= 2:
            v = v[1:-1]
        out[m.group(1)] = v
    return out


def flatten(obj, prefix=""):
    """Flatten nested dicts: {"a": {"b": 1}} -> {"a.b": 1, "b": 1} (leaf names too)."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, dict):
                out.update(flatten(v, prefix + k + "."))
            else:
                out[prefix + k] = v
                out.setdefault(k, v)
    return out


def access_lines_text(proxy):
    return [l for l in proxy.log_lines() if re.search(r"\baccess\b", l) and "method=" in l]


# ---------------------------------------------------------------------------
# Request helpers
# ---------------------------------------------------------------------------

def proxied_conn(proxy, timeout=10.0):
    """http.client connection to the proxy; request absolute URLs on it."""
    return http.client.HTTPConnection(proxy.host, proxy.port, timeout=timeout)


def fetch(proxy, method, url, headers=None, body=None, timeout=10.0):
    """One request through the proxy on a fresh connection -> (response, body bytes)."""
    conn = proxied_conn(proxy, timeout)
    try:
        conn.request(method, url, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r, data
    finally:
        conn.close()


def raw_exchange(proxy, data, source=None, timeout=10.0, half_close=False):
    """Connects to the proxy (from the local address `source` if given), sends `data` (optionally followed by
    a half-close), and reads until EOF, reset or timeout -> bytes received."""
    s = socket.socket(socket.AF_INET6 if ":" in proxy.host else socket.AF_INET)
    s.settimeout(timeout)
    out = b""
    try:
        if source:
            s.bind((source, 0))
        s.connect((proxy.host, proxy.port))
        if data:
            s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError):
        pass
    finally:
        s.close()
    return out


class RawRequest:
    """One request a RawBackend delimited: method, target, header list, body (de-chunked) and where it arrived."""

    def __init__(self, method, target, version, headers, body, conn):
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers
        self.body = body
        self.conn = conn  # index into RawBackend.received

    def header(self, name):
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def __repr__(self):
        return "<RawRequest %s %s body=%d bytes conn=%d>" % (self.method, self.target, len(self.body), self.conn)


class RawBackend:
    """A raw HTTP/1.1 upstream on 127.0.0.1 that records exactly the bytes it receives, per connection, and answers
    each request it can delimit with `respond(request)`.

    `received[i]` holds every byte received on the i-th accepted connection, in order; `closed[i]` turns True when
    the peer closed or reset it. Requests are delimited leniently (head up to CRLFCRLF, then Content-Length or chunked
    framing), only to know when to answer: a test judges the recorded bytes with its own strict reading. When a
    request cannot be delimited the backend stops answering on that connection and keeps recording.

    `respond(req)` returns the bytes to send, or a list of actions: bytes (sent), a number (seconds to sleep),
    RawBackend.CLOSE (close the connection). The default answers 200 with a body naming the request.

    `tls=(cert, key)` makes it an https server (each connection's handshake in its own thread); `received` then
    holds the decrypted bytes, and CLOSE closes the TCP connection without a TLS close_notify, as many servers do."""

    CLOSE = object()

    def __init__(self, respond=None, host="127.0.0.1", tls=None):
        self.respond = respond or self.default_response
        self.ssl_ctx = None
        if tls:
            self.ssl_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ssl_ctx.load_cert_chain(tls[0], tls[1])
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.received = []
        self.closed = []
        self.requests = []
        self._socks = []
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def authority(self):
        return hostport(self.host, self.port)

    @property
    def url(self):
        return "http://" + self.authority

    @staticmethod
    def default_response(req):
        body = ("%s %s %d" % (req.method, req.target, len(req.body))).encode("latin-1")
        if req.method == "HEAD":
            return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
        return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    def snapshot(self):
        """Bytes recorded so far on each connection (for since())."""
        with self.lock:
            return [len(c) for c in self.received]

    def since(self, snap):
        """(connection index, bytes received after `snap`, closed) for every connection that received any."""
        with self.lock:
            out = []
            for i, data in enumerate(self.received):
                start = snap[i] if i < len(snap) else 0
                if len(data) > start:
                    out.append((i, bytes(data[start:]), self.closed[i]))
            return out

    def wait_closed(self, index, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.closed[index]:
                    return True
            time.sleep(0.02)
        return False

    def stop(self):
        self._stopped = True
        try:
            self.sock.close()
        except OSError:
            pass
        with self.lock:
            socks = list(self._socks)
        for c in socks:
            try:
                c.close()
            except OSError:
                pass

    def _accept(self):
        while not self._stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                index = len(self.received)
                self.received.append(bytearray())
                self.closed.append(False)
                self._socks.append(c)
            threading.Thread(target=self._serve, args=(c, index), daemon=True).start()

    def _serve(self, c, index):
        buf = b""
        delimiting = True
        try:
            if self.ssl_ctx is not None:
                c = self.ssl_ctx.wrap_socket(c, server_side=True)
                with self.lock:
                    self._socks.append(c)
            while True:
                try:
                    d = c.recv(65536)
                except OSError:
                    d = b""
                if not d:
                    break
                with self.lock:
                    self.received[index] += d
                if not delimiting:
                    continue
                buf += d
                while True:
                    try:
                        got = self._delimit(buf)
                    except ValueError:
                        delimiting = False
                        break
                    if got is None:
                        break
                    (method, target, version, headers, body), used = got
                    buf = buf[used:]
                    req = RawRequest(method, target, version, headers, body, index)
                    with self.lock:
                        self.requests.append(req)
                    actions = self.respond(req)
                    if not isinstance(actions, list):
                        actions = [actions]
                    for a in actions:
                        if a is RawBackend.CLOSE:
                            return
                        if isinstance(a, (int, float)):
                            time.sleep(a)
                        else:
                            c.sendall(a)
        except OSError:
            pass
        finally:
            with self.lock:
                self.closed[index] = True
            try:
                c.close()
            except OSError:
                pass

    @staticmethod
    def _delimit(buf):
        """((method, target, version, headers, body), bytes used) for the first complete request in buf, None when
        more is needed; ValueError when its framing cannot be read."""
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        lines = buf[:end].decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            raise ValueError("request line %r" % lines[0])
        headers = []
        for line in lines[1:]:
            k, colon, v = line.partition(":")
            if not colon:
                raise ValueError("field line %r" % line)
            headers.append((k, v.strip(" \t")))
        pos = end + 4
        te = [v for k, v in headers if k.lower() == "transfer-encoding"]
        cl = [v for k, v in headers if k.lower() == "content-length"]
        if te:
            body = b""
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return None
                size = int(buf[pos:eol].split(b";")[0], 16)
                pos = eol + 2
                if size == 0:
                    while True:
                        eol = buf.find(b"\r\n", pos)
                        if eol < 0:
                            return None
                        line, pos = buf[pos:eol], eol + 2
                        if not line:
                            return (parts[0], parts[1], parts[2], headers, body), pos
                if len(buf) < pos + size + 2:
                    return None
                body += buf[pos:pos + size]
                pos += size + 2
        n = int(cl[0]) if cl else 0
        if len(buf) < pos + n:
            return None
        return (parts[0], parts[1], parts[2], headers, buf[pos:pos + n]), pos + n


def one_shot_backend(response, linger=0.5):
    """A RawBackend that answers the first request it gets with `response` bytes exactly as given, then closes that
    connection after `linger` seconds -> (port, close function)."""
    b = RawBackend(respond=lambda req: [response, linger, RawBackend.CLOSE])
    return b.port, b.stop


class ScriptedBackend(RawBackend):
    """A RawBackend that answers each request with the bytes `respond(path)` returns, exactly as given (malformed
    heads included). `connections`: the request lines received, one list per accepted connection."""

    def __init__(self, respond):
        super().__init__(respond=lambda req: respond(req.target))

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    @property
    def connections(self):
        with self.lock:
            return [["%s %s %s" % (r.method, r.target, r.version) for r in self.requests if r.conn == i]
                    for i in range(len(self.received))]

    def close(self):
        self.stop()


def joined(values):
    return ", ".join(values)


def curl(*args, timeout=60, env=None):
    """Run curl (never honouring *_proxy env vars) -> CompletedProcess (bytes)."""
    cmd = ["curl", "-sS", "--noproxy", "", "--max-time", str(int(timeout) - 2)] + list(args)
    return subprocess.run(cmd, capture_output=True, timeout=timeout,
                          env=env if env is not None else clean_env(), stdin=subprocess.DEVNULL)


def read_head(c):
    """The bytes of a connection up to and including the first blank line (less when it closes first)."""
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(65536)
        if not d:
            break
        data += d
    return data


class ScriptedUpstream:
    """Accepts connections on 127.0.0.1 and runs `behaviour(conn)` for each in a thread. `rcvbuf` sets the accepted
    sockets' receive buffer (small: the upstream cannot soak up a large body it does not read)."""

    def __init__(self, behaviour, rcvbuf=None):
        self.behaviour = behaviour
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._run, args=(c,), daemon=True).start()

    def _run(self, c):
        try:
            self.behaviour(c)
        except OSError:
            pass

    def close(self):
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
