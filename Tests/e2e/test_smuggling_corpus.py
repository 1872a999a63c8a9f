"""Request smuggling and response desynchronisation corpus, end to end through the real binary.

Requests: each variant is sent as raw bytes to the proxy, in front of a RawBackend that records exactly what it
receives per connection. For each one the client must get the expected status(es), and the backend must have received
either nothing, or exactly the well-framed request(s) the proxy meant: the bytes it got during the case are read
with a strict RFC 9112 parser (one Host, no obs-fold, no bare CR/LF, one unambiguous framing, a clean chunked body)
and must be exactly the expected requests, with the expected bodies, and nothing else. Where the proxy may already
have started forwarding when a body turns out malformed, a truncated request is allowed only if the proxy then closed
that upstream connection (nothing can follow it on the wire).

Responses: a malicious upstream answers one request on a keep-alive client connection; the client must get the
expected status, and the next request on that connection must get its own answer (or the connection is closed).

Variants live in two tables (REQUEST_CASES, RESPONSE_CASES); one proxy serves the whole module, with one recording
backend for the requests, one malicious upstream per response case and one honest upstream for the requests after.
"""
import re
import socket
import time

import pytest

import harness
from harness import RawBackend
from httpraw import ConnectionClosed, RawConn


# ---------------------------------------------------------------------------------------------------------
# A strict reading of what reached the backend
# ---------------------------------------------------------------------------------------------------------

