/// A print job sent to an ArcGIS print service that a credential lists in `print_services`: the request whose
/// `Web_Map_as_JSON` gets the tokens of the layers it names (``WebMapLayers``). Decided from the request alone.
///
/// The print service (`…/PrintingTools/GPServer/Export Web Map Task`) loads every layer of the web map itself, so a
/// secured layer needs its own token inside that JSON. Handing a token to another service is opt-in per credential:
/// only a print service a credential lists receives that credential's tokens, and nothing else ever gets a token
/// inside a body.
struct PrintRequest: Equatable {
    /// Where `Web_Map_as_JSON` travels.
    enum Carrier: Equatable {
        /// The query string (a `GET`).
        case query
        /// An `application/x-www-form-urlencoded` body, held whole (up to ``maxBodyBytes``).
        case form
    }

    /// The print service URL prefix listed by some credential, as configured (for the log).
    var service: String
    var carrier: Carrier

    /// The largest form body held whole to add tokens to its web map. A larger (or chunked) print request is
    /// forwarded as the client sent it, with a warning in the log: its secured layers then fail at the print service,
    /// which names them.
    static let maxBodyBytes: Int64 = 8 * 1024 * 1024

    /// The name of the print job parameter (ArcGIS reads parameter names case-insensitively).
    static let webMapField = "Web_Map_as_JSON"

    /// What the planner decides about a request under a listed print service; `nil` for any other request.
    enum Decision: Equatable {
        case rewrite(PrintRequest)
        /// Another request to a listed print service (a job's status, results or inputs): its answer may echo a web
        /// map sent earlier, and is scrubbed of the tokens the service was handed (``PrintTokenLedger``).
        case echoes(service: String)
        /// A print job whose web map cannot be held (chunked, over ``maxBodyBytes``, not a form): forwarded as sent.
        case tooLarge(service: String, why: String)
    }

    /// `services`: every prefix any credential lists in `print_services`; `method`, `target`, `isForm` and
    /// `bodyLength` (nil: none, -1: chunked) describe the request.
    static func decide(
        method: String, target: URLTarget, isForm: Bool, bodyLength: Int64?, services: [MatchPrefix]
    ) -> Decision? {
        guard !services.isEmpty, let service = services.first(where: { $0.matches(target) }) else { return nil }
        let name = service.description
        guard isJob(path: target.path) else { return .echoes(service: name) }
        switch method {
        case "GET":
            return .rewrite(PrintRequest(service: name, carrier: .query))
        case "POST":
            if bodyLength == nil || bodyLength == 0 {
                // The web map may be in the query of a POST without a body.
                return .rewrite(PrintRequest(service: name, carrier: .query))
            }
            guard isForm else {
                return .tooLarge(service: name, why: "its body is not an urlencoded form (multipart is not read)")
            }
            guard let n = bodyLength, n >= 0 else {
                return .tooLarge(service: name, why: "its form body is chunked (no Content-Length)")
            }
            guard n <= maxBodyBytes else {
                return .tooLarge(service: name, why: "its form body (\(n) bytes) is larger than \(maxBodyBytes) bytes")
            }
            return .rewrite(PrintRequest(service: name, carrier: .form))
        default:
            return .echoes(service: name)
        }
    }

    /// A print job URL: its last path segment is `execute` or `submitJob` (a task of the service runs).
    static func isJob(path: Substring) -> Bool {
        guard let slash = path.lastIndex(of: "/") else { return false }
        let last = path[path.index(after: slash)...]
        return last.lowercased() == "execute" || last.lowercased() == "submitjob"
    }
}

extension PrintRequest.Decision {
    /// The listed print service the request goes to.
    var service: String {
        switch self {
        case .rewrite(let r): r.service
        case .echoes(let s), .tooLarge(let s, _): s
        }
    }
}
