import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// Configuration errors name the key and the line, never a secret: not the text of an
/// unquoted value (a pasted API key), not a value read from `file:` or `${ENV}`, not a secret-bearing key's value.
@Suite struct ConfigErrorSecrecyTests {
    static let secret = "AAPKsecret0123456789abcdef"
    let loader = ConfigLoader(environment: ["S": Self.secret, "LISTEN": "127.0.0.1:1"])

    /// A file holding the secret, removed by the caller.
    static func secretFile() -> String {
        let path = "/tmp/authproxy-secrecy-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0o600)
        _ = "\(secret)\n".withCString { write(fd, $0, strlen($0)) }
        close(fd)
        return path
    }

    static func credential(_ fields: String) -> String {
        "[[credential]]\nname = \"a\"\n" + fields
    }

    /// Each file (`FILE` stands for the secret file's path), the key and line the error must name, and a fragment.
    @Test(arguments: [
        // TOML syntax errors: the key and column, never the token text.
        (
            credential("type = \"api-key\"\nmatch = \"https://h/\"\nkey = \(secret)\n"), "", 5,
            "invalid value for key 'key'"
        ),
        (
            credential("type = \"api-key\"\nmatch = \"https://h/\"\nkey = t\(secret)\n"), "", 5,
            "invalid value for key 'key'"
        ),
        (
            credential("type = \"api-key\"\nmatch = [\"https://h/\", \(secret)]\n"), "", 4,
            "invalid value for key 'match'"
        ),
        (credential("type = \"api-key\"\n\(secret)\n"), "", 4, "column 27: expected '=' after a key"),
        ("[proxy]\nstate_key = \n", "", 2, "column 13: expected a value for key 'state_key'"),
        // Validation errors on values read from the environment or a file.
        (
            credential("type = \"api-key\"\nkey = \"k\"\nmatch = \"${S}\"\n"), "credential[0].match", 5,
            "the value read from ${S} is not a URL prefix"
        ),
        (
            credential("type = \"api-key\"\nkey = \"k\"\nmatch = \"file:FILE\"\n"), "credential[0].match", 5,
            "the value read from file:FILE is not a URL prefix"
        ),
        (credential("type = \"file:FILE\"\nmatch = \"https://h/\"\n"), "credential[0].type", 3, "not supported"),
        (
            credential("type = \"api-key\"\nkey = \"k\"\nmatch = \"https://h/\"\ntoken_placement = \"${S}\"\n"),
            "credential[0].token_placement", 6, "the value read from ${S} is not one of"
        ),
        (
            credential("type = \"server-trust\"\nmatch = \"https://h/\"\nca_file = \"${S}\"\n"),
            "credential[0].ca_file", 5,
            "cannot read the value read from ${S}"
        ),
        (
            credential("type = \"kerberos\"\nmatch = \"https://h/\"\nprincipal = \"u@R\"\nkeytab = \"file:FILE\"\n"),
            "credential[0].keytab", 6, "cannot read the value read from file:FILE"
        ),
        (
            credential(
                "type = \"oauth-app\"\nmatch = \"https://h/\"\nclient_id = \"i\"\nclient_secret = \"s\"\nportal_url = \"${S}\"\n"
            ),
            "credential[0].portal_url", 7, "not an http(s) URL"
        ),
        (
            credential(
                "type = \"oauth-user\"\nmatch = \"https://h/\"\nclient_id = \"i\"\nportal_url = \"https://p\"\nredirect_uri = \"${S}\"\n"
            ),
            "credential[0].redirect_uri", 7, "neither an http(s) URL"
        ),
        (
            credential("type = \"token\"\nmatch = \"https://h/\"\ntoken = \"t\"\nexpires = \"${S}\"\n"),
            "credential[0].expires", 6,
            "not an RFC 3339"
        ),
        (
            credential(
                "type = \"password\"\nmatch = \"https://h/\"\nusername = \"u\"\npassword = \"p\"\nschemes = [\"${S}\"]\n"
            ),
            "credential[0].schemes", 7, "not one of basic"
        ),
        (
            credential(
                "type = \"arcgis-token\"\nmatch = \"https://h/\"\nusername = \"u\"\npassword = \"p\"\nclient = \"${S}\"\n"
            ),
            "credential[0].client", 7, "not one of"
        ),
        (
            credential("type = \"certificate\"\nmatch = \"https://h/\"\ncert = \"${S}\"\nkey = \"file:FILE\"\n"),
            "credential[0].cert", 5, "the value read from ${S}"
        ),
        ("[proxy]\nlisten = [\"${S}\"]\n", "proxy.listen", 2, "the value read from ${S} is not an address"),
        ("[proxy]\nallowed_origins = [\"${S}\"]\n", "proxy.allowed_origins", 2, "not an origin"),
        ("[proxy]\nallow_clients = [\"10.0.0.0/8\", \"file:FILE\"]\n", "proxy.allow_clients", 2, "not a CIDR block"),
        ("[proxy]\nunmatched = \"${S}\"\n", "proxy.unmatched", 2, "not one of"),
        ("[log]\nlevel = \"${S}\"\n", "log.level", 2, "not one of"),
        ("[admin]\nlisten = \"${S}\"\n", "admin.listen", 2, "not an address"),
        ("[admin]\nlisten = \"127.0.0.1:2\"\nhosts = [\"${S}.\"]\n", "admin.hosts", 3, "not a host name"),
        (
            "[[credential]]\nname = \"a\"\ntype = \"api-key\"\nmatch = \"https://h/\"\nkey = \"k\"\n[[client]]\nname = \"c\"\npassword = \"p\"\ncredentials = [\"${S}\"]\n",
            "client[0].credentials", 9, "names credential the value read from ${S}"
        ),
        // Names are shown in logs, metrics and on the status page: written literally.
        (
            "[[credential]]\nname = \"file:FILE\"\ntype = \"api-key\"\nmatch = \"https://h/\"\nkey = \"k\"\n",
            "credential[0].name", 2,
            "must be written literally"
        ),
        ("[[client]]\nname = \"${S}\"\npassword = \"p\"\n", "client[0].name", 2, "must be written literally"),
        // What a request head cannot carry (issue 35): refused at load, the value never shown.
        (
            credential("type = \"api-key\"\nmatch = \"https://h/\"\nkey = \"\(secret)\\r\\nX: 1\"\n"),
            "credential[0].key", 5, "not visible ASCII (byte 0x0D at byte 26"
        ),
        (
            credential("type = \"token\"\nmatch = \"https://h/\"\ntoken = \"\(secret) x\"\n"),
            "credential[0].token", 5, "not visible ASCII (byte 0x20"
        ),
        (
            credential(
                "type = \"token\"\nmatch = \"https://h/\"\ntoken = \"t\"\nreferer = \"app://\(secret)\\u0001\"\n"),
            "credential[0].referer", 6, "control byte (byte 0x01"
        ),
        (
            credential("type = \"header\"\nmatch = \"https://h/\"\nheaders = { \"X-Key\" = \"\(secret)\\u007f\" }\n"),
            "credential[0].headers.X-Key", 5, "control byte (byte 0x7F"
        ),
    ])
    func errorsNameTheKeyButNotTheSecret(_ template: String, _ key: String, _ line: Int, _ fragment: String) {
        let path = Self.secretFile()
        defer { unlink(path) }
        let text = template.replacing("FILE", with: path)
        do {
            _ = try loader.parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            let shown = error.description
            #expect(!shown.contains(Self.secret) && !shown.contains("AAPK"), "\(shown)")
            #expect(error.key == key && error.line == line, "\(shown)")
            #expect(shown.contains(fragment.replacing("FILE", with: path)), "\(shown)")
        }
    }

