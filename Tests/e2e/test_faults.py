"""Reproducers of the defects a fault campaign found (issue 11), kept as tests: a client resetting mid-upload,
descriptor exhaustion, refused connections over max_connections, shutdown edge cases, malformed upstream
response heads, and a chunk extension sent in small writes."""

import json
import os
import re
import resource
import signal
import socket
import struct
import threading
import time

import pytest

import harness
from harness import cred
from httpraw import ConnectionClosed, RawConn, request_bytes, wait_until


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def open_fds(pid):
    """What the process's descriptors point at (sockets, files, `... (deleted)` for unlinked files)."""
    d = "/proc/%d/fd" % pid
    out = []
    for n in os.listdir(d):
        try:
            out.append(os.readlink(os.path.join(d, n)))
        except OSError:
            pass  # closed meanwhile
    return out


def deleted_files(pid):
    return [f for f in open_fds(pid) if f.endswith("(deleted)")]


def access_statuses(p):
    return [harness.parse_kv(l).get("status") for l in harness.access_lines_text(p)]


def reset(sock):
    """Closes `sock` with a TCP reset (SO_LINGER 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# ---------------------------------------------------------------------------
# chunk extensions are limited per chunk, not per read
# ---------------------------------------------------------------------------

def test_chunk_extension_sent_in_small_writes_is_refused(proxy, origin):
    """200 KB of chunk extension in 1 KB writes: 400, as when the same bytes come in one write (the 4 KiB limit
    was counted per decode call, so small writes slipped through)."""
    c = RawConn(proxy.host, proxy.port, timeout=10)
    c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.send(request_bytes("POST", origin.url + "/echo", [("Host", origin.authority),
                                                         ("Transfer-Encoding", "chunked")]))
    c.send(b"5;")
    try:
        for _ in range(200):
            c.send(b"a" * 1000)
            time.sleep(0.002)
        c.send(b"\r\nhello\r\n0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the proxy answered and closed while we were still sending
    r = c.read_response()
    harness.assert_error_json(r.status, r.get, r.body, 400)
    assert "extension" in r.json()["error"]["message"]
    assert r.get("Connection") == "close"
    c.close()
    # The proxy still serves.
    resp, body = harness.fetch(proxy, "GET", origin.url + "/json")
    assert resp.status == 200

