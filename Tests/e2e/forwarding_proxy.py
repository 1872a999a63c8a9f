"""A small forwarding HTTP proxy for tests that need parent proxies (upstream_pac): absolute-form requests
and CONNECT tunnels, one exchange per client connection, recording what it saw.

Names it is asked for are resolved through `hosts` (name -> address) first, so tests can route invented
names (a.pac.test) that only the parent knows, as a corporate proxy resolves names the client cannot.
Forwarded http requests get `Via: 1.1 <name>`, so the origin shows which parent carried them.
`source`: the address its outgoing connections are bound to (another 127.x), so the origin sees each parent
as a different egress address, as behind different NAT gateways.
"""

import contextlib
import socket
import threading
import urllib.parse

from loopback_port import bind_loopback


class ForwardingProxy:
    def __init__(self, name, hosts=None, host="127.0.0.1", basic=None, source=None):
        self.name = name
        self.source = source
        # basic: a "user:password" this parent requires (407 with Proxy-Authenticate: Basic until it is sent).
        self.basic = basic
        self.accepted = 0  # connections accepted
        self.authorizations = []  # every Proxy-Authorization value received
        self.hosts = dict(hosts or {})
        self.seen = []  # ("GET", "http://a.pac.test:1234/echo") or ("CONNECT", "a.pac.test:1234")
        self._lock = threading.Lock()
        def make():
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            return s

        self._guard = None
        if host == "127.0.0.1":
            # PAC files name it `localhost`: a port free on ::1 as well (loopback_port.py).
            self._sock, self._guard = bind_loopback(make)
        else:
            self._sock = make()
            self._sock.bind((host, 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.address = "%s:%d" % (host, self.port)
        self._stopped = False
        self._conns = set()

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        self._stopped = True
        if self._guard is not None:
            self._guard.close()
        try:
            self._sock.close()
        except OSError:
            pass
        with self._lock:
            for c in list(self._conns):
                try:
                    c.close()
                except OSError:
                    pass

    def saw(self, method=None):
        with self._lock:
            return [t for (m, t) in self.seen if method is None or m == method]

    def _accept(self):
        while not self._stopped:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(c)
                self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _connect(self, host, port):
        return socket.create_connection((self.hosts.get(host, host), port), timeout=10,
                                        source_address=(self.source, 0) if self.source else None)

    def _serve(self, c):
        try:
            c.settimeout(15)
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = c.recv(65536)
                if not chunk:
                    return
                buf += chunk
            head, rest = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            presented = [l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("proxy-authorization:")]
            with self._lock:
                self.authorizations += presented
            if self.basic is not None:
                import base64
                expected = "Basic " + base64.b64encode(self.basic.encode()).decode()
                if expected not in presented:
                    c.sendall(b'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="parent"\r\n'
                              b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                    return
            with self._lock:
                self.seen.append((method, target))
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                try:
                    up = self._connect(host, int(port))
                except OSError:
                    c.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    return
                c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    up.sendall(rest)
                self._pipe(c, up)
                return
            u = urllib.parse.urlsplit(target)
            fields = [l for l in lines[1:] if l and not l.lower().startswith(("proxy-connection:", "connection:", "keep-alive:"))]
            length = 0
            for l in fields:
                if l.lower().startswith("content-length:"):
                    length = int(l.split(":", 1)[1])
            while len(rest) < length:
                chunk = c.recv(65536)
                if not chunk:
                    break
                rest += chunk
            path = u.path or "/"
            if u.query:
                path += "?" + u.query
            up = self._connect(u.hostname, u.port or 80)
            out = "%s %s HTTP/1.1\r\n" % (method, path) + "".join(f + "\r\n" for f in fields)
            out += "Via: 1.1 %s\r\nConnection: close\r\n\r\n" % self.name
            up.sendall(out.encode("latin-1") + rest)
            response = b""
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                response += chunk
            up.close()
            # The answer goes back with the connection closed after it (one exchange per connection).
            rhead, _, rbody = response.partition(b"\r\n\r\n")
            rlines = [l for l in rhead.split(b"\r\n") if not l.lower().startswith((b"connection:", b"keep-alive:"))]
            c.sendall(b"\r\n".join(rlines) + b"\r\nConnection: close\r\n\r\n" + rbody)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(c)
            try:
                c.close()
            except OSError:
                pass

    def _pipe(self, a, b):
        def one_way(src, dst):
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        t = threading.Thread(target=one_way, args=(b, a), daemon=True)
        t.start()
        one_way(a, b)
        t.join(15)
        b.close()


class PacServer:
    """Serves one PAC file at /proxy.pac; `text` may be changed while it runs, `stop()` makes it unreachable."""

    def __init__(self, text, port=None, host="127.0.0.1"):
        import http.server

        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.fetches += 1
                body = server.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ns-proxy-autoconfig")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.text = text
        self.fetches = 0
        self._httpd = Server((host, port or 0), Handler)
        self.port = self._httpd.server_address[1]
        self.url = "http://%s:%d/proxy.pac" % (host, self.port)

    def start(self):
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self._httpd.shutdown()
        self._httpd.server_close()


@contextlib.contextmanager
def parent_named_by_pac(hosts, destination="a.pac.test"):
    """A forwarding parent, and a PAC server whose file sends `destination` to it by the name `localhost` (which
    resolves into 127.0.0.0/8 and ::1, for tests of deny_destinations on PAC-named parents) and the rest DIRECT.
    Yields (parent, pac); both are stopped at the end."""
    parent = ForwardingProxy("byname", hosts=hosts).start()
    pac = PacServer("""
function FindProxyForURL(url, host) {
    if (host == "%s") return "PROXY localhost:%d";
    return "DIRECT";
}
""" % (destination, parent.port)).start()
    try:
        yield parent, pac
    finally:
        pac.stop()
        parent.stop()
