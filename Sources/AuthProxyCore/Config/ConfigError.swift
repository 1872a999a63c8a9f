/// A configuration problem, naming the key and (where known) the line, and never the value of a secret.
public struct ConfigError: Error, Sendable, CustomStringConvertible {
    public let key: String
    public let line: Int?
    public let message: String

    public init(key: String, line: Int?, _ message: String) {
        self.key = key
        self.line = line
        self.message = message
    }

    public var description: String {
        let at = line.map { " (line \($0))" } ?? ""
        return key.isEmpty ? "\(message)\(at)" : "\(key): \(message)\(at)"
    }
}
