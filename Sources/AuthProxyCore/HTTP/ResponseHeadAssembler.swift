#if canImport(Glibc)
    import Glibc
#endif

/// An upstream response head collected from libcurl's raw header lines as bytes, and written out as the head the
/// client gets.
///
/// It does what `ClientConnection.transferDidReceiveHeaderLine` and `commitResponseHead` do with a Swift String
/// per header line, an ``HTTPHeaders`` and a String head, without either: the reason phrase, field names and
/// (trimmed) values are copied once into one byte array, fields are offsets into it, and the client head is
/// written from those bytes. For heads in UTF-8 the output is byte for byte the String path's (the unit tests
/// hold the two side by side); bytes that are not UTF-8 pass through unchanged, where the String path turned
/// them into U+FFFD. Field names are compared ignoring ASCII case.
///
/// What is hop-by-hop comes from ``HTTPHeaders`` (one list for both paths).
///
/// It also checks the head against RFC 9112/9110 (``violation``): libcurl reads the upstream's framing from the
/// fields it recognises and passes every line on as it came, so a field a lenient client reads differently from
/// libcurl (`Content-Length : 99`, a bare CR inside a value, two different lengths) must never reach the client.
struct ResponseHeadAssembler {
    /// Why a response head must not be relayed. The proxy answers 502 instead (RFC 9112 §6.3: a proxy that gets
    /// a response with invalid framing discards it, closes the upstream connection and answers 502).
    enum Violation: Equatable, CustomStringConvertible {
        /// `Name : value` (RFC 9112 §5.1).
        case whitespaceBeforeColon
        /// A field name that is empty or not a token.
        case invalidFieldName
        /// A CR not followed by LF, or a NUL, inside a field value (RFC 9110 §5.5, RFC 9112 §2.2).
        case invalidFieldValue
        /// A `Content-Length` that is not a number (or a list of the same number).
        case invalidContentLength
        /// `Content-Length` fields (or list elements) with different values (RFC 9110 §8.6).
        case conflictingContentLength
        /// A CR or NUL inside the reason phrase (RFC 9112 §4: `reason-phrase = *( HTAB / SP / VCHAR / obs-text )`).
        case invalidReasonPhrase

        var description: String {
            switch self {
            case .whitespaceBeforeColon: return "whitespace between a field name and its colon"
            case .invalidFieldName: return "a field name with invalid characters"
            case .invalidFieldValue: return "a bare CR or NUL inside a field value"
            case .invalidContentLength: return "an invalid Content-Length"
            case .conflictingContentLength: return "Content-Length values that differ"
            case .invalidReasonPhrase: return "a bare CR or NUL in the reason phrase"
            }
        }
    }

    /// What one header line was.
    enum Line: Equatable {
        /// A status line: a new head begins (the previous one, a 1xx or a challenge libcurl answers, is gone).
        case status(Int)
        /// A field, or an obs-fold continuation joined to the previous field.
        case field
        /// The blank line that ends a head.
        case end
        /// Nothing to keep: a line without a colon, a continuation with no field before it, or any line
        /// after the end of a head that is not a status line (trailers of a chunked response).
        case ignored
    }

    /// What the client-facing head depends on besides the upstream's head.
    struct Options {
        var isHeadRequest: Bool
        /// The client's HTTP/1.x minor version (0: no chunked encoding, keep-alive must be explicit).
        var clientMinorVersion: Int
        /// Whether the connection stays open after this exchange, as far as the request goes.
        var keepAlive: Bool
        /// The browser origin a `/proxy` exchange answers to (CORS), nil otherwise.
        var corsOrigin: String?
        /// A `/proxy` exchange: the answer depends on the request's `Origin`, so it says `Vary: Origin` also when the
        /// request had none (an `<img>` or `<script src>` load), or a browser reuses that cached answer, without
        /// `Access-Control-Allow-Origin`, for the app's next CORS request to the same URL and fails it.
        var varyOrigin: Bool = false
        /// An `[[app]]` that requires sign-in: the answer depends on the user's `Authorization` too, so a cache in
        /// front of the proxy never hands a signed-in user's answer to a request without that user's token.
        var varyAuthorization: Bool = false
        /// The `Via` value.
        var via: String
    }

