/// Why a request was refused before anything was forwarded. Every case maps to the status the client
/// receives; the message is safe to show (it never echoes header values).
public struct HTTPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Int
    public let message: String

    public init(status: Int, _ message: String) {
        self.status = status
        self.message = message
    }

    public var description: String { "\(status): \(message)" }

    static func bad(_ message: String) -> HTTPParseError { .init(status: 400, message) }
    static let uriTooLong = HTTPParseError(status: 414, "request line longer than 8 KiB")
    static let headersTooLarge = HTTPParseError(status: 431, "request header block larger than 64 KiB")
    static let tooManyHeaders = HTTPParseError(status: 431, "more than 100 request header fields")
}
