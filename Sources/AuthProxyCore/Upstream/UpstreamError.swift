import CAuthProxyShims
import CCurl

/// Why an upstream exchange failed, mapped to the status and message a GIS client should see.
struct UpstreamError: Error {
    let code: CURLcode
    /// libcurl's own message (names hosts and causes; never URLs with query strings).
    let detail: String
    let destination: String
    let timeoutSeconds: Int
    /// Set when libcurl's only addresses were refused by `deny_destinations`.
    var deniedAddress: IPAddress? = nil

    /// The client hung up or its body could not be read: nobody to answer.
    var isClientSide: Bool {
        code == CURLE_WRITE_ERROR || code == CURLE_ABORTED_BY_CALLBACK || code == CURLE_READ_ERROR
    }

    var response: ErrorResponse {
        let details = detail.isEmpty ? [] : [detail]
        if let ip = deniedAddress, code == CURLE_COULDNT_CONNECT {
            return ErrorResponse(status: 403, message: "Destination \(destination) is not allowed",
                details: ["It resolves to \(ip), which [proxy] deny_destinations refuses."])
        }
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST:
            return ErrorResponse(status: 502, message: "Could not resolve host \(destination)", details: details)
        case CURLE_COULDNT_CONNECT:
            return ErrorResponse(status: 502, message: "Could not connect to \(destination): connection refused or unreachable", details: details)
        case CURLE_OPERATION_TIMEDOUT:
            return ErrorResponse(status: 504, message: "Upstream \(destination) did not respond within \(timeoutSeconds) s", details: details)
        case CURLE_GOT_NOTHING:
            return ErrorResponse(status: 502, message: "Upstream \(destination) closed the connection without a response", details: details)
        case CURLE_PEER_FAILED_VERIFICATION:
            return ErrorResponse(status: 502,
                message: "The TLS certificate of \(destination) could not be verified; if it is an internal or self-signed certificate, add a server-trust credential for it",
                details: details)
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            return ErrorResponse(status: 502, message: "The public key of \(destination) does not match the pinned_public_key of its server-trust credential", details: details)
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE:
            return ErrorResponse(status: 502, message: "TLS handshake with \(destination) failed", details: details)
        default:
            return ErrorResponse(status: 502, message: "Upstream \(destination) failed: \(String(cString: curl_easy_strerror(code)))", details: details)
        }
    }
}