    private struct Field {
        var nameStart: Int
        var nameEnd: Int
        var valueStart: Int
        var valueEnd: Int
        /// What the name is, found once when the field arrives (``Kind``).
        var kind: UInt8
    }

    /// Field names the head is written by, as bits of ``Field/kind``.
    private enum Kind {
        /// In ``HTTPHeaders/hopByHop``.
        static let hopByHop: UInt8 = 1
        /// `Connection` or `Proxy-Connection`: its value names more hop-by-hop fields.
        static let listing: UInt8 = 2
        static let contentLength: UInt8 = 4
        static let transferEncoding: UInt8 = 8
        static let allowOrigin: UInt8 = 16
        /// `Location`, `Content-Location` or `Refresh`: URLs an injected token is kept out of.
        static let location: UInt8 = 32

        static func of(_ name: UnsafeRawBufferPointer) -> UInt8 {
            var k: UInt8 = 0
            if HTTPHeaders.isHopByHop(bytes: name) { k |= hopByHop }
            if HTTPHeaders.isConnectionListing(bytes: name) { k |= listing }
            if ResponseHeadAssembler.equalsIgnoringCase(name, "content-length") { k |= contentLength }
            if ResponseHeadAssembler.equalsIgnoringCase(name, "transfer-encoding") { k |= transferEncoding }
            if ResponseHeadAssembler.equalsIgnoringCase(name, "access-control-allow-origin") { k |= allowOrigin }
            if ResponseHeadAssembler.equalsIgnoringCase(name, "location")
                || ResponseHeadAssembler.equalsIgnoringCase(name, "content-location")
                || ResponseHeadAssembler.equalsIgnoringCase(name, "refresh")
            {
                k |= location
            }
            return k
        }
    }

    /// Reason phrase, then each field's name and value, in arrival order.
    private var storage: [UInt8] = []
    private var fields: [Field] = []
    /// The reason phrase's range in `storage`; nil when the status line had none (the standard one is used).
    private var reason: Range<Int>? = nil
    /// The status of the head being read (0 before the first status line).
    private(set) var status = 0
    /// The blank line of the current head was seen.
    private(set) var isComplete = false
    /// How many fields are `Connection`/`Proxy-Connection` (usually one; with none, no name needs checking
    /// against their lists).
    private var listingFields = 0
    /// How many fields are `Location`, `Content-Location` or `Refresh` (``rewriteLocations(_:)``).
    private var locationFields = 0
    /// The first reason the head being read may not be relayed; nil while it is valid.
    private(set) var violation: Violation? = nil
    /// The length the `Content-Length` fields seen so far agree on (for ``Violation/conflictingContentLength``).
    private var lengthSeen: Int64? = nil
    /// Set by ``substituteStatus(_:)``: the upstream's body framing no longer describes what follows the head.
    private var lengthVoid = false

    /// Reserves room for a typical head once; ``reset(keepingCapacity:)`` keeps it across exchanges.
    init(capacity: Int = 1024) {
        storage.reserveCapacity(capacity)
        fields.reserveCapacity(capacity / 32)
    }

    /// Bytes of storage held (kept across ``reset(keepingCapacity:)``).
    var retainedBytes: Int { storage.capacity + fields.capacity * MemoryLayout<Field>.stride }

    /// Forgets the head, for the next exchange.
    mutating func reset(keepingCapacity: Bool = true) {
        storage.removeAll(keepingCapacity: keepingCapacity)
        fields.removeAll(keepingCapacity: keepingCapacity)
        reason = nil
        status = 0
        isComplete = false
        listingFields = 0
        locationFields = 0
        violation = nil
        lengthSeen = nil
        lengthVoid = false
    }

