import Tracing

/// The token service's spans, for a token request an exchange waits for (``TokenTrace``): the request itself
/// ("token fetch", a client span whose context goes out in `traceparent` on each of its HTTP requests) and the wait
/// for the fleet's lock in Redis ("token lock wait"). Run on the token service's queue.
enum TokenFetchSpans {
    static func fetch(_ trace: TokenTrace, _ c: Credential, root: String) -> ProxySpan {
        let span = ProxyTracing.start(trace.tracer, "token fetch", parent: trace.parent.context, kind: .client)
        if span.isRecording {
            span.setAttribute("authproxy.credential", c.name)
            // A server root or provider URL, never its query.
            span.setAttribute("authproxy.token.root", String(root.prefix { $0 != "?" }))
        }
        return span
    }

    /// Runs `body` with `span`'s context bound, so the HTTP requests it starts carry it.
    static func within(_ span: ProxySpan?, _ body: () -> Void) {
        guard let span else { return body() }
        InstrumentationContext.withValue(span.context, operation: body)
    }

    static func end(_ span: ProxySpan?, _ result: Result<IssuedToken, TokenError>) {
        guard let span else { return }
        if case .failure = result, span.isRecording {
            // The kind of failure only: a token service's error text may quote what it was sent.
            span.setAttribute("error.type", "token_request_failed")
            span.setStatus(.init(code: .error))
        }
        span.end()
    }

    static func lockWait(_ trace: TokenTrace, _ c: Credential) -> ProxySpan {
        let span = ProxyTracing.start(trace.tracer, "token lock wait", parent: trace.parent.context)
        if span.isRecording {
            span.setAttribute("authproxy.credential", c.name)
            span.setAttribute("db.system", "redis")
        }
        return span
    }

    /// `outcome`: `shared` (another replica's token), `lease` (this replica fetches, holding the lock), `unlocked`
    /// (Redis unusable: this replica fetches on its own).
    static func endLockWait(_ span: ProxySpan?, outcome: String) {
        guard let span else { return }
        if span.isRecording { span.setAttribute("authproxy.lock.outcome", outcome) }
        span.end()
    }
}
