import Testing

@testable import AuthProxyCore

struct AzureSASKindTests {
    static let pc = "https://planetarycomputer.microsoft.com/api/sas/v1/token"

    func parse(_ toml: String, env: [String: String] = [:]) throws(ConfigError) -> AzureSASKind {
        var reader = TableReader(try! TOMLParser.parse(toml), path: "credential[0]", env: env)
        let kind = try AzureSASKind.parse(&reader, name: "pc")
        try reader.finish()
        return kind
    }

    func error(_ toml: String, env: [String: String] = [:]) -> ConfigError? {
        do {
            _ = try parse(toml, env: env)
            return nil
        } catch {
            return error
        }
    }

    @Test func planetaryComputerAccountContainerShapeWithAKeyFromTheEnvironment() throws {
        let k = try parse(
            """
            token_url = "\(Self.pc)/{account}/{container}"
            subscription_key = "${PC_SDK_SUBSCRIPTION_KEY}"
            """, env: ["PC_SDK_SUBSCRIPTION_KEY": "k-123"])
        #expect(k.subscriptionKey == "k-123")
        #expect(k.endpoint.placeholders == [.account, .container])
        #expect(k.tokenSource == .fetched && k.role == .token && k.scrubsResponseBodiesByDefault)
        let t = HTTPURL.parse("https://naipeuwest.blob.core.windows.net/naip/v002/a.tif")!.target
        #expect(k.tokenScope(for: t) == .named(Self.pc + "/naipeuwest/naip"))
        let none = HTTPURL.parse("https://naipeuwest.blob.core.windows.net/")!.target
        guard case .refused(let why) = k.tokenScope(for: none) else {
            Issue.record("a URL without a container got a scope")
            return
        }
        #expect(why.contains("container"))
    }

    @Test func collectionShapeWithAMapTable() throws {
        let k = try parse(
            """
            token_url = "\(Self.pc)/{collection}"
            collections = { "sentinel2l2a01/sentinel2-l2" = "sentinel-2-l2a", "landsat-c2" = "landsat-c2-l2" }
            """)
        #expect(
            k.endpoint.collections == ["sentinel2l2a01/sentinel2-l2": "sentinel-2-l2a", "landsat-c2": "landsat-c2-l2"])
        let t = HTTPURL.parse("https://landsateuwest.blob.core.windows.net/landsat-c2/level-2/x.TIF")!.target
        #expect(k.tokenScope(for: t) == .named(Self.pc + "/landsat-c2-l2"))
    }

    @Test func configurationErrorsNameTheKeyAndLine() {
        #expect(error("")?.description.contains("needs token_url") == true)
        #expect(
            error(#"token_url = "\#(Self.pc)/{colection}""#)?.description.contains("credential[0].token_url") == true)
        #expect(
            error(#"token_url = "\#(Self.pc)/{collection}""#)?.description.contains("set collection") == true)
        let unused = error(
            """
            token_url = "\(Self.pc)/{account}/{container}"
            collection = "naip"
            """)
        #expect(unused?.key == "credential[0].collection" && unused?.line == 2)
        let badKey = error(
            """
            token_url = "\(Self.pc)/{collection}"
            collections = { "Sentinel/x" = "s2" }
            """)
        #expect(badKey?.key == "credential[0].collections.Sentinel/x")
        #expect(
            error(#"token_url = "\#(Self.pc)/{account}/{container}""# + "\naccount = \"My_Account\"")?.key
                == "credential[0].account")
        #expect(
            error(#"token_url = "\#(Self.pc)/{account}/{container}""# + "\nsas = 1")?.description.contains(
                "unknown key") == true)
    }

    @Test func aSubscriptionKeyThatCannotBeAHeaderIsRefusedWithoutQuotingIt() {
        let e = error(
            """
            token_url = "\(Self.pc)/{account}/{container}"
            subscription_key = "${K}"
            """, env: ["K": "abc\r\nX-Evil: 1"])
        #expect(e?.key == "credential[0].subscription_key")
        #expect(e.map { !$0.description.contains("abc") && !$0.description.contains("Evil") } == true)
    }

    @Test func theSASGoesIntoTheQueryReplacingTheClientsOwn() {
        let k = AzureSASKind(
            endpoint: AzureSASEndpoint(
                pattern: Self.pc + "/{account}/{container}", placeholders: [.account, .container], account: nil,
                collection: nil, collections: [:]), subscriptionKey: nil)
        var r = OutgoingRequest(
            method: "GET", target: HTTPURL.parse("https://a12.blob.core.windows.net/c12/x.tif?sig=old&y=1")!.target,
            fields: HTTPHeaders([("Range", "bytes=0-16383")]), body: nil, bodyLength: nil, isUpgrade: false, now: 0,
            credential: "pc")
        let token = IssuedToken(value: "se=2026&sp=rl&sig=NEW%3D", expires: 1, issued: 0, ssl: false, referer: nil)
        #expect(k.apply(token, to: &r) == nil)
        #expect(r.target.pathAndQuery == "/c12/x.tif?y=1&se=2026&sp=rl&sig=NEW%3D")
        #expect(k.secrets(token: token) == ["se=2026&sp=rl&sig=NEW%3D", "NEW%3D", "NEW="])
        var bare = r
        #expect(k.apply(nil, to: &bare)?.message.contains("'pc'") == true)
    }

    @Test func only403AuthenticationFailedIsARejection() {
        let k = AzureSASKind(
            endpoint: AzureSASEndpoint(
                pattern: "https://x/t", placeholders: [], account: nil, collection: nil, collections: [:]),
            subscriptionKey: nil)
        func view(_ status: Int, _ code: String?) -> ResponseView {
            ResponseView(status: status, request: HTTPURL.parse("https://a12.blob.core.windows.net/c/x")!.target) {
                $0 == "x-ms-error-code" ? code.map { [$0] } ?? [] : []
            }
        }
        #expect(k.rejection(of: view(403, "AuthenticationFailed")) == .rejected)
        #expect(k.rejection(of: view(403, "AuthorizationPermissionMismatch")) == .none)
        #expect(k.rejection(of: view(403, nil)) == .none)
        #expect(k.rejection(of: view(404, "ResourceNotFound")) == .none)
        #expect(k.rejection(of: view(200, nil)) == .none)
    }

    @Test func identityCoversEverySettingAndStatusShowsNoSecret() throws {
        let a = try parse(#"token_url = "\#(Self.pc)/{account}/{container}""# + "\nsubscription_key = \"k1\"")
        let b = try parse(#"token_url = "\#(Self.pc)/{account}/{container}""# + "\nsubscription_key = \"k2\"")
        #expect(a.identityMaterial != b.identityMaterial)
        let rows = a.statusDetails
        #expect(rows.contains { $0 == ("subscription_key", "set") })
        #expect(!rows.contains { $0.1.contains("k1") })
    }
}
