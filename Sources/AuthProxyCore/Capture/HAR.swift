/// The HAR 1.2 document a capture produces (http://www.softwareishard.com/blog/har-12-spec/), as `Codable` values.
/// Fields the spec makes optional are left out when unknown rather than filled with guesses; custom fields start
/// with `_`, as the spec asks.
enum HAR {
    struct Document: Codable, Equatable {
        var log: Log
    }

    struct Log: Codable, Equatable {
        var version = "1.2"
        var creator: Creator
        var entries: [Entry]
        var comment: String?
    }

    struct Creator: Codable, Equatable {
        var name: String
        var version: String
    }

    struct NameValue: Codable, Equatable {
        var name: String
        var value: String
    }

    struct Entry: Codable, Equatable {
        var startedDateTime: String
        /// Milliseconds: the sum of the known timings.
        var time: Double
        var request: Request
        var response: Response
        var cache = Cache()
        var timings: Timings
        var serverIPAddress: String?
        var comment: String?
        /// The request as the client sent it, when the entry's `request` is what went upstream.
        var clientRequest: Request?
        /// What authproxy knows about the entry (``Annotation``).
        var authproxy: Annotation

        enum CodingKeys: String, CodingKey {
            case startedDateTime, time, request, response, cache, timings, serverIPAddress, comment
            case clientRequest = "_clientRequest"
            case authproxy = "_authproxy"
        }
    }

    /// Why the entry is in the capture: an upstream attempt of a client's exchange, or the proxy's own request to a
    /// token service.
    struct Annotation: Codable, Equatable {
        /// `upstream` or `token-service`.
        var role: String
        var credential: String
        /// The client exchange the attempt belongs to (several attempts of one exchange share it); nil for the
        /// proxy's own requests.
        var exchange: Int?
        /// 1 for the first upstream attempt of an exchange.
        var attempt: Int?
        /// Why the request or response is not recorded whole (a body past the cap, a streamed body).
        var notes: [String]?
    }

    struct Cache: Codable, Equatable {}

    struct Request: Codable, Equatable {
        var method: String
        var url: String
        var httpVersion: String
        var cookies: [NameValue]
        var headers: [NameValue]
        var queryString: [NameValue]
        var postData: PostData?
        var headersSize = -1
        var bodySize: Int
        var comment: String?
    }

    struct PostData: Codable, Equatable {
        var mimeType: String
        var params: [NameValue]?
        var text: String
        var comment: String?
    }

    struct Response: Codable, Equatable {
        var status: Int
        var statusText: String
        var httpVersion: String
        var cookies: [NameValue]
        var headers: [NameValue]
        var content: Content
        var redirectURL: String
        var headersSize = -1
        var bodySize: Int
        var comment: String?
    }

    struct Content: Codable, Equatable {
        /// How many body bytes were received (before the cap); 0 when none.
        var size: Int
        var mimeType: String
        var text: String?
        var encoding: String?
        var comment: String?
    }

    /// Milliseconds; -1 where the spec allows "not known" (blocked, dns, connect, ssl).
    struct Timings: Codable, Equatable {
        var blocked: Double = -1
        var dns: Double = -1
        var connect: Double = -1
        var ssl: Double = -1
        var send: Double
        var wait: Double
        var receive: Double
    }
}
