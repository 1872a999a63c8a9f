#if canImport(Glibc)
    import Glibc
#endif

extension UpstreamError {
    /// A failed attempt to connect to `host`:`port` (the destination, or a parent): the one mapping of a dial
    /// failure to its cause, message and metric, whatever the connection was for (the own client's, a tunnel's, a
    /// WebSocket's; ``Connector``).
    init(dial failure: DialFailure, host: String, port: Int, destination: String, timeoutSeconds: Int) {
        switch failure {
        case .denied(let ip):
            self.init(
                cause: .connect, detail: "", destination: destination, timeoutSeconds: timeoutSeconds,
                deniedAddress: ip)
        case .unresolved(let message):
            self.init(
                cause: .dns, detail: "Could not resolve host: \(host) (\(message))", destination: destination,
                timeoutSeconds: timeoutSeconds)
        case .unreachable(let e):
            self.init(
                cause: .connect, detail: "Failed to connect to \(host) port \(port): \(String(cString: strerror(e)))",
                destination: destination, timeoutSeconds: timeoutSeconds)
        case .outOfDescriptors(let e):
            self.init(
                cause: .connect, detail: "Could not open a socket: \(String(cString: strerror(e)))",
                destination: destination, timeoutSeconds: timeoutSeconds)
            outOfDescriptors = e
        case .timedOut(let seconds):
            self.init(
                cause: .timeout, detail: "Failed to connect to \(host) port \(port) after \(seconds * 1000) ms",
                destination: destination, timeoutSeconds: timeoutSeconds)
        }
    }

    /// The connection went through parents and failed there (``ConnectAttempts/Failure``): what the client is told
    /// names the parent, and the PAC file (`pac`) that named a denied one.
    mutating func failedAtParents(_ f: ConnectAttempts.Failure, pac: String?) {
        switch f {
        case .parent(let p):
            parent = p
        case .deniedParent(let p, let ip):
            deniedParent = DeniedParent(parent: p, address: ip, pac: pac)
        }
    }
}
