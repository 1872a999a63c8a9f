/// The Digest login of one ``HTTP1Transfer`` whose `password` allows Digest: the 401 head held back from the client
/// while it is looked at (``DigestRound`` decides), the answer's `Authorization`, and the loop's session cache
/// (``DigestSessionCache``) for the next request. A password that also allows Basic answers a Basic-only 401 with
/// Basic, as libcurl does.
///
/// Confined to the transfer's queue.
struct DigestLogin {
    let password: PasswordSettings
    let key: DigestSessionCache.Key
    var round = DigestRound()
    /// The 401 head lines read so far, held until it ends.
    private(set) var heldHead: [[UInt8]] = []
    /// The 401 being read is answered: its body is read and dropped, and the request goes again.
    var answering = false
    /// The challenge to answer in the next request head (with `nc` 1, unless the session already counts this nonce).
    private var pending: (DigestChallenge, DigestQop)? = nil
    /// The next request head answers a Basic-only 401.
    private var pendingBasic = false
    /// The scheme of the login the last request head carried (`digest`, `basic`), for the metrics.
    private(set) var loggedInWith: String? = nil

    init?(network: NetworkAuth, fields: HTTPHeaders, target: URLTarget) {
        guard case .some(let pw) = network.password, pw.schemes.contains(.digest),
            fields.first("authorization") == nil
        else { return nil }
        password = pw
        key = .init(credential: network.passwordName ?? "", user: pw.curlUser, host: target.host, port: target.port)
    }

    /// Holds one line of a 401 head; returns true when it was the empty line that ends it.
    mutating func hold(_ line: UnsafeRawBufferPointer) -> Bool {
        heldHead.append(Array(line))
        return line.count <= 2 && (line.first == 13 || line.first == 10)
    }

    /// Hands the held head over (to go to the client) and forgets it.
    mutating func releaseHead() -> [[UInt8]] {
        defer { heldHead = [] }
        return heldHead
    }

    /// The `WWW-Authenticate` values of the held head.
    private var challengeValues: [String] {
        var out: [String] = []
        for line in heldHead.dropFirst() {
            guard let colon = line.firstIndex(of: 58) else { continue }
            let name = String(decoding: line[..<colon], as: UTF8.self)
            guard name.lowercased() == "www-authenticate" else { continue }
            var value = line[(colon + 1)...]
            while let f = value.first, f == 32 || f == 9 { value = value.dropFirst() }
            while let l = value.last, l == 32 || l == 9 || l == 13 || l == 10 { value = value.dropLast() }
            out.append(String(decoding: value, as: UTF8.self))
        }
        return out
    }

    /// Decides on the held 401 head: true when the proxy answers it (its body is dropped), false when it goes to
    /// the client.
    mutating func decide(hasBody: Bool, overHTTPS: Bool, cache: inout DigestSessionCache) -> Bool {
        let challenges = AuthChallenge.parse(fields: challengeValues)
        let sentBefore = round.sentLogin
        switch round.decide(status: 401, challenges: challenges, hasBody: hasBody) {
        case .answer(let c, let qop):
            pending = (c, qop)
            answering = true
            return true
        case .refuse, .relay:
            // A challenge Digest cannot answer goes to the client; the proxy's warning names the cause
            // (``PasswordSettings/unanswerable(challenges:overHTTPS:hasBody:)``). Basic answers a Basic 401.
            if !sentBefore, !pendingBasic, round.answers == 0,
                challenges.contains(where: { $0.is("basic") }),
                password.basicAuthorization(overHTTPS: overHTTPS) != nil
            {
                pendingBasic = true
                answering = true
                return true
            }
        }
        if sentBefore { cache.drop(key) }
        return false
    }

    /// The `Authorization` value for the next request head: the answer to the challenge just read, else the
    /// session cache's login for this destination, else none (the first request of a session goes without).
    mutating func authorization(
        method: String, uri: String, hasBody: Bool, overHTTPS: Bool, cache: inout DigestSessionCache
    ) -> String? {
        answering = false
        if pendingBasic {
            loggedInWith = "basic"
            return password.basicAuthorization(overHTTPS: overHTTPS)
        }
        if let (c, qop) = pending {
            pending = nil
            loggedInWith = "digest"
            let cnonce = DigestAuthorization.newCnonce()
            let nc = cache.start(key, challenge: c, qop: qop, cnonce: cnonce)
            return DigestAuthorization.value(
                challenge: c, qop: qop, username: password.curlUser, password: password.password, method: method,
                uri: uri, nc: nc, cnonce: cnonce)
        }
        guard let (s, nc, cnonce) = cache.use(key, newCnonce: DigestAuthorization.newCnonce),
            !(hasBody && s.qop == .authIntEmptyBody)
        else { return nil }
        round.sendingPreemptive()
        loggedInWith = "digest"
        return DigestAuthorization.value(
            challenge: s.challenge, qop: s.qop, username: password.curlUser, password: password.password,
            method: method, uri: uri, nc: nc, cnonce: cnonce)
    }
}