    /// Takes one raw header line from libcurl's header callback, CRLF included. Once the caller has written a
    /// head it must stop feeding lines (what follows are trailers; a status line would start a new head).
    mutating func add(line raw: UnsafeRawBufferPointer) -> Line {
        var end = raw.count
        while end > 0, raw[end - 1] == 10 || raw[end - 1] == 13 { end -= 1 }
        let line = UnsafeRawBufferPointer(rebasing: raw[0..<end])
        // A status line only where libcurl reads one: first in a head. Elsewhere `HTTP/1.1 200 OK: x` is a field to
        // libcurl, and reading it as a new head would give the client a status libcurl does not frame the body by.
        let atHeadStart = isComplete || (status == 0 && fields.isEmpty)
        // 72 84 84 80 47 is "HTTP/".
        if atHeadStart, line.count >= 5, line[0] == 72, line[1] == 84, line[2] == 84, line[3] == 80, line[4] == 47 {
            beginHead(line)
            return .status(status)
        }
        if isComplete { return .ignored }
        if line.isEmpty {
            isComplete = true
            return .end
        }
        if line[0] == 32 || line[0] == 9 {
            // obs-fold from an old upstream (RFC 9112 §5.2): joined to the previous field with one space.
            guard !fields.isEmpty else { return .ignored }
            let more = Self.trimmed(line)
            check(value: more)
            storage.append(32)
            storage.append(contentsOf: more)
            fields[fields.count - 1].valueEnd = storage.count
            if fields[fields.count - 1].kind & Kind.contentLength != 0 { checkLength(of: fields[fields.count - 1]) }
            return .field
        }
        guard let colon = line.firstIndex(of: 58) else { return .ignored }
        let name = UnsafeRawBufferPointer(rebasing: line[0..<colon])
        check(name: name)
        let kind = Kind.of(name)
        if kind & Kind.listing != 0 { listingFields += 1 }
        if kind & Kind.location != 0 { locationFields += 1 }
        let nameStart = storage.count
        storage.append(contentsOf: name)
        let valueStart = storage.count
        let value = Self.trimmed(UnsafeRawBufferPointer(rebasing: line[(colon + 1)...]))
        check(value: value)
        storage.append(contentsOf: value)
        let field = Field(
            nameStart: nameStart, nameEnd: valueStart, valueStart: valueStart, valueEnd: storage.count, kind: kind)
        fields.append(field)
        if kind & Kind.contentLength != 0 { checkLength(of: field) }
        return .field
    }

    // MARK: validity (RFC 9112 §5, RFC 9110 §5.5 and §8.6)

    /// A field name is a token, with nothing between it and the colon.
    private mutating func check(name: UnsafeRawBufferPointer) {
        guard violation == nil else { return }
        if let last = name.last, last == 32 || last == 9 {
            violation = .whitespaceBeforeColon
        } else if name.isEmpty || !name.allSatisfy(isTokenChar) {
            violation = .invalidFieldName
        }
    }

    /// CR, LF and NUL are never allowed in a value (other control characters may be kept, RFC 9110 §5.5).
    private mutating func check(value: UnsafeRawBufferPointer) {
        guard violation == nil else { return }
        if value.contains(where: { $0 == 13 || $0 == 10 || $0 == 0 }) { violation = .invalidFieldValue }
    }

    /// Every `Content-Length` is a number (or a list of one number), and all of them agree.
    private mutating func checkLength(of f: Field) {
        let length = storage.withUnsafeBytes { s in Self.readLength(Self.bytes(s, f.valueStart, f.valueEnd)) }
        switch length {
        case .invalid:
            if violation == nil { violation = .invalidContentLength }
        case .conflicting:
            if violation == nil { violation = .conflictingContentLength }
        case .value(let n):
            if let seen = lengthSeen, seen != n {
                if violation == nil { violation = .conflictingContentLength }
                return
            }
            lengthSeen = n
        }
    }

