import Foundation
import Testing

@testable import AuthProxyCore

/// ``ConfigInputs``: the loader reports the `file:` secrets it read, and a re-read differs exactly when a
/// content changed (not when a file was merely touched or relinked to the same bytes).
@Suite struct ConfigInputsTests {
    static func tempDir() throws -> String {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("inputs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        return d
    }

    @Test func theLoaderReportsEverySecretFileItRead() throws {
        let d = try Self.tempDir()
        defer { try? FileManager.default.removeItem(atPath: d) }
        try "K1\n".write(toFile: d + "/key", atomically: true, encoding: .utf8)
        try "pw".write(toFile: d + "/pw", atomically: true, encoding: .utf8)
        let config = """
            [[credential]]
            name = "a"
            type = "api-key"
            key = "file:\(d)/key"
            match = "https://a.example/"

            [[client]]
            name = "alice"
            password = "file:\(d)/pw"
            """
        try config.write(toFile: d + "/proxy.conf", atomically: true, encoding: .utf8)
        let (c, inputs) = try ConfigLoader(environment: [:]).loadWithInputs(path: d + "/proxy.conf")
        #expect(c.credentials.first?.kind == .apiKey(APIKeySettings(slots: [.init(number: 1, key: "K1")])))
        #expect(Set(inputs.secretDigests.keys) == [d + "/key", d + "/pw"])
        #expect(inputs.paths == [d + "/proxy.conf", d + "/key", d + "/pw"])
        // Digests only: no secret in the value.
        #expect(!"\(inputs)".contains("K1"))
        // Read again from disk unchanged: equal.
        #expect(inputs.reread(with: readTextFile) == inputs)
        // The secret changes: differs.
        try "K2\n".write(toFile: d + "/key", atomically: true, encoding: .utf8)
        #expect(inputs.reread(with: readTextFile) != inputs)
    }

    @Test func rereadComparesContentsOnly() {
        var files = ["/c/proxy.conf": "text", "/s/key": "K1"]
        let inputs = ConfigInputs(
            configPath: "/c/proxy.conf", configText: "text", secretFiles: [(path: "/s/key", contents: "K1")])
        #expect(inputs.reread { files[$0] } == inputs)
        files["/s/key"] = "K2"
        #expect(inputs.reread { files[$0] } != inputs)
        files["/s/key"] = "K1"
        files["/c/proxy.conf"] = "text2"
        #expect(inputs.reread { files[$0] } != inputs)
        // Mid-swap, a secret cannot be read: that is a difference too (the reload then says why it fails).
        files["/c/proxy.conf"] = "text"
        files["/s/key"] = nil
        #expect(inputs.reread { files[$0] }.secretDigests["/s/key"] == ConfigInputs.unreadable)
    }

    @Test func watchedDirectoriesSplit() {
        #expect(ConfigWatcher.split("/etc/secret/key") == ("/etc/secret", "key"))
        #expect(ConfigWatcher.split("/key") == ("/", "key"))
        #expect(ConfigWatcher.split("proxy.conf") == (".", "proxy.conf"))
    }
}
