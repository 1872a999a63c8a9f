#if canImport(Glibc)
    import Glibc
#endif

extension UpstreamError {
    /// A ``Dialer`` failure to `host`:`port`, for an HTTP exchange: the same cause, message and metric whichever
    /// path dialed (the own client's plain connection, or the socket ``CurlConnector`` hands to libcurl).
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
        }
    }
}