    /// `HTTP/1.1 200 OK`. The status is read as libcurl reads it (`sscanf(" HTTP/%1d.%1d%c%3d%c")` in 7.88): after the
    /// version and a space, optional whitespace, then exactly three digits not followed by a fourth; the reason phrase
    /// is what follows (after one space or tab). libcurl frames the body by that status, so the client must get the same one:
    /// splitting at the first two spaces instead made `HTTP/1.1  204` (two spaces) or `HTTP/1.1 204\tNo` a 502 with a
    /// `Content-Length` and no body, desynchronising the client. A status libcurl would refuse becomes 502 (libcurl
    /// fails the transfer anyway), with the reason after the next space.
    private mutating func beginHead(_ line: UnsafeRawBufferPointer) {
        storage.removeAll(keepingCapacity: true)
        fields.removeAll(keepingCapacity: true)
        reason = nil
        isComplete = false
        listingFields = 0
        locationFields = 0
        violation = nil
        lengthSeen = nil
        lengthVoid = false
        guard let sp1 = line.firstIndex(of: 32) else {
            status = 502
            return
        }
        if let (code, end) = Self.statusCode(line) {
            status = code
            if end < line.count {
                let phrase = UnsafeRawBufferPointer(
                    rebasing: line[(line[end] == 32 || line[end] == 9 ? end + 1 : end)...])
                // A lenient client may end the status line at a bare CR and read what follows as a field.
                if phrase.contains(where: { $0 == 13 || $0 == 0 }) { violation = .invalidReasonPhrase }
                storage.append(contentsOf: phrase)
                reason = 0..<storage.count
            }
            return
        }
        status = 502
        if let sp2 = line[(sp1 + 1)...].firstIndex(of: 32) {
            let phrase = UnsafeRawBufferPointer(rebasing: line[(sp2 + 1)...])
            if phrase.contains(where: { $0 == 13 || $0 == 0 }) { violation = .invalidReasonPhrase }
            storage.append(contentsOf: phrase)
            reason = 0..<storage.count
        }
    }

    /// The status code of a status line as libcurl reads it (see ``beginHead(_:)``) and where the code ends; nil
    /// when libcurl would refuse the line. The proxy's own client (``ResponseReader``) frames bodies by the same
    /// reading, so the client always gets the status the body was framed by.
    static func statusCode(_ line: UnsafeRawBufferPointer) -> (Int, Int)? {
        guard let sp1 = line.firstIndex(of: 32) else { return nil }
        var i = sp1 + 1
        while i < line.count, isCSpace(line[i]) { i += 1 }
        let end = i + 3
        let isDigit = { (c: UInt8) in c >= 48 && c <= 57 }
        guard end <= line.count, isDigit(line[i]), isDigit(line[i + 1]), isDigit(line[i + 2]),
            end == line.count || !isDigit(line[end]), line[i] != 48
        else { return nil }
        return (Int(line[i] - 48) * 100 + Int(line[i + 1] - 48) * 10 + Int(line[i + 2] - 48), end)
    }

    /// C `isspace`: what `sscanf`'s `%d` skips.
    private static func isCSpace(_ c: UInt8) -> Bool { c == 32 || (c >= 9 && c <= 13) }

    /// Whether the completed head is the final answer: not a 1xx, and not a 401/407 that libcurl answers itself
    /// (with a password or Kerberos credential; the next status line starts the real response).
    func isFinal(answersChallenges: Bool) -> Bool {
        status >= 200 && !(answersChallenges && (status == 401 || status == 407))
    }

    /// The upstream gave no usable final head (it ended, or started a body, after a 1xx or inside a head): answer
    /// `code` with its standard reason phrase, keeping the fields seen so far but not their framing. A
    /// `Content-Length` of that head described a body that never comes; announcing it would leave the client
    /// waiting for bytes and reading the next response as them.
    mutating func substituteStatus(_ code: Int) {
        status = code
        reason = nil
        lengthVoid = true
    }

    // MARK: look-ups

    /// The first value of the field `lowercasedName` (ASCII, lower case), hop-by-hop fields included. No
    /// allocation: the slice shares the assembler's storage.
    func value(of lowercasedName: StaticString) -> ArraySlice<UInt8>? {
        let found: Range<Int>? = storage.withUnsafeBytes { (s: UnsafeRawBufferPointer) -> Range<Int>? in
            for f in fields where Self.equalsIgnoringCase(Self.bytes(s, f.nameStart, f.nameEnd), lowercasedName) {
                return f.valueStart..<f.valueEnd
            }
            return nil
        }
        guard let found else { return nil }
        return storage[found]
    }

