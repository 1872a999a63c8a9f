/// Why `authproxy doctor` could not probe a service at all: the service cannot be reached. Its description
/// names the cause first (`cannot resolve host …`, `connection refused …`), never a query string or secret.
public struct DoctorError: Error, Sendable, CustomStringConvertible {
    public enum Cause: String, Sendable {
        case badURL = "bad URL"
        case dns = "DNS"
        case connect = "connect"
        case timeout = "timeout"
        case tls = "TLS"
        case http = "HTTP"
    }

    public let cause: Cause
    public let message: String

    init(_ cause: Cause, _ message: String) {
        self.cause = cause
        self.message = message
    }

    public var description: String { message }
}