    @Test func literalNonSecretValuesAreStillQuoted() {
        expectRejected(
            loader, "[proxy]\nlisten = [\"nonsense\"]\n", key: "proxy.listen", line: 2, fragment: "'nonsense' is not")
        expectRejected(loader, "[log]\nlevel = \"loud\"\n", key: "log.level", line: 2, fragment: "'loud' is not")
    }

    @Test func secretKeysAreNeverQuoted() {
        var reader = TableReader(try! TOMLParser.parse("password = \"hunter2\"\nlevel = \"x\"\n"), path: "", env: [:])
        _ = try? reader.string("password")
        #expect(!reader.shown("password", "hunter2").contains("hunter2"))
        #expect(reader.shown("level", "x") == "'x'")
        for k in ["key", "token", "password", "client_secret", "key_password", "state_key"] {
            #expect(TableReader.secretKeys.contains(k))
        }
    }

    @Test func adminHostsAreValidatedAndLowercased() throws {
        let c = try loader.parse(
            "[admin]\nlisten = \"127.0.0.1:2\"\nhosts = [\"Admin.Example\", \"a-b.svc.cluster.local\"]\n")
        #expect(c.admin?.hosts == ["admin.example", "a-b.svc.cluster.local"])
        for bad in ["http://a", "a:1", "*.a", "", "a b", "-a.b", "a..b", "a/b"] {
            expectRejected(
                loader, "[admin]\nlisten = \"127.0.0.1:2\"\nhosts = [\"\(bad)\"]\n", key: "admin.hosts", line: 3,
                fragment: "not a host name")
        }
    }
}
