import Tracing

/// One exchange with a parent proxy on the way to an upstream (the ``Connector``'s attempt through it: the dial,
/// the CONNECT, a 407 and its authenticated retry, TLS to the parent): a client span under the upstream attempt's.
/// The parent's address is recorded, never its credential.
struct ParentConnectSpan {
    let span: ProxySpan

    init(parent: ProxySpan, proxy: ParentProxy, destination: String) {
        span = ProxyTracing.start(parent.tracer, "parent proxy CONNECT", parent: parent.context, kind: .client)
        guard span.isRecording else { return }
        span.setAttribute("http.request.method", "CONNECT")
        span.setAttribute("server.address", proxy.host)
        span.setAttribute("server.port", proxy.port)
        span.setAttribute("authproxy.parent_proxy.scheme", proxy.scheme.rawValue)
        span.setAttribute("authproxy.connect.destination", destination)
    }

    /// `status`: the parent's answer to the CONNECT (0: none); `error`: why the attempt failed.
    func end(status: Int, error: String?) {
        if span.isRecording {
            if status > 0 { span.setAttribute("http.response.status_code", status) }
            if let error {
                span.setAttribute("error.type", error)
                span.setStatus(.init(code: .error))
            }
        }
        span.end()
    }
}
