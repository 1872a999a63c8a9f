/// The layers of an ArcGIS `Web_Map_as_JSON` (the web map a print service fetches itself), read without
/// re-serialising: a token goes in as text inserted into the layer's object, so everything else the client wrote
/// (key order, number forms, escapes) reaches the print service byte for byte.
///
/// Only `operationalLayers[]` and `baseMap.baseMapLayers[]` are read: the entries whose `url` the print service
/// loads. A layer object that already has a `token` key is reported as such and left alone.
struct WebMapLayers: Equatable {
    /// One layer entry with a `url`.
    struct Layer: Equatable {
        /// The `url` value, JSON escapes decoded.
        var url: String
        /// The object has a `token` key already (the client's own: never replaced).
        var hasToken: Bool
        /// Offset just after the object's `{`, where `"token":"…",` is inserted.
        var insertAt: Int
        /// The object has no member besides the insertion (then no comma follows it).
        var isEmpty: Bool
    }

    var layers: [Layer]

    /// Why a web map could not be read (the request is then forwarded as the client sent it).
    struct Failure: Error, Equatable {
        var message: String
    }

    /// Nesting deeper than this is refused (a web map is a few levels deep; the bound keeps recursion finite).
    static let maxDepth = 64

    /// Reads the layers of `json` (UTF-8).
    static func read(_ json: [UInt8]) throws(Failure) -> WebMapLayers {
        var p = Parser(bytes: json)
        p.skipSpace()
        guard p.peek == UInt8(ascii: "{") else { throw Failure(message: "Web_Map_as_JSON is not a JSON object") }
        var found: [Layer] = []
        try p.object(depth: 0) { key, p throws(Failure) in
            switch key {
            case "operationalLayers": try p.layerArray(into: &found)
            case "baseMap":
                guard p.peek == UInt8(ascii: "{") else { return try p.skipValue(depth: 1) }
                try p.object(depth: 1) { key, p throws(Failure) in
                    if key == "baseMapLayers" { try p.layerArray(into: &found) } else { try p.skipValue(depth: 2) }
                }
            default: try p.skipValue(depth: 1)
            }
        }
        p.skipSpace()
        guard p.at == json.count else { throw Failure(message: "Web_Map_as_JSON has text after its object") }
        return WebMapLayers(layers: found)
    }

    /// `json` with `"token":"<t>"` added to each layer of `insertions` (a layer and its token), in one pass.
    static func inserting(_ insertions: [(layer: Layer, token: String)], into json: [UInt8]) -> [UInt8] {
        let sorted = insertions.sorted { $0.layer.insertAt < $1.layer.insertAt }
        var out: [UInt8] = []
        out.reserveCapacity(json.count + insertions.count * 64)
        var from = 0
        for (layer, token) in sorted {
            out += json[from..<layer.insertAt]
            out += Array("\"token\":".utf8)
            out += jsonString(token)
            if !layer.isEmpty { out.append(UInt8(ascii: ",")) }
            from = layer.insertAt
        }
        out += json[from...]
        return out
    }