    /// Every value of the field `lowercasedName`, as Strings, for rare callers (challenge schemes for metrics).
    func values(of lowercasedName: StaticString) -> [String] {
        storage.withUnsafeBytes { (s: UnsafeRawBufferPointer) -> [String] in
            fields.filter { Self.equalsIgnoringCase(Self.bytes(s, $0.nameStart, $0.nameEnd), lowercasedName) }
                .map { String(decoding: Self.bytes(s, $0.valueStart, $0.valueEnd), as: UTF8.self) }
        }
    }

    /// Replaces the values of `Location`, `Content-Location` and `Refresh` (`0; url=…`) fields for which `transform` returns new bytes
    /// (nil: the value stays). Used to keep an injected token out of redirect URLs (``RedirectTokenScrub``).
    mutating func rewriteLocations(_ transform: (UnsafeRawBufferPointer) -> [UInt8]?) {
        // Nearly every response has none of them: no loop then (this runs for every response to a request with
        // an injected token).
        guard locationFields > 0 else { return }
        for i in fields.indices where fields[i].kind & Kind.location != 0 {
            replaceValue(i) { transform($0) }
        }
    }

    /// Whether any field could hold `token`, as is or encoded: it appears literally, or the head has a `%`, an `&`
    /// or a `\` at all (``EncodedTokenFinder``'s escapes). Scans with libc's string functions, so that the common
    /// head (no escapes, no token) costs no per-field pass: this runs for every response to a request with an
    /// injected token.
    func mayHold(token: String) -> Bool {
        storage.withUnsafeBytes { s in
            guard !s.isEmpty else { return false }
            if memchr(s.baseAddress!, 37, s.count) != nil || memchr(s.baseAddress!, 38, s.count) != nil
                || memchr(s.baseAddress!, 92, s.count) != nil
            {
                return true
            }
            var t = token
            return t.withUTF8 { Self.find(s, UnsafeRawBufferPointer($0)) }
        }
    }

    /// Whether `needle` occurs in `haystack` (memchr to each candidate first byte, then memcmp).
    private static func find(_ haystack: UnsafeRawBufferPointer, _ needle: UnsafeRawBufferPointer) -> Bool {
        guard let n = needle.baseAddress, let h = haystack.baseAddress, !needle.isEmpty, haystack.count >= needle.count
        else { return false }
        let first = Int32(needle[0])
        var at = 0
        let last = haystack.count - needle.count
        while at <= last {
            guard let p = memchr(h + at, first, last - at + 1) else { return false }
            let found = UnsafeRawPointer(p)
            if memcmp(found, n, needle.count) == 0 { return true }
            at = (found - h) + 1
        }
        return false
    }

    private static func find(_ haystack: UnsafeRawBufferPointer, _ needle: StaticString) -> Bool {
        find(haystack, UnsafeRawBufferPointer(start: needle.utf8Start, count: needle.utf8CodeUnitCount))
    }

    /// Writes the fields that go on to the client: not hop-by-hop, not named in `Connection`, no `Content-Length`
    /// (the caller writes the framing), and no `Access-Control-Allow-Origin` when the proxy answers CORS itself.
    private func appendEndToEndFields(_ s: UnsafeRawBufferPointer, to out: inout ByteBuffer, dropAllowOrigin: Bool) {
        for f in fields {
            if f.kind & (Kind.hopByHop | Kind.contentLength) != 0 { continue }
            if dropAllowOrigin, f.kind & Kind.allowOrigin != 0 { continue }
            let name = Self.bytes(s, f.nameStart, f.nameEnd)
            if namedInConnection(name, s) { continue }
            out.append(name)
            out.append(": ")
            out.append(Self.bytes(s, f.valueStart, f.valueEnd))
            out.append("\r\n")
        }
    }

    /// Gives every field value of at least `minLength` bytes to `transform` (with whether it is a `Location`,
    /// `Content-Location` or `Refresh` URL) and keeps what it returns instead; nil keeps the value. The length
    /// check comes first because this runs for every response to a request with an injected token, and a value
    /// shorter than the token cannot hold it (nearly every field: dates, types, lengths).
    mutating func rewriteValues(minLength: Int, _ transform: (UnsafeRawBufferPointer, _ isLocation: Bool) -> [UInt8]?) {
        for i in fields.indices where fields[i].valueEnd - fields[i].valueStart >= minLength {
            let isLocation = fields[i].kind & Kind.location != 0
            replaceValue(i) { transform($0, isLocation) }
        }
    }

