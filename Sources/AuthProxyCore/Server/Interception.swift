/// An intercepted CONNECT tunnel on a ``ClientConnection``: TLS with the client, and the host:port every request
/// inside it goes to. Confined to the connection's loop queue.
final class Interception {
    let session: TLSSession
    let host: String
    let port: Int
    /// A pull of decrypted input is queued (input TLS buffered while the connection could not take it).
    var pullScheduled = false

    init(session: TLSSession, host: String, port: Int) {
        self.session = session
        self.host = host
        self.port = port
    }
}
