import Foundation

/// Whether an upstream's `101 Switching Protocols` may turn the client's connection into a byte relay.
///
/// After a `101` the proxy reads nothing more on that connection: every later byte of the client goes to the
/// upstream as it is, past the request parser and the path rules it applies to every request. Relaying a switch
/// to another protocol (`h2c`), or one the server did not perform for this very handshake, would hand a client an
/// unparsed channel to the backend. So a `101` is relayed only as the answer RFC 6455 §4.1 lets a client accept:
/// a single `Upgrade` naming `websocket`, and a single `Sec-WebSocket-Accept` equal to
/// base64(SHA-1(`Sec-WebSocket-Key` + the protocol's GUID)) of the request the proxy sent.
enum WebSocketSwitch {
    /// RFC 6455 §1.3 (its §1.3 example: key `dGhlIHNhbXBsZSBub25jZQ==` → `s3pPLMBiTxaQ9kYGzzhZRbK+xOo=`, a unit
    /// test holds it).
    static let guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    /// Why a `101` is not relayed; the text completes "the 101 cannot be relayed: …".
    enum Refusal: Error, Equatable, Sendable, CustomStringConvertible {
        /// The handshake sent upstream carried no single `Sec-WebSocket-Key` to check the answer against.
        case noRequestKey
        /// `Upgrade` is missing, repeated or names something else than `websocket` (the value, if one).
        case notWebSocket(String?)
        /// No single `Sec-WebSocket-Accept`.
        case noAccept
        /// `Sec-WebSocket-Accept` does not answer the request's key.
        case acceptMismatch

        var description: String {
            switch self {
            case .noRequestKey: return "the handshake had no single Sec-WebSocket-Key to check it against"
            case .notWebSocket(let v?):
                return "it switches to '\(String(v.prefix(64)))', not to websocket alone"
            case .notWebSocket(nil): return "it has no single Upgrade field"
            case .noAccept: return "it has no single Sec-WebSocket-Accept field"
            case .acceptMismatch: return "its Sec-WebSocket-Accept does not answer the handshake's Sec-WebSocket-Key"
            }
        }
    }

    /// The `Sec-WebSocket-Accept` that answers `key`.
    static func accept(forKey key: String) -> String {
        Data(Crypto.sha1(Array((key + guid).utf8))).base64EncodedString()
    }

    /// Checks a `101`: `requestKeys` are the `Sec-WebSocket-Key` values of the request sent upstream, `upgrade` and
    /// `accept` the response's `Upgrade` and `Sec-WebSocket-Accept` values (each field as it came, untrimmed). Nil
    /// when the switch may be relayed.
    static func check(requestKeys: [String], upgrade: [String], accept: [String]) -> Refusal? {
        guard requestKeys.count == 1 else { return .noRequestKey }
        let key = trimmed(requestKeys[0])
        guard !key.isEmpty else { return .noRequestKey }
        guard upgrade.count == 1 else { return .notWebSocket(upgrade.isEmpty ? nil : upgrade.joined(separator: ", ")) }
        guard trimmed(upgrade[0]).lowercased() == "websocket" else { return .notWebSocket(upgrade[0]) }
        guard accept.count == 1 else { return .noAccept }
        return trimmed(accept[0]) == Self.accept(forKey: key) ? nil : .acceptMismatch
    }

    private static func trimmed(_ s: String) -> String {
        var u = Substring(s).utf8
        while let f = u.first, f == 32 || f == 9 { u = u.dropFirst() }
        while let l = u.last, l == 32 || l == 9 { u = u.dropLast() }
        return String(Substring(u))
    }
}
