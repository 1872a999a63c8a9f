import Testing

@testable import AuthProxyCore

struct AzureSASQueryTests {
    /// The shape Planetary Computer hands out (a user delegation SAS; values percent-encoded).
    static let sas =
        "st=2026-11-28T17%3A45%3A22Z&se=2026-11-28T18%3A45%3A22Z&sp=rl&sv=2024-11-04&sr=c&skoid=0000&sktid=1111&skt=2026-11-28T17%3A45%3A22Z&ske=2026-12-05T17%3A45%3A22Z&sks=b&skv=2024-11-04&sig=Ab%2Bcd%2Fef%3D"

    @Test func appendedToAURLWithoutQuery() {
        #expect(AzureSASQuery.merged(pathAndQuery: "/cogs/a.tif", sas: Self.sas) == "/cogs/a.tif?" + Self.sas)
    }

    @Test func theClientsOtherFieldsKeepTheirOrderAndBytes() {
        #expect(
            AzureSASQuery.merged(pathAndQuery: "/cogs/?restype=container&comp=list&prefix=a%2Fb", sas: "sv=1&sig=x")
                == "/cogs/?restype=container&comp=list&prefix=a%2Fb&sv=1&sig=x")
    }

    @Test func theClientsOwnSASFieldsAreAllReplaced() {
        // A stale SAS of the client's, with a field the proxy's token lacks (si): every SAS field goes.
        let client = "/cogs/a.tif?sv=2019-02-02&si=policy&se=2020-01-01&SIG=old&x=1&%73ig=older"
        #expect(AzureSASQuery.merged(pathAndQuery: client, sas: Self.sas) == "/cogs/a.tif?x=1&" + Self.sas)
    }

    @Test func namesTheTokenCarriesAreReplacedEvenIfAzureAddsThemLater() {
        #expect(AzureSASQuery.merged(pathAndQuery: "/c/a?snew=1&y=2", sas: "snew=2&sig=s") == "/c/a?y=2&snew=2&sig=s")
    }

    @Test func anEmptyQueryOrOneOfOnlySASFieldsLeavesTheSASAlone() {
        #expect(AzureSASQuery.merged(pathAndQuery: "/c/a?", sas: "sig=s") == "/c/a?sig=s")
        #expect(AzureSASQuery.merged(pathAndQuery: "/c/a?sig=old&se=1", sas: "sig=s") == "/c/a?sig=s")
    }

    @Test func tokensThatCannotGoIntoAURLAreRefusedWithoutQuotingThem() {
        #expect(AzureSASQuery.problem(Self.sas) == nil)
        #expect(AzureSASQuery.problem("") == "it is empty")
        #expect(AzureSASQuery.problem("sv=1&sig=a b")?.contains("byte 0x20") == true)
        #expect(AzureSASQuery.problem("sv=1&sig=ab\r\nX: y")?.contains("byte 0x0D") == true)
        #expect(AzureSASQuery.problem("sv=1&sig=ab#frag")?.contains("'#'") == true)
        #expect(AzureSASQuery.problem("sv=1&sp=rl")?.contains("no sig") == true)
        #expect(AzureSASQuery.problem("sv=1&sig=")?.contains("no sig") == true)
        #expect(AzureSASQuery.problem("sv=1&&sig=x")?.contains("name=value") == true)
        #expect(AzureSASQuery.problem("sv&sig=x")?.contains("name=value") == true)
        #expect(AzureSASQuery.problem("=1&sig=x")?.contains("name=value") == true)
    }

    @Test func aLeadingQuestionMarkIsDropped() {
        #expect(AzureSASQuery.normalized("?sv=1&sig=x") == "sv=1&sig=x")
        #expect(AzureSASQuery.normalized("sv=1&sig=x") == "sv=1&sig=x")
    }

    @Test func fieldValuesAsWrittenAndDecoded() {
        #expect(AzureSASQuery.value(of: "sig", in: Self.sas) == "Ab%2Bcd%2Fef%3D")
        #expect(AzureSASQuery.decodedValue(of: "se", in: Self.sas) == "2026-11-28T18:45:22Z")
        #expect(AzureSASQuery.value(of: "s", in: Self.sas) == nil)
    }

    @Test func secretsAreTheTokenAndItsSignatureInBothForms() {
        #expect(AzureSASQuery.secrets(of: Self.sas) == [Self.sas, "Ab%2Bcd%2Fef%3D", "Ab+cd/ef="])
        #expect(AzureSASQuery.secrets(of: "sv=1&sig=plain") == ["sv=1&sig=plain", "plain"])
    }
}
