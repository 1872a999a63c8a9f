"""A token-checking WebSocket echo server on loopback, plain or TLS, and a minimal WebSocket client's pieces over
a raw socket (handshake by hand, masked frames out, unmasked frames in), shared by the WebSocket tests."""
import asyncio
import base64
import json
import os
import socket
import struct
import threading
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import serve
from websockets.datastructures import Headers
from websockets.http11 import Response

import harness
from loopback_port import bind_loopback

PATH = "/arcgis/rest/services/Quakes/StreamServer/subscribe"
FLOOD_FRAMES = 50
FLOOD_FRAME = 1024 * 1024


class EchoServer:
    """A WebSocket echo server on 127.0.0.1 (websockets' asyncio server in a thread; TLS with `ssl_context`) that
    checks the `token` query parameter with `accept(token)` and answers a refused handshake with an ArcGIS-style
    JSON token error (HTTP `status`: 498, or 401 with the error in the body). The message "flood" makes it send
    FLOOD_FRAMES binary frames of FLOOD_FRAME bytes; "bye" makes it close with code 4001. `closes` records how each
    connection ended (the close code the client sent or the server chose, None for a cut)."""

    def __init__(self, accept=lambda token: True, status=498, ssl_context=None):
        self.ssl_context = ssl_context
        self.accept = accept
        self.status = status
        self.handshakes = []      # (path with query, headers dict, outcome)
        self.lock = threading.Lock()
        self.flood_done = threading.Event()
        self.closes = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def _run(self):
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._main())

    async def _main(self):
        self._stop = self.loop.create_future()
        # Tests address it as `localhost`: a port free on ::1 as well (loopback_port.py).
        sock, guard = bind_loopback(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        try:
            async with serve(self._handler, sock=sock, process_request=self._process_request,
                             max_size=None, compression=None, ssl=self.ssl_context) as server:
                self.port = server.sockets[0].getsockname()[1]
                self._ready.set()
                await self._stop
        finally:
            if guard is not None:
                guard.close()

    def _process_request(self, connection, request):
        if "upgrade" not in request.headers.get("Connection", "").lower():
            # The proxy's own look at the server (`rest/info` discovery): not a handshake.
            body = b'{"error":{"code":404,"message":"Not found"}}'
            return Response(404, "Not Found", Headers([("Content-Type", "application/json"),
                                                       ("Content-Length", str(len(body)))]), body)
        token = parse_qs(urlsplit(request.path).query).get("token", [None])[0]
        ok = self.accept(token)
        with self.lock:
            self.handshakes.append((request.path, dict(request.headers.raw_items()), "ok" if ok else str(self.status)))
        if ok:
            return None
        # HTTP 498, or HTTP 401 whose body carries the token error (both shapes the proxy's detector knows; a 403 is
        # "no permission" to it, which a new token would not change).
        body = json.dumps({"error": {"code": 498, "message": "Invalid token.", "details": []}}).encode()
        return Response(self.status, "Invalid Token" if self.status == 498 else "Unauthorized",
                        Headers([("Content-Type", "application/json;charset=UTF-8"),
                                 ("Content-Length", str(len(body)))]), body)

    async def _handler(self, ws):
        try:
            async for m in ws:
                if m == "flood":
                    chunk = b"x" * FLOOD_FRAME
                    for _ in range(FLOOD_FRAMES):
                        await ws.send(chunk)
                    self.flood_done.set()
                elif m == "bye":
                    await ws.close(4001, "bye")
                else:
                    await ws.send(m)
        finally:
            with self.lock:
                self.closes.append(ws.close_code)

    def url(self, scheme="ws", path=PATH, host="127.0.0.1"):
        return "%s://%s:%d%s" % (scheme, host, self.port, path)

    def tokens(self):
        with self.lock:
            return [parse_qs(urlsplit(p).query).get("token", [None])[0] for p, _, _ in self.handshakes]

    def outcomes(self):
        with self.lock:
            return [o for _, _, o in self.handshakes]

    def stop(self):
        self.loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join(10)


def handshake_bytes(target, host):
    key = base64.b64encode(os.urandom(16)).decode()
    return ("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (target, host, key)).encode()


def read_head(sock):
    """(head as text with LF line ends, the bytes read after it)."""
    head, _, rest = harness.read_head(sock).partition(b"\r\n\r\n")
    return head.decode("latin-1").replace("\r\n", "\n"), rest


def frame(payload, opcode=1):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        h = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        h = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        h = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return h + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(sock, buf):
    def need(k):
        nonlocal buf
        while len(buf) < k:
            d = sock.recv(65536)
            if not d:
                raise EOFError("connection closed inside a frame")
            buf += d
    need(2)
    opcode, n = buf[0] & 0x0F, buf[1] & 0x7F
    at = 2
    if n == 126:
        need(4)
        n = struct.unpack("!H", buf[2:4])[0]
        at = 4
    elif n == 127:
        need(10)
        n = struct.unpack("!Q", buf[2:10])[0]
        at = 10
    need(at + n)
    return opcode, buf[at:at + n], buf[at + n:]
