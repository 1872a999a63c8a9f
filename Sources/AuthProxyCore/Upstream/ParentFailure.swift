/// A request that failed at its parent proxy, not at the destination: what the client is told names the parent
/// (and, for a refused login, the credential), never the parent's own error page as if the service had answered.
struct ParentFailure: Sendable, Equatable {
    let parent: ParentProxy
    let cause: ParentFailover.Cause
    /// The parent's status for `auth` (407) and `refused` (its answer to CONNECT), 0 otherwise.
    var status: Int = 0
    /// `upstream_proxy_credential`, nil when none is configured.
    var credential: String? = nil

    func response(destination: String, timeoutSeconds: Int) -> ErrorResponse {
        let name = "parent proxy \(parent)"
        switch cause {
        case .connect:
            return ErrorResponse(
                status: 502, message: "Could not connect to \(name) (for \(destination))",
                details: ["The parent refused the connection or is unreachable; other parents, if any, were tried too."]
            )
        case .timeout:
            return ErrorResponse(
                status: 504, message: "The \(name) did not answer within \(timeoutSeconds) s (for \(destination))",
                details: [])
        case .auth:
            if let credential {
                return ErrorResponse(
                    status: 502,
                    message: "The \(name) refused credential '\(credential)' (407 Proxy Authentication Required)",
                    details: [
                        "Check the user name and password (or Kerberos identity) of [proxy] upstream_proxy_credential = \"\(credential)\", and which schemes the parent offers."
                    ])
            }
            return ErrorResponse(
                status: 502,
                message: "The \(name) requires authentication (407) and no upstream_proxy_credential is configured",
                details: ["Set [proxy] upstream_proxy_credential to a password or kerberos credential for the parent."])
        case .refused:
            return ErrorResponse(
                status: status == 403 ? 403 : 502,
                message:
                    "The \(name) refused the connection to \(destination)\(status > 0 ? " (it answered \(status))" : "")",
                details: [
                    "The parent's policy (URL filtering, allowed ports) or its own upstream refused it; its page is not relayed."
                ])
        }
    }
}

extension ParentFailure {
    /// `connectStatus`: the parent's answer to a CONNECT, 0 when it gave none. A refused login is a 407 however it
    /// was read (a 407 answering a relayed request is not a CONNECT status).
    init(parent: ParentProxy, cause: ParentFailover.Cause, connectStatus: Int, credential: String?) {
        self.init(parent: parent, cause: cause, status: cause == .auth ? 407 : connectStatus, credential: credential)
    }
}