TCHAR = set(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class Ambiguous(AssertionError):
    pass


class Truncated(Exception):
    """The last request is incomplete; `complete` holds the requests before it."""

    def __init__(self, message, complete=()):
        super().__init__(message)
        self.complete = list(complete)


def strict_requests(data):
    """The requests in `data`, read strictly: [(method, target, headers, body)]. Raises Ambiguous for anything a
    lenient and a strict server could read differently, Truncated when the last request is incomplete."""
    out = []
    try:
        _read_requests(data, out)
    except Truncated as t:
        raise Truncated(str(t), out)
    return out


def _read_requests(data, out):
    pos = 0
    while pos < len(data):
        end = data.find(b"\r\n\r\n", pos)
        if end < 0:
            raise Truncated("incomplete head: %r" % data[pos:pos + 200])
        head = data[pos:end]
        if b"\n" in head.replace(b"\r\n", b"") or b"\r" in head.replace(b"\r\n", b""):
            raise Ambiguous("bare CR or LF in head %r" % head[:300])
        lines = head.split(b"\r\n")
        m = re.fullmatch(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/1\.1", lines[0])
        if not m:
            raise Ambiguous("request line %r" % lines[0])
        method, target = m.group(1).decode(), m.group(2).decode()
        headers = []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or not set(name) <= TCHAR:
                raise Ambiguous("field line %r" % line)
            value = value.strip(b" \t")
            if any(c < 0x20 and c != 9 or c == 0x7f for c in value):
                raise Ambiguous("control character in %r" % line)
            headers.append((name.decode().lower(), value.decode("latin-1")))
        hosts = [v for k, v in headers if k == "host"]
        if len(hosts) != 1:
            raise Ambiguous("%d Host fields" % len(hosts))
        te = [v for k, v in headers if k == "transfer-encoding"]
        cl = [v for k, v in headers if k == "content-length"]
        pos = end + 4
        if te and cl:
            raise Ambiguous("Content-Length and Transfer-Encoding")
        if te:
            if [t.strip().lower() for t in ",".join(te).split(",")] != ["chunked"]:
                raise Ambiguous("Transfer-Encoding %r" % te)
            body = bytearray()
            while True:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    raise Truncated("incomplete chunk size line")
                size_line = data[pos:eol]
                sm = re.fullmatch(rb"([0-9a-fA-F]{1,15})(;[\x20-\x7e\t]*)?", size_line)
                if not sm:
                    raise Ambiguous("chunk size line %r" % size_line)
                size = int(sm.group(1), 16)
                pos = eol + 2
                if size == 0:
                    while True:
                        eol = data.find(b"\r\n", pos)
                        if eol < 0:
                            raise Truncated("incomplete trailer")
                        line, pos = data[pos:eol], eol + 2
                        if not line:
                            break
                        if b":" not in line or b"\r" in line or b"\n" in line:
                            raise Ambiguous("trailer line %r" % line)
                    break
                if len(data) < pos + size + 2:
                    raise Truncated("incomplete chunk")
                body += data[pos:pos + size]
                if data[pos + size:pos + size + 2] != b"\r\n":
                    raise Ambiguous("chunk data not followed by CRLF")
                pos += size + 2
            body = bytes(body)
        else:
            if len(set(cl)) > 1 or any(not re.fullmatch(r"[0-9]+", v) for v in cl):
                raise Ambiguous("Content-Length %r" % cl)
            n = int(cl[0]) if cl else 0
            if len(data) < pos + n:
                raise Truncated("incomplete body")
            body = data[pos:pos + n]
            pos += n
        out.append((method, target, headers, body))


def test_the_strict_reader_refuses_ambiguity():
    """The judge of the corpus, judged: it reads clean requests and refuses each ambiguity it is there to catch."""
    ok = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: h\r\n\r\n"
    assert [(m, t, b) for m, t, _, b in strict_requests(ok)] == [("POST", "/a", b"hello"), ("GET", "/b", b"")]
    chunked = b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n"
    assert strict_requests(chunked)[0][3] == b"hello"
    for bad in [b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"GET /a HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n", b"GET /a HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n",
                b"GET /a HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", b"GET /a HTTP/1.1\nHost: h\r\n\r\n",
                b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
                b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n",
                b"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n"]:
        with pytest.raises(Ambiguous):
            strict_requests(bad)
    with pytest.raises(Truncated):
        strict_requests(b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhel")


# ---------------------------------------------------------------------------------------------------------
# One proxy and one backend for the module
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def backend():
    b = RawBackend()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def honest():
    """A second upstream, for the request that follows a malicious answer: what the client gets for it shows the
    state of the client connection, not the malicious upstream's next lie."""
    b = RawBackend()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def corpus_proxy(proxy_binary, tmp_path_factory, backend):
    d = tmp_path_factory.mktemp("smuggling")
    port = harness.free_port()
    section = harness.default_proxy_section(port, str(d / "state"))
    section["upstream_timeout_seconds"] = 3
    section["header_timeout_seconds"] = 3
    cfg = d / "proxy.toml"
    cfg.write_text(harness.render_config(section, harness.default_log_section()))
    p = harness.Proxy(proxy_binary, str(cfg), str(d / "proxy.log"), "127.0.0.1", port).start()
    yield p
    code = p.unexpected_exit()
    p.stop()
    assert code is None, "authproxy exited during the corpus (%s); log:\n%s" % (code, p.log_text()[-3000:])


@pytest.fixture(autouse=True)
def _attach_proxy_log(request):
    """A failing case gets the proxy's log attached (conftest's report hook reads `_authproxies`)."""
    if "corpus_proxy" in request.fixturenames:
        request.node._authproxies = [request.getfixturevalue("corpus_proxy")]


# ---------------------------------------------------------------------------------------------------------
# Request variants
# ---------------------------------------------------------------------------------------------------------

class Req:
    """One request variant. `raw` is sent as is after replacing {T} (an absolute URL to the backend, unique to the
    case), {A} (the backend's authority) and {P} (the case's path). `statuses`: what the client must get, in order.
    `seen`: the (method, body) of each request the backend must receive, in order; [] for none. `closes`: whether
    the proxy must close the client connection after the last status (None: not checked). `truncated_ok`: the proxy
    may have started forwarding before the body proved malformed."""

    def __init__(self, id, raw, statuses, seen=(), closes=None, truncated_ok=False, check=None):
        self.id = id
        self.raw = raw if isinstance(raw, bytes) else raw.encode("latin-1")
        self.statuses = statuses if isinstance(statuses, list) else [statuses]
        self.seen = list(seen)
        self.closes = closes
        self.truncated_ok = truncated_ok
        self.check = check


def post(headers, body=b"", method="POST", target="{T}", version="HTTP/1.1"):
    head = "%s %s %s\r\n" % (method, target, version) + "".join(h + "\r\n" for h in headers) + "\r\n"
    return head.encode("latin-1") + (body if isinstance(body, bytes) else body.encode("latin-1"))


GET = "GET {T} HTTP/1.1\r\nHost: x\r\n\r\n"
HELLO_CHUNKED = b"5\r\nhello\r\n0\r\n\r\n"
SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"


def bad(id, raw, status=400, truncated_ok=False):
    """A request the proxy must refuse before (or while) forwarding it, closing the connection."""
    return Req(id, raw, status, seen=[], closes=True, truncated_ok=truncated_ok)


def fine(id, raw, body=b"", method="POST", check=None):
    """A request the proxy must forward once, as exactly one well-framed request with `body`."""
    return Req(id, raw, 200, seen=[(method, body)], check=check)


def upstream_host_is_the_url_authority(reqs, backend):
    assert [dict(h)["host"] for _, _, h, _ in reqs] == [backend.authority], reqs


def no_hop_by_hop(reqs, backend):
    for _, _, headers, _ in reqs:
        names = {k for k, _ in headers}
        assert not names & {"upgrade", "keep-alive", "proxy-authorization", "te", "proxy-connection", "x-private"}, headers


def untouched_field(name, value):
    def check(reqs, backend):
        assert [v for k, v in reqs[0][2] if k == name] == [value], reqs[0][2]
    return check


REQUEST_CASES = [
    # --- CL.TE and TE.CL: both framings present -> 400, nothing forwarded -----------------------------------
    bad("CL.TE/plain", post(["Host: x", "Content-Length: 6", "Transfer-Encoding: chunked"], b"0\r\n\r\nG")),
    bad("CL.TE/smuggled-get", post(["Host: x", "Content-Length: 44", "Transfer-Encoding: chunked"],
                                   b"0\r\n\r\n" + SMUGGLED)),
    bad("CL.TE/te-first", post(["Host: x", "Transfer-Encoding: chunked", "Content-Length: 4"], b"5c\r\nGPOST / HTTP/1.1\r\n")),
    bad("TE.CL/plain", post(["Host: x", "Transfer-Encoding: chunked", "Content-Length: 3"],
                            b"8\r\nSMUGGLED\r\n0\r\n\r\n")),
    bad("TE.CL/cl-zero", post(["Host: x", "Content-Length: 0", "Transfer-Encoding: chunked"], HELLO_CHUNKED)),
    bad("TE.CL/lowercase-names", post(["host: x", "transfer-encoding: chunked", "content-length: 5"], HELLO_CHUNKED)),
    bad("TE.CL/xchunked", post(["Host: x", "Content-Length: 4", "Transfer-Encoding: xchunked"], b"abcd")),
    bad("TE.CL/te-tab", post(["Host: x", "Transfer-Encoding:\tchunked", "Content-Length: 5"], HELLO_CHUNKED)),
    bad("TE.CL/te-identity", post(["Host: x", "Transfer-Encoding: identity", "Content-Length: 5"], b"hello")),
    bad("TE.CL/te-empty", post(["Host: x", "Transfer-Encoding:", "Content-Length: 5"], b"hello")),
    bad("TE.CL/cl-list", post(["Host: x", "Content-Length: 5, 5", "Transfer-Encoding: chunked"], HELLO_CHUNKED)),
    bad("TE.CL/te-in-10", post(["Host: x", "Transfer-Encoding: chunked", "Content-Length: 5"], HELLO_CHUNKED,
                               version="HTTP/1.0")),
    bad("TE.CL/te-space-before-colon", post(["Host: x", "Content-Length: 5", "Transfer-Encoding : chunked"], b"hello")),
    bad("TE.CL/cl-space-before-colon", post(["Host: x", "Content-Length : 5", "Transfer-Encoding: chunked"], HELLO_CHUNKED)),
    # --- TE.TE: obfuscated Transfer-Encoding -------------------------------------------------------------------
    bad("TE.TE/xchunked", post(["Host: x", "Transfer-Encoding: xchunked"], HELLO_CHUNKED), 501),
    bad("TE.TE/chunked-chunked", post(["Host: x", "Transfer-Encoding: chunked, chunked"], HELLO_CHUNKED), 501),
    bad("TE.TE/duplicate-field", post(["Host: x", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
                                      HELLO_CHUNKED), 501),
    bad("TE.TE/duplicate-identity", post(["Host: x", "Transfer-Encoding: chunked", "Transfer-Encoding: identity"],
                                         HELLO_CHUNKED), 501),
    bad("TE.TE/identity-chunked", post(["Host: x", "Transfer-Encoding: identity, chunked"], HELLO_CHUNKED), 501),
    bad("TE.TE/gzip-chunked", post(["Host: x", "Transfer-Encoding: gzip, chunked"], HELLO_CHUNKED), 501),
    bad("TE.TE/chunked-gzip", post(["Host: x", "Transfer-Encoding: chunked, gzip"], HELLO_CHUNKED), 501),
    bad("TE.TE/chunk", post(["Host: x", "Transfer-Encoding: chunk"], HELLO_CHUNKED), 501),
    bad("TE.TE/chunked-param", post(["Host: x", "Transfer-Encoding: chunked;q=1"], HELLO_CHUNKED), 501),
    bad("TE.TE/quoted", post(["Host: x", 'Transfer-Encoding: "chunked"'], HELLO_CHUNKED), 501),
    bad("TE.TE/empty-value", post(["Host: x", "Transfer-Encoding:"], HELLO_CHUNKED), 501),
    bad("TE.TE/chunked-space-chunked", post(["Host: x", "Transfer-Encoding: chunked chunked"], HELLO_CHUNKED), 501),
    bad("TE.TE/space-before-colon", post(["Host: x", "Transfer-Encoding : chunked"], HELLO_CHUNKED)),
    bad("TE.TE/tab-before-colon", post(["Host: x", "Transfer-Encoding\t: chunked"], HELLO_CHUNKED)),
    bad("TE.TE/vertical-tab-value", post(["Host: x", "Transfer-Encoding:\x0bchunked"], HELLO_CHUNKED)),
    bad("TE.TE/form-feed-value", post(["Host: x", "Transfer-Encoding: chunked\x0c"], HELLO_CHUNKED)),
    bad("TE.TE/vertical-tab-name", post(["Host: x", "Transfer-Encoding\x0b: chunked"], HELLO_CHUNKED)),
    bad("TE.TE/nul-in-value", post(["Host: x", "Transfer-Encoding: chunked\x00"], HELLO_CHUNKED)),
    bad("TE.TE/leading-space-line", post(["Host: x", " Transfer-Encoding: chunked"], HELLO_CHUNKED)),
    bad("TE.TE/leading-tab-line", post(["Host: x", "\tTransfer-Encoding: chunked"], HELLO_CHUNKED)),
    bad("TE.TE/folded-value", post(["Host: x", "Transfer-Encoding:", " chunked"], HELLO_CHUNKED)),
    bad("TE.TE/folded-after-other", post(["Host: x", "X-A: 1", " Transfer-Encoding: chunked"], HELLO_CHUNKED)),
    bad("TE.TE/in-http10", post(["Host: x", "Transfer-Encoding: chunked"], HELLO_CHUNKED, version="HTTP/1.0")),
    bad("TE.TE/bare-lf-before", b"POST {T} HTTP/1.1\r\nHost: x\nTransfer-Encoding: chunked\r\n\r\n" + HELLO_CHUNKED),
    bad("TE.TE/bare-cr-before", b"POST {T} HTTP/1.1\r\nHost: x\rTransfer-Encoding: chunked\r\n\r\n" + HELLO_CHUNKED),
    fine("TE.TE/uppercase-value", post(["Host: x", "Transfer-Encoding: CHUNKED"], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/mixed-case-value", post(["Host: x", "Transfer-Encoding: ChUnKeD"], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/lowercase-name", post(["Host: x", "transfer-encoding: chunked"], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/leading-spaces", post(["Host: x", "Transfer-Encoding:    chunked"], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/trailing-spaces", post(["Host: x", "Transfer-Encoding: chunked   "], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/leading-tab", post(["Host: x", "Transfer-Encoding:\tchunked"], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/trailing-tab", post(["Host: x", "Transfer-Encoding: chunked\t"], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/no-space", post(["Host: x", "Transfer-Encoding:chunked"], HELLO_CHUNKED), b"hello"),
    fine("TE.TE/empty-list-elements", post(["Host: x", "Transfer-Encoding: , chunked,"], HELLO_CHUNKED), b"hello"),
    # A different field to the proxy (and to RFC 9110): the request has no body; the field goes on untouched.
    Req("TE.TE/underscore-name", post(["Host: x", "Transfer_Encoding: chunked"]) + b"GET {T}/2 HTTP/1.1\r\nHost: x\r\n\r\n",
        [200, 200], seen=[("POST", b""), ("GET", b"")], check=untouched_field("transfer_encoding", "chunked")),
    # --- Content-Length forms ----------------------------------------------------------------------------------
    fine("CL/plain", post(["Host: x", "Content-Length: 5"], b"hello"), b"hello"),
    fine("CL/leading-zero", post(["Host: x", "Content-Length: 05"], b"hello"), b"hello"),
    fine("CL/many-zeros", post(["Host: x", "Content-Length: 0000000005"], b"hello"), b"hello"),
    fine("CL/same-list", post(["Host: x", "Content-Length: 5,5"], b"hello"), b"hello"),
    fine("CL/same-list-spaced", post(["Host: x", "Content-Length: 5 , 5"], b"hello"), b"hello"),
    fine("CL/same-twice", post(["Host: x", "Content-Length: 5", "Content-Length: 5"], b"hello"), b"hello"),
    fine("CL/no-space", post(["Host: x", "Content-Length:5"], b"hello"), b"hello"),
    fine("CL/tab", post(["Host: x", "Content-Length:\t5\t"], b"hello"), b"hello"),
    fine("CL/lowercase", post(["Host: x", "content-length: 5"], b"hello"), b"hello"),
    fine("CL/zero", post(["Host: x", "Content-Length: 0"]), b""),
    fine("CL/get-with-body", post(["Host: x", "Content-Length: 5"], b"hello", method="GET"), b"hello", method="GET"),
    fine("CL/delete-with-body", post(["Host: x", "Content-Length: 5"], b"hello", method="DELETE"), b"hello",
         method="DELETE"),
    fine("CL/body-is-a-request", post(["Host: x", "Content-Length: %d" % len(SMUGGLED)], SMUGGLED), SMUGGLED),
    fine("CL/body-is-chunked-framing", post(["Host: x", "Content-Length: 15"], HELLO_CHUNKED), HELLO_CHUNKED),
    bad("CL/plus", post(["Host: x", "Content-Length: +5"], b"hello")),
    bad("CL/minus", post(["Host: x", "Content-Length: -5"], b"hello")),
    bad("CL/negative-zero", post(["Host: x", "Content-Length: -0"], b"")),
    bad("CL/differing-list", post(["Host: x", "Content-Length: 5,6"], b"hello!")),
    bad("CL/differing-fields", post(["Host: x", "Content-Length: 5", "Content-Length: 6"], b"hello!")),
    bad("CL/differing-leading-zero-list", post(["Host: x", "Content-Length: 5, 05, 6"], b"hello!")),
    bad("CL/empty-list-element", post(["Host: x", "Content-Length: 5,,5"], b"hello")),
    bad("CL/trailing-comma", post(["Host: x", "Content-Length: 5,"], b"hello")),
    bad("CL/empty", post(["Host: x", "Content-Length:"], b"hello")),
    bad("CL/hex", post(["Host: x", "Content-Length: 0x5"], b"hello")),
    bad("CL/decimal-point", post(["Host: x", "Content-Length: 5.0"], b"hello")),
    bad("CL/exponent", post(["Host: x", "Content-Length: 5e0"], b"hello")),
    bad("CL/inner-space", post(["Host: x", "Content-Length: 5 5"], b"hello")),
    bad("CL/letters", post(["Host: x", "Content-Length: five"], b"hello")),
    bad("CL/unicode-digit", post(["Host: x", "Content-Length: \xd9\xa5"], b"hello")),
    bad("CL/huge", post(["Host: x", "Content-Length: 99999999999999999999"], b"hello")),
    bad("CL/int64-max", post(["Host: x", "Content-Length: 9223372036854775807"], b"hello")),
    bad("CL/overflow-wraps-to-5", post(["Host: x", "Content-Length: 18446744073709551621"], b"hello")),
    bad("CL/space-before-colon", post(["Host: x", "Content-Length : 5"], b"hello")),
    bad("CL/vertical-tab", post(["Host: x", "Content-Length:\x0b5"], b"hello")),
    bad("CL/nul", post(["Host: x", "Content-Length: 5\x00"], b"hello")),
    bad("CL/folded", post(["Host: x", "Content-Length:", " 5"], b"hello")),
    bad("CL/connect-with-body", b"CONNECT {A} HTTP/1.1\r\nHost: {A}\r\nContent-Length: 5\r\n\r\nhello"),
    # Body shorter than declared: the proxy takes the next bytes as body (the client's own framing), once.
    Req("CL/swallows-next-request", post(["Host: x", "Content-Length: 10"], b"hello") + b"GET {T}/2 HTTP/1.1\r\n\r\n",
        [200, 400], seen=[("POST", b"helloGET h")], closes=True),
    # --- Chunk-size tricks -------------------------------------------------------------------------------------
    fine("chunk/lowercase-hex", post(["Host: x", "Transfer-Encoding: chunked"], b"a\r\n0123456789\r\n0\r\n\r\n"),
         b"0123456789"),
    fine("chunk/uppercase-hex", post(["Host: x", "Transfer-Encoding: chunked"], b"A\r\n0123456789\r\n0\r\n\r\n"),
         b"0123456789"),
    fine("chunk/leading-zeros", post(["Host: x", "Transfer-Encoding: chunked"], b"0005\r\nhello\r\n000\r\n\r\n"), b"hello"),
    fine("chunk/fifteen-digits", post(["Host: x", "Transfer-Encoding: chunked"],
                                      b"000000000000005\r\nhello\r\n0\r\n\r\n"), b"hello"),
    fine("chunk/extension", post(["Host: x", "Transfer-Encoding: chunked"], b"5;name=value\r\nhello\r\n0\r\n\r\n"), b"hello"),
    fine("chunk/extensions-quoted", post(["Host: x", "Transfer-Encoding: chunked"],
                                         b'5;a=b;c="d;e"\r\nhello\r\n0;z\r\n\r\n'), b"hello"),
    fine("chunk/extension-after-space", post(["Host: x", "Transfer-Encoding: chunked"], b"5 ;x\r\nhello\r\n0\r\n\r\n"),
         b"hello"),
    fine("chunk/several", post(["Host: x", "Transfer-Encoding: chunked"], b"2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n"), b"hello"),
    fine("chunk/empty-body", post(["Host: x", "Transfer-Encoding: chunked"], b"0\r\n\r\n"), b""),
    fine("chunk/trailer-dropped", post(["Host: x", "Transfer-Encoding: chunked"],
                                       b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n"), b"hello"),
    fine("chunk/trailer-framing-fields", post(["Host: x", "Transfer-Encoding: chunked"],
                                              b"5\r\nhello\r\n0\r\nContent-Length: 99\r\nTransfer-Encoding: x\r\n\r\n"),
         b"hello"),
    fine("chunk/data-is-a-request", post(["Host: x", "Transfer-Encoding: chunked"],
                                         b"%x\r\n" % len(b"0\r\n\r\n" + SMUGGLED) + b"0\r\n\r\n" + SMUGGLED + b"\r\n0\r\n\r\n"),
         b"0\r\n\r\n" + SMUGGLED),
    bad("chunk/0x-prefix", post(["Host: x", "Transfer-Encoding: chunked"], b"0x5\r\nhello\r\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/0X-prefix", post(["Host: x", "Transfer-Encoding: chunked"], b"0X5\r\nhello\r\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/plus", post(["Host: x", "Transfer-Encoding: chunked"], b"+5\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/minus", post(["Host: x", "Transfer-Encoding: chunked"], b"-5\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/leading-space", post(["Host: x", "Transfer-Encoding: chunked"], b" 5\r\nhello\r\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/not-hex", post(["Host: x", "Transfer-Encoding: chunked"], b"g\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/empty-size", post(["Host: x", "Transfer-Encoding: chunked"], b"\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/sixteen-digits", post(["Host: x", "Transfer-Encoding: chunked"],
                                     b"0000000000000005\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/overflow-64bit", post(["Host: x", "Transfer-Encoding: chunked"],
                                     b"10000000000000005\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/overflow-all-f", post(["Host: x", "Transfer-Encoding: chunked"],
                                     b"ffffffffffffffff\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/lf-only", post(["Host: x", "Transfer-Encoding: chunked"], b"5\nhello\n0\n\n"), truncated_ok=True),
    bad("chunk/lf-after-data", post(["Host: x", "Transfer-Encoding: chunked"], b"5\r\nhello\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/cr-only", post(["Host: x", "Transfer-Encoding: chunked"], b"5\rhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/data-longer", post(["Host: x", "Transfer-Encoding: chunked"], b"3\r\nhello\r\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/data-shorter", post(["Host: x", "Transfer-Encoding: chunked"], b"8\r\nhello\r\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/bare-lf-in-extension", post(["Host: x", "Transfer-Encoding: chunked"], b"5;a\nb\r\nhello\r\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/nul-in-extension", post(["Host: x", "Transfer-Encoding: chunked"], b"5;a\x00\r\nhello\r\n0\r\n\r\n"),
        truncated_ok=True),
    bad("chunk/extension-too-long", post(["Host: x", "Transfer-Encoding: chunked"],
                                         b"5;" + b"x" * 5000 + b"\r\nhello\r\n0\r\n\r\n"), truncated_ok=True),
    bad("chunk/bare-lf-in-trailer", post(["Host: x", "Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\nX: 1\n\r\n"),
        truncated_ok=True),
    bad("chunk/bare-cr-in-trailer", post(["Host: x", "Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\nX: 1\r\r\n"),
        truncated_ok=True),
    bad("chunk/trailers-too-large", post(["Host: x", "Transfer-Encoding: chunked"],
                                         b"5\r\nhello\r\n0\r\n" + b"X-T: " + b"t" * 70000 + b"\r\n\r\n"), 431,
        truncated_ok=True),
    bad("chunk/last-chunk-missing-crlf", post(["Host: x", "Transfer-Encoding: chunked"],
                                              b"5\r\nhello\r\n0\r\n" + SMUGGLED), truncated_ok=True),
    # --- Bare CR, bare LF, NUL, other bytes in the head --------------------------------------------------------
    bad("bytes/lf-request-line", b"GET {T} HTTP/1.1\nHost: x\r\n\r\n"),
    bad("bytes/lf-field", b"GET {T} HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n"),
    bad("bytes/lf-only-head", b"GET {T} HTTP/1.1\nHost: x\n\n"),
    bad("bytes/lf-end", b"GET {T} HTTP/1.1\r\nHost: x\r\n\n"),
    bad("bytes/leading-lf", b"\nGET {T} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/cr-request-line", b"GET {T} HTTP/1.1\rHost: x\r\n\r\n"),
    bad("bytes/cr-in-value", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n"),
    bad("bytes/cr-in-name", b"GET {T} HTTP/1.1\r\nHost: x\r\nX\r-A: b\r\n\r\n"),
    bad("bytes/crcrlf", b"GET {T} HTTP/1.1\r\r\nHost: x\r\n\r\n"),
    bad("bytes/nul-in-value", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n"),
    bad("bytes/nul-in-name", b"GET {T} HTTP/1.1\r\nHost: x\r\nX\x00A: b\r\n\r\n"),
    bad("bytes/nul-in-target", b"GET {T}\x00 HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/nul-in-method", b"GE\x00T {T} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/del-in-value", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n"),
    bad("bytes/escape-in-value", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-A: a\x1bb\r\n\r\n"),
    bad("bytes/space-in-target", b"GET {T}/a b HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/tab-in-target", b"GET {T}/a\tb HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/non-ascii-target", b"GET {T}/\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/tab-separator", b"GET\t{T} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/double-space", b"GET  {T} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/leading-space", b" GET {T} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/trailing-space-version", b"GET {T} HTTP/1.1 \r\nHost: x\r\n\r\n"),
    bad("bytes/lowercase-version", b"GET {T} http/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/version-2", b"GET {T} HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    bad("bytes/version-1.2", b"GET {T} HTTP/1.2\r\nHost: x\r\n\r\n", 505),
    bad("bytes/version-0.9", b"GET {T}\r\n\r\n"),
    bad("bytes/invalid-method", b"G(ET {T} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("bytes/no-colon", b"GET {T} HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n"),
    bad("bytes/empty-name", b"GET {T} HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n"),
    bad("bytes/name-with-slash", b"GET {T} HTTP/1.1\r\nHost: x\r\nX/A: v\r\n\r\n"),
    bad("bytes/obs-fold", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n continued\r\n\r\n"),
    bad("bytes/request-line-too-long", b"GET {T}/" + b"a" * 8300 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    bad("bytes/header-too-large", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 70000 + b"\r\n\r\n", 431),
    bad("bytes/too-many-fields", b"GET {T} HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(101))
        + b"\r\n", 431),
    fine("bytes/leading-crlf", b"\r\n\r\nGET {T} HTTP/1.1\r\nHost: x\r\n\r\n", method="GET"),
    fine("bytes/encoded-crlf-in-target", b"GET {T}/%0d%0aX-Injected:%20y HTTP/1.1\r\nHost: x\r\n\r\n", method="GET"),
    fine("bytes/obs-text-value", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-A: caf\xe9\r\n\r\n", method="GET"),
    fine("bytes/lowercase-method", b"get {T} HTTP/1.1\r\nHost: x\r\n\r\n", method="get"),
    fine("bytes/unknown-method", b"FROB {T} HTTP/1.1\r\nHost: x\r\n\r\n", method="FROB"),
    # --- Absolute-form authority against Host, user info, targets ---------------------------------------------
    fine("authority/host-differs", b"GET {T} HTTP/1.1\r\nHost: evil.example\r\n\r\n", method="GET",
         check=upstream_host_is_the_url_authority),
    fine("authority/no-host", b"GET {T} HTTP/1.1\r\n\r\n", method="GET", check=upstream_host_is_the_url_authority),
    fine("authority/empty-host", b"GET {T} HTTP/1.1\r\nHost:\r\n\r\n", method="GET",
         check=upstream_host_is_the_url_authority),
    fine("authority/host-with-port", b"GET {T} HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", method="GET",
         check=upstream_host_is_the_url_authority),
    fine("authority/uppercase-scheme", b"GET HTTP://{A}{P} HTTP/1.1\r\nHost: x\r\n\r\n", method="GET",
         check=upstream_host_is_the_url_authority),
    fine("authority/query-only", b"GET http://{A}?q={P} HTTP/1.1\r\nHost: x\r\n\r\n", method="GET"),
    bad("authority/two-hosts", b"GET {T} HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
    bad("authority/userinfo", b"GET http://user:pw@{A}{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/userinfo-no-password", b"GET http://user@{A}{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/at-in-host", b"GET http://{A}@evil.example{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/backslash-at", b"GET http://evil.example\\@{A}{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/fragment-at", b"GET http://{A}#@evil.example{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/fragment-in-path", b"GET {T}#frag HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/percent-host", b"GET http://127.0.0%2e1:1{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/two-ports", b"GET http://{A}:80{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/port-zero", b"GET http://127.0.0.1:0{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/port-too-big", b"GET http://127.0.0.1:65536{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/empty-host-in-url", b"GET http:///x HTTP/1.1\r\nHost: {A}\r\n\r\n"),
    Req("authority/scheme-relative", b"GET //{A}{P} HTTP/1.1\r\nHost: x\r\n\r\n", 404, seen=[]),
    bad("authority/ftp-scheme", b"GET ftp://{A}{P} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/connect-userinfo", b"CONNECT user@{A} HTTP/1.1\r\nHost: x\r\n\r\n"),
    bad("authority/connect-port-refused", b"CONNECT {A} HTTP/1.1\r\nHost: {A}\r\n\r\n" + SMUGGLED, 403),
    # Origin-form names the proxy itself: never routed by Host.
    Req("authority/origin-form-host-is-backend", b"GET {P} HTTP/1.1\r\nHost: {A}\r\n\r\n", 404, seen=[]),
    # --- Pipelining after bodies -------------------------------------------------------------------------------
    Req("pipeline/cl-then-get", post(["Host: x", "Content-Length: 5"], b"hello") + GET.encode(),
        [200, 200], seen=[("POST", b"hello"), ("GET", b"")]),
    Req("pipeline/chunked-then-get", post(["Host: x", "Transfer-Encoding: chunked"], HELLO_CHUNKED) + GET.encode(),
        [200, 200], seen=[("POST", b"hello"), ("GET", b"")]),
    Req("pipeline/cl-zero-then-get", post(["Host: x", "Content-Length: 0"]) + GET.encode(),
        [200, 200], seen=[("POST", b""), ("GET", b"")]),
    Req("pipeline/three", (GET * 2 + "GET {T} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").encode(),
        [200, 200, 200], seen=[("GET", b"")] * 3, closes=True),
    Req("pipeline/chunked-with-trailer-then-post",
        post(["Host: x", "Transfer-Encoding: chunked"], b"5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n")
        + post(["Host: x", "Content-Length: 3"], b"abc"), [200, 200], seen=[("POST", b"hello"), ("POST", b"abc")]),
    Req("pipeline/then-cl-te", post(["Host: x", "Content-Length: 5"], b"hello")
        + post(["Host: x", "Content-Length: 6", "Transfer-Encoding: chunked"], b"0\r\n\r\nG"),
        [200, 400], seen=[("POST", b"hello")], closes=True),
    Req("pipeline/then-bad-chunk", post(["Host: x", "Transfer-Encoding: chunked"], HELLO_CHUNKED)
        + post(["Host: x", "Transfer-Encoding: chunked"], b"0x5\r\nhello\r\n0\r\n\r\n"),
        [200, 400], seen=[("POST", b"hello")], closes=True, truncated_ok=True),
    Req("pipeline/then-garbage", post(["Host: x", "Content-Length: 5"], b"hello") + b"\x16\x03\x01garbage\r\n\r\n",
        [200, 400], seen=[("POST", b"hello")], closes=True),
    Req("pipeline/after-connection-close", b"GET {T} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" + GET.encode(),
        [200], seen=[("GET", b"")], closes=True),
    Req("pipeline/after-error", b"GET {T} HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n" + GET.encode(),
        [400], seen=[], closes=True),
    Req("pipeline/after-local-answer", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + GET.encode(),
        [200, 200], seen=[("GET", b"")]),
    Req("pipeline/after-refused-connect", b"CONNECT {A} HTTP/1.1\r\nHost: x\r\n\r\n" + GET.encode(),
        [403], seen=[], closes=True),
    # --- Expect ------------------------------------------------------------------------------------------------
    fine("expect/100-continue-with-body", post(["Host: x", "Expect: 100-continue", "Content-Length: 5"], b"hello"),
         b"hello"),
    fine("expect/100-continue-mixed-case", post(["Host: x", "Expect: 100-Continue", "Content-Length: 5"], b"hello"),
         b"hello"),
    fine("expect/100-continue-chunked", post(["Host: x", "Expect: 100-continue", "Transfer-Encoding: chunked"],
                                             HELLO_CHUNKED), b"hello"),
    fine("expect/100-continue-no-body", post(["Host: x", "Expect: 100-continue"], method="GET"), method="GET"),
    fine("expect/100-continue-http10", post(["Host: x", "Expect: 100-continue", "Content-Length: 5"], b"hello",
                                            version="HTTP/1.0"), b"hello"),
    Req("expect/100-continue-then-get", post(["Host: x", "Expect: 100-continue", "Content-Length: 5"], b"hello")
        + GET.encode(), [200, 200], seen=[("POST", b"hello"), ("GET", b"")]),
    bad("expect/other-value", post(["Host: x", "Expect: foo", "Content-Length: 5"], b"hello"), 417),
    bad("expect/continue-and-other", post(["Host: x", "Expect: 100-continue, foo", "Content-Length: 5"], b"hello"), 417),
    bad("expect/102", post(["Host: x", "Expect: 102-processing", "Content-Length: 5"], b"hello"), 417),
    bad("expect/empty", post(["Host: x", "Expect:", "Content-Length: 5"], b"hello"), 417),
    bad("expect/with-cl-te", post(["Host: x", "Expect: 100-continue", "Content-Length: 5",
                                   "Transfer-Encoding: chunked"], HELLO_CHUNKED)),
    # --- HTTP/1.0 keep-alive -----------------------------------------------------------------------------------
    Req("http10/closes-by-default", (GET.replace("HTTP/1.1", "HTTP/1.0") + GET).encode(),
        [200], seen=[("GET", b"")], closes=True),
    Req("http10/keep-alive", ("GET {T} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + GET).encode(),
        [200, 200], seen=[("GET", b"")] * 2),
    Req("http10/proxy-connection-keep-alive", ("GET {T} HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n" + GET).encode(),
        [200, 200], seen=[("GET", b"")] * 2),
    Req("http10/keep-alive-post", post(["Connection: keep-alive", "Content-Length: 5"], b"hello", version="HTTP/1.0")
        + GET.encode(), [200, 200], seen=[("POST", b"hello"), ("GET", b"")]),
    Req("http10/keep-alive-then-close", ("GET {T} HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                                         "GET {T} HTTP/1.0\r\n\r\n" + GET).encode(),
        [200, 200], seen=[("GET", b"")] * 2, closes=True),
    Req("http10/body-without-length", b"POST {T} HTTP/1.0\r\n\r\nhello", [200], seen=[("POST", b"")], closes=True),
    # --- Hop-by-hop fields never reach the backend -------------------------------------------------------------
    fine("hop/listed-in-connection", b"GET {T} HTTP/1.1\r\nHost: x\r\nConnection: X-Private, Upgrade\r\n"
         b"X-Private: secret\r\nUpgrade: h2c\r\nKeep-Alive: 5\r\nTE: trailers\r\nProxy-Authorization: Basic eDp5\r\n"
         b"Proxy-Connection: keep-alive\r\n\r\n", method="GET", check=no_hop_by_hop),
    fine("hop/connection-names-content-length", post(["Host: x", "Connection: Content-Length", "Content-Length: 5"],
                                                     b"hello"), b"hello"),
    fine("hop/connection-names-transfer-encoding", post(["Host: x", "Connection: Transfer-Encoding",
                                                         "Transfer-Encoding: chunked"], HELLO_CHUNKED), b"hello"),
    fine("hop/h2c-upgrade-with-body", post(["Host: x", "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c",
                                            "HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA", "Content-Length: 5"], b"hello"),
         b"hello", check=no_hop_by_hop),
    fine("hop/head", b"HEAD {T} HTTP/1.1\r\nHost: x\r\n\r\n", method="HEAD"),
]

assert len({c.id for c in REQUEST_CASES}) == len(REQUEST_CASES), "duplicate case ids"


def fill(raw, backend, case_id):
    path = "/c/" + re.sub(r"[^A-Za-z0-9._-]", "_", case_id)
    return (raw.replace(b"{T}", (backend.url + path).encode()).replace(b"{A}", backend.authority.encode())
            .replace(b"{P}", path.encode())), path


def read_responses(proxy, data, count, check_close):
    """Sends `data` on one connection and reads up to `count` responses -> (responses, closed afterwards; None when
    not checked and the connection was still open)."""
    responses = []
    with RawConn(proxy.host, proxy.port, timeout=6) as c:
        c.send(data)
        try:
            for _ in range(count):
                head_request = data.startswith(b"HEAD") and not responses
                responses.append(c.read_response(method="HEAD" if head_request else "GET"))
        except (ConnectionClosed, ConnectionResetError, socket.timeout, ValueError):
            return responses, True
        if not check_close:
            return responses, None
        try:
            return responses, c.closed_by_peer(timeout=0.5)
        except AssertionError as e:
            raise AssertionError("bytes after the expected responses: %s" % e)


def received_during(backend, snap, truncated_ok, first_request):
    """[(connection, request)] the backend received since `snap`, read strictly, in the order they arrived: a
    request may take another upstream connection than the one before it (libcurl gives a bodyless POST a new one),
    so the per-connection lists are merged in the order the backend delimited them (`backend.requests` from
    `first_request` on). A truncated last request is allowed only with `truncated_ok`, and only if the proxy then
    closed that upstream connection."""
    per_connection = {}
    for index, data, _ in backend.since(snap):
        try:
            per_connection[index] = list(strict_requests(data))
        except Truncated as t:
            assert truncated_ok, "truncated request on upstream connection %d (%s): %r" % (index, t, data[:400])
            assert backend.wait_closed(index, 3), "upstream connection left open after a truncated request: %r" % data[:400]
            per_connection[index] = list(t.complete)
    received = []
    with backend.lock:
        arrival = [r.conn for r in backend.requests[first_request:]]
    for index in arrival:
        if per_connection.get(index):
            received.append((index, per_connection[index].pop(0)))
    for index in sorted(per_connection):
        received += [(index, r) for r in per_connection[index]]
    return received


@pytest.mark.parametrize("case", REQUEST_CASES, ids=[c.id for c in REQUEST_CASES])
def test_request_variant(corpus_proxy, backend, case):
    data, path = fill(case.raw, backend, case.id)
    snap = backend.snapshot()
    with backend.lock:
        first_request = len(backend.requests)
    responses, closed = read_responses(corpus_proxy, data, len(case.statuses), case.closes is not None)
    assert [r.status for r in responses] == case.statuses, [(r.status, r.body[:200]) for r in responses]
    for r in responses:
        # Each answer the backend gave names its own request: no answer went to the wrong request.
        if r.status == 200 and r.body and b'"status"' not in r.body:
            assert path.encode() in r.body, r.body[:200]
    if case.closes is not None:
        assert closed == case.closes, "connection %s" % ("closed" if closed else "kept open")

    time.sleep(0.05)  # whatever the proxy forwards for this case has reached the backend by now
    received = received_during(backend, snap, case.truncated_ok, first_request)
    got = [(m, b) for _, (m, t, h, b) in received]
    assert got == case.seen, "backend received %r" % [(m, t, b[:80]) for _, (m, t, h, b) in received]
    for _, (m, t, h, b) in received:
        assert path in t, "a request for another case reached the backend: %s %s" % (m, t)
    if case.check:
        case.check([r for _, r in received], backend)


def test_the_corpus_is_large_enough():
    assert len(REQUEST_CASES) >= 150, len(REQUEST_CASES)


# ---------------------------------------------------------------------------------------------------------
# Response variants: a malicious upstream must not desynchronise the client's keep-alive connection
# ---------------------------------------------------------------------------------------------------------

class Resp:
    """The upstream answers the case's request with `actions` (bytes, seconds to wait, RawBackend.CLOSE). The client
    must get a status in `statuses` (and `body`, when given); `truncated_ok`: the proxy may cut the connection in the
    body (the head was out when the upstream failed). `known`: the response-head hygiene defect the case
    was written for; the case asserts the fixed behaviour."""

    def __init__(self, id, actions, statuses, body=None, method="GET", truncated_ok=False, known=None):
        self.id = id
        self.actions = actions if isinstance(actions, list) else [actions]
        self.statuses = statuses if isinstance(statuses, (set, frozenset)) else {statuses}
        self.body = body
        self.method = method
        self.truncated_ok = truncated_ok
        self.known = known


H = b"HTTP/1.1 200 OK\r\n"
LATE = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED"
CLOSE = RawBackend.CLOSE
EITHER = {200, 502}

RESPONSE_CASES = [
    # --- Content-Length and Transfer-Encoding together, several lengths --------------------------------------
    Resp("CL+TE/chunked-wins", H + b"Content-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n" + HELLO_CHUNKED, 200, b"hello"),
    Resp("CL+TE/short-length", H + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n" + HELLO_CHUNKED, 200, b"hello"),
    Resp("TE+CL/te-first", H + b"Transfer-Encoding: chunked\r\nContent-Length: 50\r\n\r\n" + HELLO_CHUNKED, 200, b"hello"),
    Resp("CL+TE/zero-length", H + b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n" + HELLO_CHUNKED, 200, b"hello"),
    Resp("two-CL/equal", H + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 200, b"hello"),
    Resp("two-CL/equal-list", H + b"Content-Length: 5, 5\r\n\r\nhello", 200, b"hello"),
    Resp("two-CL/differ", H + b"Content-Length: 5\r\nContent-Length: 10\r\n\r\nhelloworld", 502, known="two Content-Length values"),
    Resp("two-CL/differ-reversed", H + b"Content-Length: 10\r\nContent-Length: 5\r\n\r\nhelloworld", 502,
         known="two Content-Length values"),
    Resp("two-CL/differ-list", H + b"Content-Length: 5, 10\r\n\r\nhelloworld", 502, known="two Content-Length values"),
    Resp("CL/plus-sign", H + b"Content-Length: +5\r\n\r\nhello", 502),  # not 1*DIGIT (RFC 9110 §8.6)
    Resp("CL/leading-zeros", H + b"Content-Length: 005\r\n\r\nhello", 200, b"hello"),
    Resp("CL/negative", H + b"Content-Length: -1\r\n\r\nhello", EITHER),
    Resp("CL/letters", H + b"Content-Length: five\r\n\r\nhello", EITHER),
    Resp("CL/overflow", [H + b"Content-Length: 99999999999999999999\r\n\r\nhello", CLOSE], EITHER, truncated_ok=True),
    Resp("CL/folded", H + b"Content-Length: 5\r\n 6\r\n\r\nhello", EITHER),
    Resp("CL/extra-bytes-after-body", H + b"Content-Length: 5\r\n\r\nhello" + LATE, 200, b"hello"),
    # Late bytes on the upstream connection (it is not reused for a later request to the same upstream:
    # test_security_regressions.py) must not reach this client either.
    Resp("CL/late-bytes-after-body", [H + b"Content-Length: 5\r\n\r\nhello", 0.2, LATE], 200, b"hello"),
    Resp("CL/connection-close-upstream", [H + b"Connection: close\r\nContent-Length: 5\r\n\r\nhello", CLOSE], 200, b"hello"),
    # --- 1xx -------------------------------------------------------------------------------------------------
    Resp("1xx/storm-100", b"HTTP/1.1 100 Continue\r\n\r\n" * 200 + H + b"Content-Length: 5\r\n\r\nhello", 200, b"hello"),
    Resp("1xx/storm-102", b"HTTP/1.1 102 Processing\r\nX-Progress: 1\r\n\r\n" * 50 + H + b"Content-Length: 5\r\n\r\nhello",
         200, b"hello"),
    Resp("1xx/early-hints", b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nContent-Length: 7\r\n\r\n"
         + H + b"Content-Length: 5\r\n\r\nhello", 200, b"hello"),
    Resp("1xx/slow-storm", [b"HTTP/1.1 100 Continue\r\n\r\n", 0.05] * 10 + [H + b"Content-Length: 5\r\n\r\nhello"], 200,
         b"hello"),
    Resp("1xx/with-body", b"HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\nhello" + H + b"Content-Length: 2\r\n\r\nhi",
         502),
    Resp("1xx/only-then-close", [b"HTTP/1.1 100 Continue\r\n\r\n", CLOSE], 502),
    # The client asked for no upgrade (and the proxy forwards none): a 101 cannot be its answer.
    Resp("1xx/unrequested-101", [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                                 + LATE, 0.2, CLOSE], 502),
    Resp("1xx/with-length-then-close", [b"HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\n", CLOSE], 502),
    Resp("1xx/hides-response", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n" + LATE, 204, b""),
    # --- Bodies where none may be ----------------------------------------------------------------------------
    Resp("bodiless/204-with-length", b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello", 204, b""),
    Resp("bodiless/204-with-chunks", b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n" + HELLO_CHUNKED,
         204, b""),
    Resp("bodiless/204-body-is-a-response", b"HTTP/1.1 204 No Content\r\n\r\n" + LATE, 204, b""),
    Resp("bodiless/304-with-body", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello", 304, b""),
    Resp("bodiless/304-body-is-a-response", b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n" + LATE, 304, b""),
    Resp("bodiless/head-with-body", H + b"Content-Length: 5\r\n\r\nhello", 200, b"", method="HEAD"),
    Resp("bodiless/head-with-chunks", H + b"Transfer-Encoding: chunked\r\n\r\n" + HELLO_CHUNKED, 200, b"", method="HEAD"),
    Resp("bodiless/head-body-is-a-response", H + b"Content-Length: 8\r\n\r\n" + LATE, 200, b"", method="HEAD"),
    # --- Invalid chunks --------------------------------------------------------------------------------------
    Resp("chunks/not-hex", H + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 502, truncated_ok=True),
    Resp("chunks/0x-prefix", H + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", EITHER, truncated_ok=True),
    Resp("chunks/overflow", H + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n", 502,
         truncated_ok=True),
    Resp("chunks/data-longer-than-size", H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", EITHER,
         truncated_ok=True),
    Resp("chunks/lf-only", H + b"Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n", EITHER, truncated_ok=True),
    Resp("chunks/extension", H + b"Transfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\n\r\n", 200, b"hello"),
    Resp("chunks/trailers", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nContent-Length: 99\r\n\r\n", 200,
         b"hello"),
    Resp("chunks/no-last-chunk", [H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", CLOSE], EITHER, truncated_ok=True),
    Resp("chunks/last-chunk-is-a-response", H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + LATE, 200,
         b"hello"),
    # --- Early close -----------------------------------------------------------------------------------------
    Resp("close/before-head", [CLOSE], 502),
    Resp("close/mid-status-line", [b"HTTP/1.1 20", CLOSE], 502),
    Resp("close/mid-head", [H + b"Content-Le", CLOSE], 502),
    Resp("close/mid-head-after-length", [H + b"Content-Length: 100\r\nX-A: 1", CLOSE], 502),
    Resp("close/after-head-line", [H + b"Content-Length: 5\r\n", CLOSE], 502),
    Resp("close/mid-body", [H + b"Content-Length: 100\r\n\r\nhello", CLOSE], EITHER, truncated_ok=True),
    Resp("close/delimits-body", [H + b"\r\nhello", CLOSE], 200, b"hello"),
    Resp("close/http10-delimits-body", [b"HTTP/1.0 200 OK\r\n\r\nhello", CLOSE], 200, b"hello"),
    Resp("close/http10-keep-alive", b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello", 200,
         b"hello"),
    # --- Status lines ----------------------------------------------------------------------------------------
    Resp("status/two-spaces-204", b"HTTP/1.1  204 No Content\r\nContent-Length: 5\r\n\r\n", 204, b""),
    Resp("status/tab-before-code-304", b"HTTP/1.1 \t304 Not Modified\r\nContent-Length: 5\r\n\r\n", 304, b""),
    Resp("status/tab-after-code-204", b"HTTP/1.1 204\tNo Content\r\nContent-Length: 5\r\n\r\n", 204, b""),
    Resp("status/no-space-after-code", b"HTTP/1.1 204OK\r\nContent-Length: 5\r\n\r\n", 204, b""),
    Resp("status/two-spaces-200", b"HTTP/1.1  200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, b"hello"),
    # A field to libcurl, so the status stays 204; its name is no token, so relaying it is a hygiene defect.
    Resp("status/status-line-inside-head", b"HTTP/1.1 204 No Content\r\nHTTP/1.1 200 OK: x\r\nContent-Length: 5\r\n\r\n",
         {204, 502}, b"", known="field name that is not a token"),
    Resp("status/four-digits", b"HTTP/1.1 2040 No Content\r\nContent-Length: 5\r\n\r\nhello", 502),
    Resp("status/two-digits", b"HTTP/1.1 20 OK\r\nContent-Length: 5\r\n\r\nhello", 502),
    Resp("status/http09", [b"hello", CLOSE], 502),
    Resp("status/lf-only-head", b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello", 200, b"hello"),
    # --- Header hygiene: the client must not read the head differently from the proxy -----------
    Resp("hygiene/space-before-colon", H + b"Content-Length : 99\r\nContent-Length: 5\r\n\r\nhello", 502,
         known="whitespace before the colon"),
    Resp("hygiene/tab-before-colon", H + b"Transfer-Encoding\t: chunked\r\nContent-Length: 5\r\n\r\nhello", 502,
         known="whitespace before the colon"),
    Resp("hygiene/bare-cr-in-value", H + b"X-A: a\rContent-Length: 99\r\nContent-Length: 5\r\n\r\nhello", 502,
         known="bare CR in a value"),
    Resp("hygiene/bare-cr-in-reason", b"HTTP/1.1 200 O\rContent-Length: 99\r\nContent-Length: 5\r\n\r\nhello", 502,
         known="bare CR (in the reason phrase)"),
    Resp("hygiene/empty-field-name", H + b": x\r\nContent-Length: 5\r\n\r\nhello", 502,
         known="field name that is not a token"),
    Resp("hygiene/control-char-in-name", H + b"Content-Length\x0b: 99\r\nContent-Length: 5\r\n\r\nhello", 502,
         known="field name that is not a token"),
    Resp("hygiene/nul-in-value", H + b"X-A: a\x00b\r\nContent-Length: 5\r\n\r\nhello", 502),
    # --- Large or odd heads ----------------------------------------------------------------------------------
    Resp("head/huge-field", H + b"X-Big: " + b"b" * 300000 + b"\r\nContent-Length: 5\r\n\r\nhello", 502),
    Resp("head/many-fields", H + b"".join(b"X-%d: v\r\n" % i for i in range(3000)) + b"Content-Length: 5\r\n\r\nhello",
         EITHER),
    Resp("head/transfer-encoding-unknown", [H + b"Transfer-Encoding: xchunked\r\n\r\nhello", CLOSE], EITHER,
         truncated_ok=True),
    Resp("head/hop-by-hop-fields", H + b"Connection: close, X-Secret\r\nX-Secret: s\r\nKeep-Alive: timeout=1\r\n"
         b"Proxy-Connection: close\r\nUpgrade: h2c\r\nContent-Length: 5\r\n\r\nhello", 200, b"hello"),
]

assert len({c.id for c in RESPONSE_CASES}) == len(RESPONSE_CASES), "duplicate case ids"

WELL_FORMED_FIELD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[ \t]*[\x20-\x7e\x80-\xff\t]*")


def read_one(c, method):
    """One response from the proxy -> (Response, truncated). Refuses a head a strict client could not read."""
    raw_head = c.read_until(b"\r\n\r\n", limit=1 << 20)
    lines = raw_head[:-4].split(b"\r\n")
    assert re.fullmatch(rb"HTTP/1\.1 [1-5][0-9][0-9] [\x20-\x7e\x80-\xff\t]*", lines[0]), raw_head[:300]
    for line in lines[1:]:
        assert WELL_FORMED_FIELD.fullmatch(line), "malformed field line %r in %r" % (line, raw_head[:500])
    from httpraw import Response
    status = int(lines[0].split(b" ")[1])
    headers = [(k.decode("latin-1").strip(), v.decode("latin-1").strip()) for k, _, v in (l.partition(b":") for l in lines[1:])]
    r = Response("HTTP/1.1", status, "", headers)
    cls = [v for k, v in headers if k.lower() == "content-length"]
    tes = [v for k, v in headers if k.lower() == "transfer-encoding"]
    assert len(cls) + len(tes) <= 1, "ambiguous framing %r" % raw_head[:500]
    if 100 <= status < 200:
        return r, False
    try:
        r.body = c.read_body(r, method)
    except ConnectionClosed:
        return r, True
    return r, False


@pytest.mark.parametrize("case", RESPONSE_CASES, ids=[c.id for c in RESPONSE_CASES])
def test_response_variant(corpus_proxy, honest, case):
    # Its own upstream per case: a lie left on a pooled upstream connection must not become another case's answer.
    evil = RawBackend(respond=lambda req: case.actions)
    try:
        check_response_variant(corpus_proxy, evil, honest, case)
    finally:
        evil.stop()
    assert corpus_proxy.alive()


def check_response_variant(proxy, evil, honest, case):
    path = "/r/" + case.id
    ok_path = "/ok/" + case.id
    with RawConn(proxy.host, proxy.port, timeout=8) as c:
        c.send(("%s %s%s HTTP/1.1\r\nHost: x\r\n\r\n" % (case.method, evil.url, path)).encode())
        while True:
            first, truncated = read_one(c, case.method)
            if not 100 <= first.status < 200:
                break
        assert first.status in case.statuses, "status %d (%s), body %r" % (
            first.status, "expected %s" % sorted(case.statuses), first.body[:300])
        if truncated:
            assert case.truncated_ok, "response cut short: %r" % first
            return  # the proxy closed the connection: nothing can follow on it
        if case.body is not None and first.status == 200 or first.status in (204, 304):
            assert first.body == (case.body if first.status == 200 else b""), first.body[:300]
        # The next request on the same connection gets its own answer, or the connection is closed.
        try:
            c.send(("GET %s%s HTTP/1.1\r\nHost: x\r\n\r\n" % (honest.url, ok_path)).encode())
            second, truncated = read_one(c, "GET")
        except (ConnectionClosed, ConnectionResetError, BrokenPipeError):
            assert not c.buf, "bytes before the close: %r" % bytes(c.buf[:300])
            return
        assert (second.status, second.body) == (200, ("GET %s 0" % ok_path).encode()), second.body[:300]
