import Tracing

/// One exchange with a parent proxy on the way to an upstream: a client span under the upstream attempt's. On the
/// own client it is the ``Connector``'s attempt through the parent (the dial, the CONNECT, a 407 and its
/// authenticated retry, TLS to the parent); on a libcurl transfer (``CurlTransfer``) the parent's part of it (its
/// CONNECT and the 407s before the tunnel is up, or in absolute form the 407s before the first answer that is not
/// one: ``ParentExchangeHeads``). The parent's address is recorded, never its credential.
struct ParentConnectSpan {
    let span: ProxySpan

    /// `method`: `CONNECT`, or the request's own method when it goes to the parent in absolute form.
    init(parent: ProxySpan, proxy: ParentProxy, destination: String, method: String = "CONNECT") {
        span = ProxyTracing.start(parent.tracer, "parent proxy CONNECT", parent: parent.context, kind: .client)
        guard span.isRecording else { return }
        span.setAttribute("http.request.method", method)
        span.setAttribute("server.address", proxy.host)
        span.setAttribute("server.port", proxy.port)
        span.setAttribute("authproxy.parent_proxy.scheme", proxy.scheme.rawValue)
        span.setAttribute("authproxy.connect.destination", destination)
    }

    var isRecording: Bool { span.isRecording }

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

    /// As ``end(status:error:)``, with the 407s a libcurl transfer saw the parent answer
    /// (`authproxy.parent_proxy.auth_challenges`). A tunnel libcurl had open already (``ParentExchangeHeads/reused``)
    /// was no exchange with the parent: its span is dropped, as the own client makes none for a pooled connection.
    func end(_ heads: ParentExchangeHeads, status: Int, error: String?) {
        if heads.reused, error == nil { return span.discard() }
        if span.isRecording { span.setAttribute("authproxy.parent_proxy.auth_challenges", heads.challenges) }
        end(status: status, error: error)
    }
}
