import ArgumentParser
import AuthProxyCore
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `authproxy capture`: a redacted HAR file of one credential's traffic through the running proxy, for a support
/// case. The proxy records (it sees both sides and knows what it injected); this asks its admin listener.
struct CaptureCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "capture",
        abstract: "Record a credential's exchanges through the running proxy as a redacted HAR file.",
        discussion:
            "Needs [admin] listen and capture = true in the configuration of the running proxy. Tokens, keys, "
            + "passwords, client secrets, cookies and Authorization values are replaced before anything is recorded.")

    @OptionGroup var options: ConfigOptions

    @Option(name: .long, help: "The credential whose exchanges are recorded.")
    var credential: String

    @Option(name: .long, help: "How long to record (1 to 600 seconds).")
    var seconds: Int = 60

    @Option(name: .long, help: "The HAR file to write.")
    var out: String

    func run() throws {
        let config = try options.load()
        guard let admin = config.admin else {
            printError(
                "authproxy: \(options.config): capture asks the running proxy's admin listener: configure [admin] "
                    + "listen (and capture = true)")
            throw ExitCode(2)
        }
        guard (1...600).contains(seconds) else {
            printError("authproxy: --seconds must be from 1 to 600")
            throw ExitCode(2)
        }
        printNow("recording credential '\(credential)' for \(seconds) s through the admin listener at \(admin.listen)…")
        let har: [UInt8]
        do throws(CaptureClient.Failure) {
            har = try CaptureClient.capture(admin: admin.listen, credential: credential, seconds: seconds)
        } catch {
            printError("authproxy: capture failed: \(error)")
            throw ExitCode(1)
        }
        // Owner-only: redacted, but still the traffic of a service.
        let temporary = out + ".part"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else {
            printError("authproxy: cannot write \(temporary): \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        var written = 0
        while written < har.count {
            let n = har.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else {
                printError("authproxy: cannot write \(temporary): \(String(cString: strerror(errno)))")
                close(fd)
                throw ExitCode(1)
            }
            written += n
        }
        close(fd)
        guard rename(temporary, out) == 0 else {
            printError("authproxy: cannot rename \(temporary) to \(out): \(String(cString: strerror(errno)))")
            throw ExitCode(1)
        }
        let entries =
            ((try? JSONSerialization.jsonObject(with: Data(har))) as? [String: Any]).flatMap {
                ($0["log"] as? [String: Any])?["entries"] as? [Any]
            }?.count ?? 0
        print("wrote \(out): \(entries) entries, \(har.count) bytes")
    }
}