    private mutating func replaceValue(_ i: Int, _ transform: (UnsafeRawBufferPointer) -> [UInt8]?) {
        let f = fields[i]
        let replacement: [UInt8]? = storage.withUnsafeBytes { s in
            transform(Self.bytes(s, f.valueStart, f.valueEnd))
        }
        guard let replacement else { return }
        fields[i].valueStart = storage.count
        storage.append(contentsOf: replacement)
        fields[i].valueEnd = storage.count
    }

    /// Drops `Content-Encoding` and the body's length: the body goes on decoded (``BodyScrub``), so it is re-framed
    /// (chunked, or closed at its end) and no longer in the encoding the upstream named.
    mutating func dropContentEncoding() {
        storage.withUnsafeBytes { s in
            fields.removeAll { Self.equalsIgnoringCase(Self.bytes(s, $0.nameStart, $0.nameEnd), "content-encoding") }
        }
        lengthVoid = true
    }

    /// The values of the fields named `lowercasedName` (any case), as strings: for a credential kind reading the head
    /// (``ResponseView``).
    func values(named lowercasedName: String) -> [String] {
        var name = lowercasedName
        return name.withUTF8 { n in
            storage.withUnsafeBytes { (s: UnsafeRawBufferPointer) -> [String] in
                fields.filter {
                    Self.equalsIgnoringCase(Self.bytes(s, $0.nameStart, $0.nameEnd), UnsafeRawBufferPointer(n))
                }
                .map { String(decoding: Self.bytes(s, $0.valueStart, $0.valueEnd), as: UTF8.self) }
            }
        }
    }

    /// The first value of `lowercasedName` (any case), without a list of all of them (a kind reading the
    /// `Content-Type` of every response it inspects).
    func first(named lowercasedName: String) -> String? {
        var name = lowercasedName
        return name.withUTF8 { n in
            storage.withUnsafeBytes { (s: UnsafeRawBufferPointer) -> String? in
                fields.first {
                    Self.equalsIgnoringCase(Self.bytes(s, $0.nameStart, $0.nameEnd), UnsafeRawBufferPointer(n))
                }
                .map { String(decoding: Self.bytes(s, $0.valueStart, $0.valueEnd), as: UTF8.self) }
            }
        }
    }

