"""A listening port on 127.0.0.1 that is also held on ::1, for the test servers that tests address as `localhost`.

`localhost` resolves to ::1 as well as 127.0.0.1, and the proxy (like most clients) tries ::1 first. A port the
kernel hands out on 127.0.0.1 can at the same time be in use on ::1 by another listener (another test's server, a
service of the machine); the proxy's connection to `localhost:PORT` then reaches that listener instead, and a TLS
upstream hangs until the upstream timeout. So the server's port is one that is free on both, and the ::1 side is
held by a socket that is bound but not listening: a connect there is refused at once, and the client goes on to
127.0.0.1."""
import errno
import socket
import socketserver


def bind_loopback(make_socket, tries=50):
    """Binds a socket from `make_socket()` to a port of 127.0.0.1 that is free on ::1 too: (socket, guard), the guard
    being the socket holding [::1]:PORT (None where the host has no ::1). Close the guard with the server."""
    for _ in range(tries):
        s = make_socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        try:
            return s, _hold_ipv6(port)
        except OSError as e:
            s.close()
            if e.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, "no port free on both 127.0.0.1 and ::1 after %d tries" % tries)


def _hold_ipv6(port):
    try:
        g = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        g.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        g.bind(("::1", port))
    except OSError as e:
        g.close()
        if e.errno == errno.EADDRINUSE:
            raise
        return None  # no ::1 here (EADDRNOTAVAIL): `localhost` is 127.0.0.1 only
    return g


class LoopbackServer:
    """For socketserver.TCPServer subclasses (mixed in first): IPv6 sockets are IPv6-only, and a server asked for
    ("127.0.0.1", 0) gets a port free on ::1 too (``bind_loopback``). `server_label` names it (`server_name`)."""

    server_label = "test-server"
    loopback_guard = None

    def server_bind(self):
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if self.server_address == ("127.0.0.1", 0):
            self.socket.close()
            self.socket, self.loopback_guard = bind_loopback(self._reusable_socket)
            self.server_address = self.socket.getsockname()
        else:
            socketserver.TCPServer.server_bind(self)
        self.server_name = self.server_label
        self.server_port = self.socket.getsockname()[1]

    def _reusable_socket(self):
        s = socket.socket(self.address_family, self.socket_type)
        if self.allow_reuse_address:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return s

    def server_close(self):
        super().server_close()
        if self.loopback_guard is not None:
            self.loopback_guard.close()
