/// A CONNECT tunnel whose requests the proxy serves itself, on a ``ClientConnection``: a CONNECT to a matched
/// host. Its first bytes decide how (``TunnelContent``): TLS with the client (interception: every request inside
/// goes to host:port over https), or plain HTTP (every request goes to `http://host:port`; WebSocket handshakes
/// are relayed like absolute-form ones). Confined to the connection's loop queue.
final class Interception {
    /// TLS with the client; nil while the first bytes are awaited and for a tunnel carrying plain HTTP.
    var session: TLSSession?
    /// The server that mints the session's certificate (nil without `[tls]`): kept while the tunnel lives, even
    /// after a reload installed a new interception CA (the session's certificate callback uses it).
    let server: TLSServer?
    let host: String
    let port: Int
    /// The port is in `connect_ports`: TLS that cannot be intercepted may be relayed blind.
    let blindAllowed: Bool
    /// When the CONNECT began: its access-log line is written once the first bytes have decided.
    let connectStarted: UInt64

    /// The scheme of the requests inside.
    var scheme: String { session == nil ? "http" : "https" }

    init(
        session: TLSSession?, server: TLSServer?, host: String, port: Int,
        blindAllowed: Bool = false, connectStarted: UInt64 = 0
    ) {
        self.session = session
        self.server = server
        self.host = host
        self.port = port
        self.blindAllowed = blindAllowed
        self.connectStarted = connectStarted
    }
}