    /// `s` as a JSON string literal.
    static func jsonString(_ s: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        let hex = Array("0123456789abcdef".utf8)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), b]
            case 0..<0x20: out += Array("\\u00".utf8) + [hex[Int(b >> 4)], hex[Int(b & 15)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
        return out
    }

    /// A recursive-descent reader over the bytes that validates as it skips.
    private struct Parser {
        let bytes: [UInt8]
        var at = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        var peek: UInt8? { at < bytes.count ? bytes[at] : nil }

        mutating func skipSpace() {
            while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x09 || bytes[at] == 0x0A || bytes[at] == 0x0D {
                at += 1
            }
        }

        func fail(_ what: String) -> Failure {
            Failure(message: "Web_Map_as_JSON is not valid JSON: \(what) at byte \(at)")
        }

        mutating func expect(_ c: UInt8) throws(Failure) {
            skipSpace()
            guard peek == c else { throw fail("expected '\(Character(Unicode.Scalar(c)))'") }
            at += 1
        }

        /// An object at `at`, each member's value handed to `member` positioned on it (which must consume it).
        mutating func object(depth: Int, _ member: (String, inout Parser) throws(Failure) -> Void) throws(Failure) {
            guard depth < WebMapLayers.maxDepth else { throw fail("nesting too deep") }
            try expect(UInt8(ascii: "{"))
            skipSpace()
            if peek == UInt8(ascii: "}") {
                at += 1
                return
            }
            while true {
                skipSpace()
                let key = try string()
                try expect(UInt8(ascii: ":"))
                skipSpace()
                try member(key, &self)
                skipSpace()
                guard let c = peek else { throw fail("unterminated object") }
                at += 1
                if c == UInt8(ascii: "}") { return }
                guard c == UInt8(ascii: ",") else { throw fail("expected ',' or '}'") }
            }
        }

        /// An array of layer objects: each object's `url` and `token` are noted; other entries are skipped.
        mutating func layerArray(into found: inout [Layer]) throws(Failure) {
            guard peek == UInt8(ascii: "[") else { return try skipValue(depth: 2) }
            at += 1
            skipSpace()
            if peek == UInt8(ascii: "]") {
                at += 1
                return
            }
            while true {
                skipSpace()
                if peek == UInt8(ascii: "{") {
                    let insertAt = at + 1
                    var url: String? = nil
                    var hasToken = false
                    var members = 0
                    try object(depth: 3) { key, p throws(Failure) in
                        members += 1
                        if key == "url", p.peek == UInt8(ascii: "\"") {
                            url = try p.string()
                        } else {
                            if key == "token" { hasToken = true }
                            try p.skipValue(depth: 4)
                        }
                    }
                    if let url {
                        found.append(Layer(url: url, hasToken: hasToken, insertAt: insertAt, isEmpty: members == 0))
                    }
                } else {
                    try skipValue(depth: 3)
                }
                skipSpace()
                guard let c = peek else { throw fail("unterminated array") }
                at += 1
                if c == UInt8(ascii: "]") { return }
                guard c == UInt8(ascii: ",") else { throw fail("expected ',' or ']'") }
            }
        }

        mutating func skipValue(depth: Int) throws(Failure) {
            guard depth < WebMapLayers.maxDepth else { throw fail("nesting too deep") }
            skipSpace()
            guard let c = peek else { throw fail("missing value") }
            switch c {
            case UInt8(ascii: "{"):
                try object(depth: depth) { _, p throws(Failure) in try p.skipValue(depth: depth + 1) }
            case UInt8(ascii: "["):
                at += 1
                skipSpace()
                if peek == UInt8(ascii: "]") {
                    at += 1
                    return
                }
                while true {
                    try skipValue(depth: depth + 1)
                    skipSpace()
                    guard let c = peek else { throw fail("unterminated array") }
                    at += 1
                    if c == UInt8(ascii: "]") { return }
                    guard c == UInt8(ascii: ",") else { throw fail("expected ',' or ']'") }
                }
            case UInt8(ascii: "\""):
                _ = try string()
            default:
                // true, false, null or a number: the bytes that can make them up.
                let start = at
                while let b = peek,
                    b == UInt8(ascii: "-") || b == UInt8(ascii: "+") || b == UInt8(ascii: ".")
                        || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
                        || (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "z"))
                        || b == UInt8(ascii: "E")
                {
                    at += 1
                }
                let word = bytes[start..<at]
                let literal =
                    word.elementsEqual("true".utf8) || word.elementsEqual("false".utf8)
                    || word.elementsEqual("null".utf8)
                let number = !word.isEmpty && word.allSatisfy { $0 < UInt8(ascii: "a") || $0 == UInt8(ascii: "e") }
                guard literal || number else { throw fail("invalid value") }
            }
        }

        /// A string literal at `at`, escapes decoded.
        mutating func string() throws(Failure) -> String {
            guard peek == UInt8(ascii: "\"") else { throw fail("expected a string") }
            at += 1
            var out: [UInt8] = []
            while true {
                guard let b = peek else { throw fail("unterminated string") }
                at += 1
                switch b {
                case UInt8(ascii: "\""):
                    return String(decoding: out, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard let e = peek else { throw fail("unterminated string") }
                    at += 1
                    switch e {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                    case UInt8(ascii: "b"): out.append(8)
                    case UInt8(ascii: "f"): out.append(12)
                    case UInt8(ascii: "n"): out.append(10)
                    case UInt8(ascii: "r"): out.append(13)
                    case UInt8(ascii: "t"): out.append(9)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if scalar >= 0xD800, scalar < 0xDC00, peek == UInt8(ascii: "\\"), at + 1 < bytes.count,
                            bytes[at + 1] == UInt8(ascii: "u")
                        {
                            at += 2
                            let low = try hex4()
                            guard low >= 0xDC00, low < 0xE000 else { throw fail("invalid surrogate pair") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let u = Unicode.Scalar(scalar) else { throw fail("invalid \\u escape") }
                        out += Array(String(Character(u)).utf8)
                    default:
                        throw fail("invalid escape")
                    }
                case 0..<0x20:
                    throw fail("control character in a string")
                default:
                    out.append(b)
                }
            }
        }

        mutating func hex4() throws(Failure) -> UInt32 {
            guard at + 4 <= bytes.count else { throw fail("short \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let b = bytes[at]
                let d: UInt32
                switch b {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(b - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(b - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(b - UInt8(ascii: "A") + 10)
                default: throw fail("invalid \\u escape")
                }
                v = v << 4 | d
                at += 1
            }
            return v
        }
    }
}
