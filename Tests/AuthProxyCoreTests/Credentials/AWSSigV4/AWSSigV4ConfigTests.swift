import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// ``AWSSigV4Kind/parse(_:name:)``: the two ways to give keys, their defaults, and errors that name the key and
/// never a secret.
@Suite struct AWSSigV4ConfigTests {
    static func parse(_ toml: String, env: [String: String] = [:]) throws(ConfigError) -> AWSSigV4Kind {
        var reader = TableReader(try! TOMLParser.parse(toml), path: "credential[0]", env: env)
        let kind = try AWSSigV4Kind.parse(&reader, name: "s3-cogs")
        try reader.finish()
        return kind
    }

    static func error(_ toml: String, env: [String: String] = [:]) -> ConfigError? {
        do {
            _ = try parse(toml, env: env)
            return nil
        } catch {
            return error
        }
    }

    @Test func staticKeysFromTheEnvironmentWithDefaults() throws {
        let k = try Self.parse(
            """
            region = "eu-central-1"
            access_key_id = "${AWS_ACCESS_KEY_ID}"
            secret_access_key = "${AWS_SECRET_ACCESS_KEY}"
            """, env: ["AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "se/cr+et"])
        #expect(k.service == "s3" && k.region == "eu-central-1")
        #expect(k.maxSignedBodyBytes == 8 * 1024 * 1024)
        #expect(
            k.keys == .fixed(AWSCredentials(accessKeyID: "AKIAEXAMPLE", secretAccessKey: "se/cr+et", sessionToken: nil))
        )
        #expect(k.tokenSource == .none)
    }

    @Test func webIdentityWithDefaults() throws {
        let file = "/tmp/authproxy-sigv4-config-test-token"
        let fd = open(file, O_CREAT | O_WRONLY | O_TRUNC, 0o600)
        _ = write(fd, "eyJ.x.y\n", 8)
        close(fd)
        defer { unlink(file) }
        let k = try Self.parse(
            """
            region = "us-west-2"
            role_arn = "arn:aws:iam::123456789012:role/cog-reader"
            web_identity_token_file = "\(file)"
            """)
        guard case .webIdentity(let w) = k.keys else {
            Issue.record("not web identity")
            return
        }
        #expect(w.endpoint == "https://sts.us-west-2.amazonaws.com/")
        #expect(w.sessionName == "authproxy-s3-cogs")
        #expect(w.durationSeconds == nil)
        #expect(k.tokenSource == .fetched)
        #expect(
            k.tokenScope(for: URLTarget(scheme: "https", host: "b", port: 443, pathAndQuery: "/")) == .named(w.endpoint)
        )
        #expect(
            Self.error(
                """
                region = "us-west-2"
                role_arn = "arn:aws:iam::123456789012:role/cog-reader"
                web_identity_token_file = "/nonexistent/token"
                """)?.key == "credential[0].web_identity_token_file")
    }

    @Test func errorsNameTheKeyAndNeverTheSecret() {
        let both = Self.error(
            """
            region = "us-east-1"
            access_key_id = "AKIA"
            secret_access_key = "hunter2hunter2"
            role_arn = "arn:aws:iam::1:role/r"
            """)
        #expect(both?.message.contains("not both") == true)
        #expect(Self.error("region = \"us-east-1\"")?.key == "credential[0].access_key_id")
        #expect(Self.error("access_key_id = \"A\"\nsecret_access_key = \"s\"")?.key == "credential[0].region")
        let noSecret = Self.error("region = \"us-east-1\"\naccess_key_id = \"AKIA\"")
        #expect(noSecret?.key == "credential[0].secret_access_key")
        let badSecret = Self.error(
            "region = \"us-east-1\"\naccess_key_id = \"AKIA\"\nsecret_access_key = \"hunter2 x\"")
        #expect(badSecret?.key == "credential[0].secret_access_key")
        #expect(badSecret.map { !$0.description.contains("hunter2") } == true)
        let badRegion = Self.error("region = \"EU Central\"\naccess_key_id = \"AKIA\"\nsecret_access_key = \"s\"")
        #expect(badRegion?.key == "credential[0].region")
        let badARN = Self.error("region = \"us-east-1\"\nrole_arn = \"cog-reader\"\nweb_identity_token_file = \"/t\"")
        #expect(badARN?.key == "credential[0].role_arn")
        let duration = Self.error(
            "region = \"us-east-1\"\nrole_arn = \"arn:aws:iam::1:role/r\"\nweb_identity_token_file = \"/t\"\nduration_seconds = 60"
        )
        #expect(duration?.key == "credential[0].duration_seconds")
        let typo = Self.error("region = \"us-east-1\"\naccess_key_id = \"AKIA\"\nsecret_acess_key = \"s\"")
        #expect(typo?.key == "credential[0].secret_acess_key")
    }

    @Test func sessionNamesFollowAWSRules() {
        #expect(STSWebIdentity.sessionName(forCredential: "s3 cogs/prod") == "authproxy-s3-cogs-prod")
        #expect(STSWebIdentity.sessionName(forCredential: String(repeating: "x", count: 100)).count == 64)
        #expect(STSWebIdentity.isValidSessionName("a_b+c=d,e.f@g-h"))
        #expect(!STSWebIdentity.isValidSessionName("a"))
        #expect(!STSWebIdentity.isValidSessionName("a b"))
        #expect(STSWebIdentity.defaultEndpoint(region: "cn-north-1") == "https://sts.cn-north-1.amazonaws.com.cn/")
    }
}
