import CAuthProxyShims

#if canImport(Glibc)
    import Glibc
#endif

/// Why an upstream exchange failed, mapped to the status and message a GIS client should see.
struct UpstreamError: Error {
    let cause: UpstreamFailure
    /// More about the cause, such as libcurl's own message (names hosts and causes; never URLs with query strings).
    let detail: String
    let destination: String
    let timeoutSeconds: Int
    /// Set when libcurl's only addresses were refused by `deny_destinations`.
    var deniedAddress: IPAddress? = nil
    /// EMFILE or ENFILE when the proxy could not open a socket: its own resource error, not the upstream's.
    var outOfDescriptors: Int32? = nil
    /// Why the proxy's own client refused the response (RFC 9112): it was not relayed.
    var invalidResponse: String? = nil
    /// The method of a request that a kept-alive connection lost after it was sent, and that was not sent again
    /// because the server may have processed it (``ResendPolicy``).
    var notResent: String? = nil
    /// The request failed at its parent proxy (``ParentFailure``), not at the destination.
    var parent: ParentFailure? = nil
    /// Every parent the route named was at an address `deny_destinations` refuses (``ConnectAttempts``).
    var deniedParent: DeniedParent? = nil
    /// No route could be given (a PAC file not loaded or without an answer): its answer, as the planner made it.
    var routeRefusal: ErrorResponse? = nil

    /// A parent proxy at a denied address, and who named it.
    struct DeniedParent: Equatable {
        let parent: ParentProxy
        let address: IPAddress
        /// The PAC file that named it (its URL or path); nil for a configured parent.
        let pac: String?
    }

    /// The client hung up or its body could not be read: nobody to answer.
    var isClientSide: Bool {
        cause == .clientGone || cause == .requestBody
    }

    /// The `cause` label of `authproxy_upstream_errors_total`.
    var metricCause: MetricLabels.UpstreamCause {
        if outOfDescriptors != nil { return .descriptors }
        if routeRefusal != nil { return .other }
        // Refused as a denied destination is: where the connection would have gone.
        if deniedParent != nil { return .connect }
        if let p = parent {
            switch p.cause {
            case .connect: return .connect
            case .timeout: return .timeout
            case .auth, .refused: return .other
            }
        }
        switch cause {
        case .dns: return .dns
        case .connect: return .connect
        case .timeout: return .timeout
        case .untrustedCertificate, .pinMismatch, .tlsHandshake: return .tls
        case .reset, .nothing, .partial: return .reset
        case .protocolError: return .protocolError
        case .clientGone, .requestBody, .other: return .other
        }
    }

    var response: ErrorResponse {
        let details = detail.isEmpty ? [] : [detail]
        if let e = outOfDescriptors {
            return .outOfDescriptors(e, destination: destination)
        }
        if let r = routeRefusal { return r }
        if let d = deniedParent {
            let named = d.pac.map { "The PAC file \($0) names a parent" } ?? "The parent proxy is"
            return ErrorResponse(
                status: 403, message: "\(named) at a denied address for \(destination)",
                details: [
                    "\(d.parent.authority) resolves to \(d.address), which [proxy] deny_destinations refuses: the "
                        + "request is not sent there."
                ])
        }
        if let p = parent {
            return p.response(destination: destination, timeoutSeconds: timeoutSeconds)
        }
        if let why = invalidResponse {
            return ErrorResponse(
                status: 502, message: "Upstream \(destination) sent an invalid response: \(why)",
                details: ["The response was not relayed (RFC 9112)."])
        }
        if let method = notResent {
            return ErrorResponse(
                status: 502,
                message:
                    "Upstream \(destination) closed a kept-alive connection after the \(method) request was sent, without answering",
                details: [
                    "The request was not sent again: the server may have processed it, and a \(method) is not "
                        + "idempotent (RFC 9112 §9.3.1). Check whether it took effect before repeating it."
                ])
        }
        if let ip = deniedAddress, cause == .connect {
            return ErrorResponse(
                status: 403, message: "Destination \(destination) is not allowed",
                details: ["It resolves to \(ip), which [proxy] deny_destinations refuses."])
        }
        switch cause {
        case .dns:
            return ErrorResponse(status: 502, message: "Could not resolve host \(destination)", details: details)
        case .connect:
            return ErrorResponse(
                status: 502, message: "Could not connect to \(destination): connection refused or unreachable",
                details: details)
        case .timeout:
            return ErrorResponse(
                status: 504, message: "Upstream \(destination) did not respond within \(timeoutSeconds) s",
                details: details)
        case .nothing:
            return ErrorResponse(
                status: 502, message: "Upstream \(destination) closed the connection without a response",
                details: details)
        case .untrustedCertificate:
            return ErrorResponse(
                status: 502,
                message:
                    "The TLS certificate of \(destination) could not be verified; if it is an internal or self-signed certificate, add a server-trust credential for it",
                details: details)
        case .pinMismatch:
            return ErrorResponse(
                status: 502,
                message:
                    "The public key of \(destination) does not match the pinned_public_key of its server-trust credential",
                details: details)
        case .tlsHandshake:
            return ErrorResponse(status: 502, message: "TLS handshake with \(destination) failed", details: details)
        case .reset:
            return ErrorResponse(
                status: 502, message: "Upstream \(destination) failed: the connection was reset or broken",
                details: details)
        case .partial:
            return ErrorResponse(
                status: 502, message: "Upstream \(destination) failed: the connection closed inside the response",
                details: details)
        case .protocolError:
            return ErrorResponse(
                status: 502, message: "Upstream \(destination) failed: its answer is not valid HTTP", details: details)
        case .clientGone, .requestBody:
            return ErrorResponse(
                status: 502, message: "Upstream \(destination) failed: the client's side of the exchange ended",
                details: details)
        case .other(let what):
            return ErrorResponse(status: 502, message: "Upstream \(destination) failed: \(what)", details: details)
        }
    }
}

extension ErrorResponse {
    /// The proxy could not open a socket for lack of file descriptors: a temporary condition of its own (503 with
    /// `Retry-After`), not a fault of the destination, which the client should not be told is unreachable.
    static func outOfDescriptors(_ error: Int32, destination: String) -> ErrorResponse {
        ErrorResponse(
            status: 503,
            message: "authproxy is out of file descriptors and could not open a connection to \(destination)",
            details: [
                "\(String(cString: strerror(error))). Retry shortly; if it persists, the proxy's descriptor limit "
                    + "(ulimit -n, LimitNOFILE) is too low for its load."
            ],
            retryAfter: 1)
    }
}
