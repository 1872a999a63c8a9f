/// Where the certificate comes from that the proxy listener shows a client opening TLS to the proxy itself (an
/// `https://` proxy URL): `[proxy] tls_cert`/`tls_key` when set, else minted from the interception CA (`[tls]`),
/// else none (such a client's connection is closed, with a log line naming these settings).
///
/// Pure: chosen from the configuration alone, so `check`, the server and the tests agree.
public enum ProxyTLSSource: Equatable, Sendable {
    /// A certificate (chain) and its key, PEM files.
    case files(cert: String, key: String)
    /// Leaves minted by the interception CA for the name the client sends (SNI), or the address it connected to
    /// when it sends none (an IP SAN).
    case interceptionCA(cert: String)
    case none

    public static func choose(_ config: ProxyConfig) -> ProxyTLSSource {
        if let cert = config.tlsCert, let key = config.tlsKey { return .files(cert: cert, key: key) }
        if config.tls.enabled, let ca = config.tls.caCert { return .interceptionCA(cert: ca) }
        return .none
    }

    /// For `authproxy check` and the start-up log.
    public var summary: String {
        switch self {
        case .files(let cert, let key):
            return "on (https:// proxy URLs), certificate \(cert) with its key \(key) ([proxy] tls_cert, tls_key)"
        case .interceptionCA(let ca):
            return
                "on (https:// proxy URLs), certificates minted by the interception CA \(ca) for the name clients use (SNI) or the listener's address"
        case .none:
            return
                "off: a client that opens TLS to the proxy (an https:// proxy URL) is closed; set [proxy] tls_cert and tls_key, or configure [tls]"
        }
    }
}
