"""A TCP relay in front of an upstream (moto) that measures what the proxy sends it without changing a byte: how
many connections were open at once (parallel requests), and the `X-Amz-Content-SHA256` value of every request head
(which payload hash was signed). The `Host` the proxy writes and signs is the relay's address, which is what the
upstream checks the signature against."""

import re
import socket
import threading

HASH = re.compile(rb"\r\nx-amz-content-sha256:[ \t]*([^\r\n]*)\r\n", re.I)


class CountingRelay:
    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.open = 0
        self.max_open = 0
        self.accepted = 0
        self.payload_hashes = []
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self._stopped = False
        self._conns = set()

    def reset(self):
        with self._lock:
            self.max_open = self.open
            self.accepted = 0
            self.payload_hashes = []

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        self._stopped = True
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

    def _accept(self):
        while not self._stopped:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream_port), 5)
            except OSError:
                c.close()
                continue
            with self._lock:
                self.accepted += 1
                self.open += 1
                self.max_open = max(self.max_open, self.open)
                self._conns.update((c, u))
            done = threading.Event()
            threading.Thread(target=self._pipe, args=(c, u, True, done), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, False, done), daemon=True).start()

    def _pipe(self, src, dst, upstream, done):
        tail = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
                    # A field split across two reads is still found: the end of the last read is searched again.
                    window = tail + data
                    for m in HASH.finditer(window):
                        if m.end() > len(tail):
                            with self._lock:
                                self.payload_hashes.append(m.group(1).decode("latin-1"))
                    tail = window[-200:]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if not done.is_set():
                done.set()
                with self._lock:
                    self.open -= 1
            else:
                src.close()
                dst.close()
                with self._lock:
                    self._conns.discard(src)
                    self._conns.discard(dst)
