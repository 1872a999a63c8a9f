import CAuthProxyShims
import CCurl

/// The libcurl adapter's side of ``UpstreamFailure``: the only place a `CURLcode` becomes a failure.
extension UpstreamFailure {
    init(curl code: CURLcode) {
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST: self = .dns
        case CURLE_COULDNT_CONNECT: self = .connect
        case CURLE_OPERATION_TIMEDOUT: self = .timeout
        case CURLE_GOT_NOTHING: self = .nothing
        case CURLE_RECV_ERROR, CURLE_SEND_ERROR: self = .reset
        case CURLE_PARTIAL_FILE: self = .partial
        case CURLE_PEER_FAILED_VERIFICATION: self = .untrustedCertificate
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH: self = .pinMismatch
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE: self = .tlsHandshake
        case CURLE_WEIRD_SERVER_REPLY, CURLE_UNSUPPORTED_PROTOCOL: self = .protocolError
        case CURLE_WRITE_ERROR: self = .clientGone
        case CURLE_ABORTED_BY_CALLBACK, CURLE_READ_ERROR: self = .requestBody
        default: self = .other(String(cString: curl_easy_strerror(code)))
        }
    }
}
