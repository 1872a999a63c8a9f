import Dispatch
import Foundation
import Logging

/// Obtains and renews the Kerberos ticket for a `kerberos` credential, into a private credential cache under
/// the state directory. GSS-API (which libcurl uses for Negotiate) reads the cache named by `KRB5CCNAME`, a
/// process-wide setting: so one Kerberos identity per proxy process is supported.
///
/// A configuration reload that changes the kerberos credential starts a new instance (a new `kinit` into the
/// same cache) and stops this one (``stop()``); an unchanged credential keeps its instance and ticket.
///
/// Ownership: `start()` runs once before serving (or during a reload, before the instance is used); afterwards
/// only its private `queue` (the renewal timer) touches mutable state.
final class KerberosTickets: @unchecked Sendable {
    let settings: KerberosSettings
    let cache: String
    private let logger: Logger
    private var timer: (any DispatchSourceTimer)?
    private let queue = ProxyQueue.make("authproxy.kerberos")

    init(settings: KerberosSettings, stateDir: String, logger: Logger) {
        self.settings = settings
        cache = stateDir + "/krb5cc_authproxy"
        self.logger = logger
    }

    /// Points GSS-API at the private cache (and the client keytab), gets a first ticket, and renews it every
    /// 30 minutes. Must run before any request uses Negotiate.
    func start() throws(ServerError) {
        do {
            try FileManager.default.createDirectory(
                atPath: (cache as NSString).deletingLastPathComponent,
                withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw ServerError(
                description: "cannot create the state directory for the Kerberos cache: \(error.localizedDescription)")
        }
        // setenv races with getenv on other threads: during a reload (libcurl running) only when it changes.
        Self.setIfChanged("KRB5CCNAME", "FILE:" + cache)
        if let keytab = settings.keytab {
            // With a client keytab, GSS-API can also get tickets by itself when the cache runs out.
            Self.setIfChanged("KRB5_CLIENT_KTNAME", keytab)
        }
        if let problem = kinit() {
            throw ServerError(description: "kerberos credential for \(settings.principal): \(problem)")
        }
        logger.notice("kerberos ticket obtained", metadata: ["principal": "\(settings.principal)"])
        let t = DispatchSource.makeTimerSource(queue: queue)
        t.schedule(deadline: .now() + 1800, repeating: 1800)
        t.setEventHandler { [self] in
            if let problem = kinit() {
                logger.error(
                    "kerberos ticket renewal failed",
                    metadata: ["principal": "\(settings.principal)", "cause": "\(problem)"])
            }
        }
        t.resume()
        queue.sync { timer = t }
    }

    private static func setIfChanged(_ name: String, _ value: String) {
        if let v = getenv(name), String(cString: v) == value { return }
        setenv(name, value, 1)
    }

    /// Stops renewing (the credential was changed or removed by a reload). The ticket in the cache stays until
    /// it expires or a new instance replaces it.
    func stop() {
        queue.sync {
            timer?.cancel()
            timer = nil
        }
    }

    /// Runs `kinit` (MIT krb5-user); returns a problem description or nil.
    private func kinit() -> String? {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/kinit")
        if let keytab = settings.keytab {
            p.arguments = ["-k", "-t", keytab, "-c", "FILE:" + cache, settings.principal]
        } else {
            p.arguments = ["-c", "FILE:" + cache, settings.principal]
        }
        let input = Pipe()
        let output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = output
        do {
            try p.run()
        } catch {
            return "cannot run /usr/bin/kinit (install krb5-user): \(error.localizedDescription)"
        }
        if let pw = settings.password {
            input.fileHandleForWriting.write(Data((pw + "\n").utf8))
        }
        try? input.fileHandleForWriting.close()
        p.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard p.terminationStatus == 0 else {
            // kinit's own message names the principal and the cause; never the password.
            let cleaned = text.split(separator: "\n").filter { !$0.lowercased().contains("password for") }.joined(
                separator: " ")
            return "kinit failed: \(cleaned.isEmpty ? "exit \(p.terminationStatus)" : cleaned)"
        }
        return nil
    }
}
