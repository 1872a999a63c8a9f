import Foundation

/// `POST /capture?credential=NAME&seconds=N` on the admin listener: records the credential's exchanges for N
/// seconds and answers with the HAR file when the window ends (``CaptureRecorder``). Decided here from the request
/// alone; the admin server holds the connection open while the window runs.
extension AdminRouter {
    /// What a capture request asks for.
    struct CaptureAsk: Equatable {
        var credential: String
        var seconds: Int
    }

    enum CaptureRouting: Equatable {
        /// Refused or malformed: this answer, now.
        case answer(Response)
        /// Start a window; the answer comes when it ends.
        case start(CaptureAsk)
    }

    static let defaultCaptureSeconds = 60

    /// nil when `request` is not for `/capture`. `enabled`: `[admin] capture`.
    static func captureRoute(_ request: AdminRequest, hosts: Set<String>, enabled: Bool) -> CaptureRouting? {
        let path = request.target.prefix { $0 != "?" }
        guard path == "/capture" else { return nil }
        if let refusal = AdminRequestPolicy.hostRefusal(request, names: hosts) { return .answer(refusal) }
        guard request.method == "POST" else {
            var r = Response.text(405, "method not allowed (use POST)\n")
            r.extraHeaders = [("Allow", "POST")]
            return .answer(r)
        }
        guard enabled else {
            return .answer(
                .text(
                    403,
                    "refused: POST /capture is off; set capture = true in [admin] to let this admin listener record "
                        + "redacted HAR captures\n"))
        }
        if let refusal = AdminRequestPolicy.captureRefusal(request) { return .answer(.text(403, refusal + "\n")) }
        switch parseCaptureQuery(request.target) {
        case .failure(let message): return .answer(.text(400, "bad request: \(message)\n"))
        case .success(let ask): return .start(ask)
        }
    }

    /// `credential` (required) and `seconds` (1 to ``CaptureRecorder/maxSeconds``, default 60) from the target's
    /// query; anything else is an error naming it.
    static func parseCaptureQuery(_ target: String) -> Result<CaptureAsk, CaptureQueryError> {
        var credential: String? = nil
        var seconds = defaultCaptureSeconds
        if let q = target.firstIndex(of: "?") {
            for (name, value) in CaptureRedaction.rawPairs(target[target.index(after: q)...]) {
                let v = value.map { CaptureRedaction.decoded($0) } ?? ""
                switch CaptureRedaction.decoded(name) {
                case "credential":
                    credential = v
                case "seconds":
                    guard let n = Int(v), (1...CaptureRecorder.maxSeconds).contains(n) else {
                        return .failure(
                            CaptureQueryError(
                                message: "seconds must be a whole number from 1 to \(CaptureRecorder.maxSeconds)"))
                    }
                    seconds = n
                default:
                    return .failure(
                        CaptureQueryError(
                            message: "unknown parameter '\(String(CaptureRedaction.decoded(name).prefix(40)))' "
                                + "(POST /capture takes credential and seconds)"))
                }
            }
        }
        guard let credential, !credential.isEmpty else {
            return .failure(CaptureQueryError(message: "name the credential: POST /capture?credential=NAME&seconds=60"))
        }
        return .success(CaptureAsk(credential: credential, seconds: seconds))
    }

    struct CaptureQueryError: Error, Equatable {
        var message: String
    }
}

extension AdminRequestPolicy {
    /// The recipe the refusals and docs/operations.md give.
    static let captureRecipe =
        "curl -X POST -H 'X-Authproxy-Capture: 1' 'http://127.0.0.1:<port>/capture?credential=NAME&seconds=60'"

    /// Why a `POST /capture` is refused (the 403 body), or nil to accept it: the rules of `POST /reload`
    /// (``reloadRefusal(_:)``), since a capture is as much a change a web page must not cause, and its answer
    /// (traffic, even redacted) as little a page's to read.
    static func captureRefusal(_ r: AdminRequest) -> String? {
        guard let refusal = reloadRefusal(r) else { return nil }
        return
            refusal
            .replacingOccurrences(of: reloadRecipe, with: captureRecipe)
            .replacingOccurrences(of: "X-Authproxy-Reload", with: "X-Authproxy-Capture")
            .replacingOccurrences(of: "POST /reload", with: "POST /capture")
    }
}

/// What the admin listener needs of the running proxy for `POST /capture` (``ProxyServer`` implements it). Called
/// on the admin listener's queue.
protocol AdminCaptureBackend: AnyObject, Sendable {
    /// `[admin] capture` in the configuration in force.
    func captureEnabled() -> Bool
    /// Starts the window `ask` describes. `.answer`: refused now (an unknown credential, a capture already
    /// running); `.started(id)`: `done` gets the answer (the HAR file) when the window ends, on any queue.
    func startCapture(_ ask: AdminRouter.CaptureAsk, done: @escaping @Sendable (AdminRouter.Response) -> Void)
        -> CaptureStart
}

/// The outcome of ``AdminCaptureBackend/startCapture(_:done:)``.
enum CaptureStart {
    case answer(AdminRouter.Response)
    case started(session: UInt64)
}
