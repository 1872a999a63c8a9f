#!/usr/bin/env python3
"""A test OTLP/HTTP trace receiver: POST /v1/traces with an ``application/x-protobuf``
ExportTraceServiceRequest, decoded with the official definitions (``opentelemetry-proto`` from PyPI).

    r = OTLPReceiver().start()      # 127.0.0.1, an ephemeral port
    r.endpoint                      # "http://127.0.0.1:PORT" (OTEL_EXPORTER_OTLP_ENDPOINT)
    r.wait_for(lambda spans: ..., timeout=10)
    r.spans()                       # every span received, as dicts
    r.requests                      # per request: content type, headers, resource attributes
    r.stop()

A body that is not a valid ExportTraceServiceRequest is answered 400 and recorded in ``r.errors``
(a test then fails on it): the proxy's hand-written encoder is checked by the official decoder.
"""
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

MAX_BODY = 16 << 20
KINDS = {v: k for k, v in trace_pb2.Span.SpanKind.items()}


def any_value(v):
    which = v.WhichOneof("value")
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if which is None:
        return None
    return getattr(v, which)


def span_dict(span, resource):
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "trace_state": span.trace_state,
        "name": span.name,
        "kind": KINDS.get(span.kind, str(span.kind)),
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "attributes": {kv.key: any_value(kv.value) for kv in span.attributes},
        "events": [{"name": e.name, "time": e.time_unix_nano,
                    "attributes": {kv.key: any_value(kv.value) for kv in e.attributes}} for e in span.events],
        "status": {"code": span.status.code, "message": span.status.message},
        "flags": span.flags,
        "resource": resource,
    }


class OTLPReceiver:
    def __init__(self, host="127.0.0.1", status=200, tls=None):
        """`tls`: (certificate file, key file) to serve https instead of http."""
        self.host = host
        self.status = status
        self.tls = tls
        self.lock = threading.Lock()
        self._spans = []
        self.requests = []
        self.errors = []
        self.server = None
        self.thread = None

    @property
    def endpoint(self):
        return "%s://%s:%d" % ("https" if self.tls else "http", self.host, self.server.server_address[1])

    def start(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n > MAX_BODY:
                    self.send_response(413)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    self.close_connection = True
                    return
                body = self.rfile.read(n)
                if self.path != "/v1/traces":
                    return self._answer(404, b"not found")
                req = trace_service_pb2.ExportTraceServiceRequest()
                try:
                    req.ParseFromString(body)
                except DecodeError as e:
                    with receiver.lock:
                        receiver.errors.append("decode: %s" % e)
                    return self._answer(400, b"bad protobuf")
                spans = []
                resources = []
                for rs in req.resource_spans:
                    resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
                    resources.append(resource)
                    for ss in rs.scope_spans:
                        for s in ss.spans:
                            spans.append(span_dict(s, resource))
                with receiver.lock:
                    receiver.requests.append({
                        "content_type": self.headers.get("Content-Type"),
                        "headers": dict(self.headers.items()),
                        "resources": resources, "spans": len(spans),
                    })
                    receiver._spans.extend(spans)
                status = receiver.status
                self._answer(status, trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                             if status == 200 else b"refused by the test receiver")

            def _answer(self, status, body):
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        if self.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def spans(self):
        with self.lock:
            return list(self._spans)

    def wait_for(self, pred, timeout=10.0):
        """Polls until pred(spans) is true (returns the spans) or the timeout passes (returns the last spans)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if pred(spans) or time.monotonic() >= deadline:
                return spans
            time.sleep(0.05)