    /// ``value(of:)`` as a String, for rare callers (token-error sniffing).
    func string(of lowercasedName: StaticString) -> String? {
        value(of: lowercasedName).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The agreed body length: nil when there is no `Content-Length`, when `Transfer-Encoding` is present (libcurl
    /// de-chunks the body, so a length beside it is meaningless), when several `Content-Length` values differ, or
    /// when a value is not digits (or a list of the same digits, `5, 5`, which counts as 5). A `Content-Length`
    /// named in `Connection` does not count.
    var contentLength: Int64? {
        storage.withUnsafeBytes { s in agreedLength(s) }
    }

    private func agreedLength(_ s: UnsafeRawBufferPointer) -> Int64? {
        if lengthVoid { return nil }
        var agreed: Int64? = nil
        for f in fields {
            if f.kind & Kind.transferEncoding != 0 { return nil }
            guard f.kind & Kind.contentLength != 0, !namedInConnection(Self.bytes(s, f.nameStart, f.nameEnd), s) else {
                continue
            }
            guard let n = Self.lengthList(Self.bytes(s, f.valueStart, f.valueEnd)) else { return nil }
            if let agreed, agreed != n { return nil }
            agreed = n
        }
        return agreed
    }

    /// A `Content-Length` value as read: the number, several different numbers, or not a length at all.
    enum LengthValue: Equatable {
        case value(Int64)
        case conflicting
        case invalid
    }

    /// A `Content-Length` value: `1*DIGIT`, or a comma-separated list whose elements are all the same number
    /// (RFC 9110 §8.6 lets a recipient take that as the one value).
    static func readLength(_ v: UnsafeRawBufferPointer) -> LengthValue {
        var value: Int64? = nil
        var conflicting = false
        var start = 0
        while start <= v.count {
            var stop = start
            while stop < v.count, v[stop] != 44 { stop += 1 }
            let element = trimmed(UnsafeRawBufferPointer(rebasing: v[start..<stop]))
            if !element.isEmpty {
                guard element.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = parseInteger(element) else {
                    return .invalid
                }
                if let value, value != n { conflicting = true }
                value = n
            }
            start = stop + 1
        }
        guard let value else { return .invalid }
        return conflicting ? .conflicting : .value(value)
    }

    /// The number a `Content-Length` value stands for (``readLength(_:)``), nil unless it is one.
    static func lengthList(_ v: UnsafeRawBufferPointer) -> Int64? {
        if case .value(let n) = readLength(v) { return n }
        return nil
    }

    // MARK: writing

    /// Appends the client-facing head to `out`: the status line with the upstream's reason phrase; the fields
    /// without hop-by-hop ones (the fixed list and what `Connection` names), without `Content-Length` and, for a
    /// CORS answer, without the upstream's `Access-Control-Allow-Origin`; then `Content-Length` (the agreed length,
    /// also for a bodiless answer except 204) or `Transfer-Encoding: chunked` (HTTP/1.1 client, no length),
    /// ``ProxySupport/fields`` on a 401 offering NTLM/Negotiate/Kerberos, `Via`, the CORS fields and `Connection`.
    /// Returns how the body is framed.
    func write(into out: inout ByteBuffer, options o: Options) -> ResponseFraming {
        var framing = ResponseFraming(noBody: true, chunked: false, contentLength: nil, keepAlive: o.keepAlive)
        storage.withUnsafeBytes { s in
            // The one framing rule (``ResponseFraming/decide(status:isHeadRequest:upstreamLength:clientMinorVersion:keepAlive:)``).
            framing = ResponseFraming.decide(
                status: status, isHeadRequest: o.isHeadRequest, upstreamLength: agreedLength(s),
                clientMinorVersion: o.clientMinorVersion, keepAlive: o.keepAlive)
            out.append("HTTP/1.1 ")
            Self.appendDecimal(Int64(status), to: &out)
            out.append(" ")
            if let reason {
                out.append(Self.bytes(s, reason.lowerBound, reason.upperBound))
            } else {
                out.append(reasonPhrase(status))
            }
            out.append("\r\n")
            appendEndToEndFields(s, to: &out, dropAllowOrigin: o.corsOrigin != nil)
            if let n = framing.contentLength { Self.appendContentLength(n, to: &out) }
            if framing.chunked { out.append("Transfer-Encoding: chunked\r\n") }
        }
        // One comparison for every other response: this runs for each one relayed.
        if status == 401, ProxySupport.applies(status: status, wwwAuthenticate: values(of: "www-authenticate")) {
            out.append(ProxySupport.fields)
        }
        out.append("Via: ")
        out.append(o.via)
        out.append("\r\n")
        if let origin = o.corsOrigin {
            out.append("Access-Control-Allow-Origin: ")
            out.append(origin)
            out.append("\r\n")
        }
        if o.varyAuthorization {
            out.append("Vary: Origin, Authorization\r\n")
        } else if o.corsOrigin != nil || o.varyOrigin {
            out.append("Vary: Origin\r\n")
        }
        if !framing.keepAlive {
            out.append("Connection: close\r\n")
        } else if o.clientMinorVersion == 0 {
            out.append("Connection: keep-alive\r\n")
        }
        out.append("\r\n")
        return framing
    }

    /// Appends the client-facing head of a `101` that answered a WebSocket handshake: the status line, the fields
    /// without hop-by-hop ones (as ``write(into:options:)``, `Content-Length` included: no body follows), then
    /// `Upgrade` (the upstream's value, else `requested`) and `Connection: Upgrade` — the two hop-by-hop fields
    /// the switch itself needs on this hop too — and `Via`.
    func writeSwitchingProtocols(into out: inout ByteBuffer, upgrade requested: String, via: String) {
        out.append("HTTP/1.1 101 ")
        storage.withUnsafeBytes { s in
            if let reason {
                out.append(Self.bytes(s, reason.lowerBound, reason.upperBound))
            } else {
                out.append(reasonPhrase(101))
            }
            out.append("\r\n")
            appendEndToEndFields(s, to: &out, dropAllowOrigin: false)
        }
        out.append("Upgrade: ")
        out.append(string(of: "upgrade") ?? requested)
        out.append("\r\nConnection: Upgrade\r\nVia: ")
        out.append(via)
        out.append("\r\n\r\n")
    }

    // MARK: helpers

    /// Whether `name` is listed in a `Connection` or `Proxy-Connection` field (comma-separated, trimmed tokens).
    /// Scans the listing fields each time instead of collecting the names: heads have at most one, with one
    /// token.
    private func namedInConnection(_ name: UnsafeRawBufferPointer, _ s: UnsafeRawBufferPointer) -> Bool {
        guard listingFields > 0 else { return false }
        for f in fields where f.kind & Kind.listing != 0 {
            var start = f.valueStart
            while start <= f.valueEnd {
                var stop = start
                while stop < f.valueEnd, s[stop] != 44 { stop += 1 }
                let token = Self.trimmed(Self.bytes(s, start, stop))
                if !token.isEmpty, Self.equalsIgnoringCase(name, token) { return true }
                start = stop + 1
            }
        }
        return false
    }

    private static func bytes(_ s: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(rebasing: s[start..<end])
    }

    /// Without leading and trailing spaces and tabs.
    static func trimmed(_ b: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        var lo = 0
        var hi = b.count
        while lo < hi, b[lo] == 32 || b[lo] == 9 { lo += 1 }
        while hi > lo, b[hi - 1] == 32 || b[hi - 1] == 9 { hi -= 1 }
        return UnsafeRawBufferPointer(rebasing: b[lo..<hi])
    }

    /// `a` equals the lower-case ASCII name `b`, ignoring ASCII case.
    static func equalsIgnoringCase(_ a: UnsafeRawBufferPointer, _ b: StaticString) -> Bool {
        equalsIgnoringCase(a, UnsafeRawBufferPointer(start: b.utf8Start, count: b.utf8CodeUnitCount))
    }

    /// ASCII case-insensitive equality of two byte strings (the rule of ``asciiCaseInsensitiveEquals(_:lowercased:)``).
    private static func equalsIgnoringCase(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        guard a.count == b.count else { return false }
        for i in 0..<a.count {
            let x = a[i], y = b[i]
            if x != y, !(x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7a) { return false }
        }
        return true
    }

    /// An integer as Swift's `Int64(String)` reads one (optional `+` or `-`, then decimal digits only; nil on
    /// overflow), so lengths and statuses are accepted exactly as the String path accepted them.
    static func parseInteger(_ b: UnsafeRawBufferPointer) -> Int64? {
        var i = 0
        var negative = false
        if let c = b.first, c == 43 || c == 45 {
            negative = c == 45
            i = 1
        }
        guard i < b.count else { return nil }
        var n: Int64 = 0
        while i < b.count {
            let d = b[i] &- 48
            guard d < 10 else { return nil }
            let (m, o1) = n.multipliedReportingOverflow(by: 10)
            let (r, o2) = negative ? m.subtractingReportingOverflow(Int64(d)) : m.addingReportingOverflow(Int64(d))
            guard !o1, !o2 else { return nil }
            n = r
            i += 1
        }
        return n
    }

    private static func appendContentLength(_ n: Int64, to out: inout ByteBuffer) {
        out.append("Content-Length: ")
        appendDecimal(n, to: &out)
        out.append("\r\n")
    }

    private static func appendDecimal(_ value: Int64, to out: inout ByteBuffer) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buf in
            var v = value.magnitude
            var i = buf.count
            repeat {
                i -= 1
                buf[i] = UInt8(48 + v % 10)
                v /= 10
            } while v > 0
            if value < 0 {
                i -= 1
                buf[i] = 45
            }
            out.append(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(buf)[i...]))
        }
    }
}
