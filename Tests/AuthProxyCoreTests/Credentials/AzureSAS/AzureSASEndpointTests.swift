import Testing

@testable import AuthProxyCore

struct AzureSASEndpointTests {
    static let pc = "https://planetarycomputer.microsoft.com/api/sas/v1/token"

    func endpoint(
        _ pattern: String, account: String? = nil, collection: String? = nil, collections: [String: String] = [:]
    ) throws -> AzureSASEndpoint {
        AzureSASEndpoint(
            pattern: pattern, placeholders: try AzureSASEndpoint.placeholders(of: pattern).get(), account: account,
            collection: collection, collections: collections)
    }

    func url(_ e: AzureSASEndpoint, _ request: String) -> Result<String, AzureBlobContainer.Refusal> {
        e.tokenURL(for: HTTPURL.parse(request)!.target)
    }

    @Test func accountContainerShapeNeedsNoMapping() throws {
        let e = try endpoint(Self.pc + "/{account}/{container}")
        #expect(
            url(e, "https://landsateuwest.blob.core.windows.net/landsat-c2/level-2/x.TIF")
                == .success(Self.pc + "/landsateuwest/landsat-c2"))
        #expect(
            url(e, "https://sentinel2l2a01.blob.core.windows.net/sentinel2-l2/a.tif")
                == .success(Self.pc + "/sentinel2l2a01/sentinel2-l2"))
    }

    @Test func accountShapeOnAHostThatNamesNoAccountNeedsTheSetting() throws {
        let bare = try endpoint(Self.pc + "/{account}/{container}")
        guard case .failure(let why) = url(bare, "http://127.0.0.1:9000/cogs/a.tif") else {
            Issue.record("a token URL without an account")
            return
        }
        #expect(why.message.contains("set account"))
        let set = try endpoint(Self.pc + "/{account}/{container}", account: "pcstore")
        #expect(url(set, "http://127.0.0.1:9000/cogs/a.tif") == .success(Self.pc + "/pcstore/cogs"))
    }

    @Test func collectionShapeMapsAccountContainerThenContainerThenTheDefault() throws {
        let e = try endpoint(
            Self.pc + "/{collection}", collection: "fallback",
            collections: ["sentinel2l2a01/sentinel2-l2": "sentinel-2-l2a", "naip": "naip", "other/naip": "naip-x"])
        #expect(
            url(e, "https://sentinel2l2a01.blob.core.windows.net/sentinel2-l2/a.tif")
                == .success(Self.pc + "/sentinel-2-l2a"))
        #expect(url(e, "https://naipeuwest.blob.core.windows.net/naip/a.tif") == .success(Self.pc + "/naip"))
        #expect(url(e, "https://other.blob.core.windows.net/naip/a.tif") == .success(Self.pc + "/naip-x"))
        #expect(url(e, "https://x1y.blob.core.windows.net/elsewhere/a.tif") == .success(Self.pc + "/fallback"))
    }

    @Test func anUnmappedContainerIsRefusedByName() throws {
        let e = try endpoint(Self.pc + "/{collection}", collections: ["naip": "naip"])
        guard case .failure(let why) = url(e, "https://x1y.blob.core.windows.net/elsewhere/a.tif") else {
            Issue.record("an unmapped container got a token URL")
            return
        }
        #expect(
            why.message.contains("'elsewhere'") && why.message.contains("'x1y'") && why.message.contains("collections"))
    }

    @Test func aPatternWithoutPlaceholdersServesEveryURLWithOneToken() throws {
        let e = try endpoint("https://sas.example.com/token?for=gis")
        #expect(url(e, "https://a12.blob.core.windows.net/c12/x") == .success("https://sas.example.com/token?for=gis"))
        #expect(url(e, "https://a12.blob.core.windows.net/") == .success("https://sas.example.com/token?for=gis"))
    }

    @Test func aContainerAlonePatternAndValuesAreEncoded() throws {
        let e = try endpoint("https://sas.example.com/token/{container}")
        #expect(url(e, "http://127.0.0.1/$web/index.html") == .success("https://sas.example.com/token/%24web"))
    }

    @Test func patternsAreChecked() {
        func problem(_ p: String) -> String? {
            if case .failure(let why) = AzureSASEndpoint.placeholders(of: p) { return why.message }
            return nil
        }
        #expect(problem(Self.pc + "/{collection}") == nil)
        #expect(problem(Self.pc + "/{account}/{container}") == nil)
        #expect(problem(Self.pc + "/{acount}/{container}")?.contains("{acount}") == true)
        #expect(problem(Self.pc + "/{collection")?.contains("without its '}'") == true)
        #expect(problem(Self.pc + "/collection}")?.contains("without its '{'") == true)
        #expect(problem("ftp://x/{collection}")?.contains("http(s)") == true)
        #expect(problem("planetarycomputer/{collection}")?.contains("http(s)") == true)
        #expect(problem(Self.pc + "/{collection}/{container}")?.contains("mixes") == true)
        #expect(
            problem(Self.pc + "/{account}/{container}?Subscription-Key=abc")?.contains("set subscription_key") == true)
        #expect(problem(Self.pc + "/{account}/{container}?api-version=2025-04-30") == nil)
        #expect(
            (try? AzureSASEndpoint.placeholders(of: Self.pc + "/{account}/{container}").get()) == [
                .account, .container,
            ])
    }

    @Test func collectionSettingsGoWithACollectionPattern() throws {
        #expect(try endpoint(Self.pc + "/{collection}").validated()?.message.contains("set collection") == true)
        #expect(try endpoint(Self.pc + "/{collection}", collection: "naip").validated() == nil)
        #expect(
            try endpoint(Self.pc + "/{account}/{container}", collections: ["naip": "naip"]).validated()?.message
                .contains("only by a token_url with {collection}") == true)
    }

    @Test func collectionsKeysAndIDs() {
        #expect(AzureSASEndpoint.isCollectionsKey("naip"))
        #expect(AzureSASEndpoint.isCollectionsKey("naipeuwest/naip"))
        #expect(!AzureSASEndpoint.isCollectionsKey("naipeuwest/naip/x"))
        #expect(!AzureSASEndpoint.isCollectionsKey("NAIP"))
        #expect(!AzureSASEndpoint.isCollectionsKey("x/naip"))
        #expect(AzureSASEndpoint.isCollectionID("sentinel-2-l2a"))
        #expect(AzureSASEndpoint.isCollectionID("io_lulc.v2"))
        #expect(!AzureSASEndpoint.isCollectionID(".."))
        #expect(!AzureSASEndpoint.isCollectionID("a/b"))
        #expect(!AzureSASEndpoint.isCollectionID(""))
    }
}
