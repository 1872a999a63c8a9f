/// An intercepted CONNECT tunnel on a ``ClientConnection``: TLS with the client, and the host:port every request
/// inside it goes to. Confined to the connection's loop queue.
final class Interception {
    let session: TLSSession
    /// The server that minted the session's certificate: kept while the tunnel lives, even after a reload
    /// installed a new interception CA (the session's certificate callback uses it).
    let server: TLSServer
    let host: String
    let port: Int
    /// A pull of decrypted input is queued (input TLS buffered while the connection could not take it).
    var pullScheduled = false

    init(session: TLSSession, server: TLSServer, host: String, port: Int) {
        self.session = session
        self.server = server
        self.host = host
        self.port = port
    }
}
