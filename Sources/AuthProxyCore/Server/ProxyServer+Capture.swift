import Foundation
import Logging

/// `POST /capture` for the admin listener (``AdminCaptureBackend``): checks the credential against the
/// configuration in force and runs the window on ``CaptureRecorder``.
extension ProxyServer: AdminCaptureBackend {
    func captureEnabled() -> Bool {
        reloadQueue.sync { current.config.admin?.capture ?? false }
    }

    func startCapture(_ ask: AdminRouter.CaptureAsk, done: @escaping @Sendable (AdminRouter.Response) -> Void)
        -> CaptureStart
    {
        let names = reloadQueue.sync { current.config.credentials.map(\.name) }
        guard names.contains(ask.credential) else {
            let known = names.prefix(20).map { "'\($0)'" }.joined(separator: ", ")
            return .answer(
                .text(
                    404,
                    "unknown credential '\(String(ask.credential.prefix(100)))': the configuration has "
                        + (names.isEmpty ? "no credentials" : known + (names.count > 20 ? ", …" : "")) + "\n"))
        }
        let logger = self.logger
        let started = CaptureRecorder.shared.start(
            credential: ask.credential, seconds: ask.seconds, nowMillis: nowMillis()
        ) {
            document in
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
            let body = (try? encoder.encode(document)).map { Array($0) } ?? []
            logger.notice(
                "capture ended",
                metadata: [
                    "credential": "\(ask.credential)", "entries": "\(document.log.entries.count)",
                    "bytes": "\(body.count)",
                ])
            done(AdminRouter.Response(status: 200, contentType: "application/json; charset=utf-8", body: body))
        }
        switch started {
        case .failure(let busy):
            return .answer(
                .text(
                    409,
                    "a capture of credential '\(busy.credential)' is running; one capture at a time: try again when it "
                        + "ends\n"))
        case .success(let id):
            logger.notice(
                "capture started", metadata: ["credential": "\(ask.credential)", "seconds": "\(ask.seconds)"])
            return .started(session: id)
        }
    }
}
