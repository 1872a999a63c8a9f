import Testing

@testable import AuthProxyCore

struct AzureBlobContainerTests {
    func target(_ url: String) -> URLTarget { HTTPURL.parse(url)!.target }

    @Test func accountAndContainerComeFromHostAndFirstSegment() throws {
        let c = try AzureBlobContainer.of(
            target("https://sentinel2l2a01.blob.core.windows.net/sentinel2-l2/15/R/TN/2024/S2A.tif?x=1"),
            configuredAccount: nil
        ).get()
        #expect(c == AzureBlobContainer(account: "sentinel2l2a01", container: "sentinel2-l2"))
    }

    @Test func aContainerAloneInThePathIsStillAContainer() throws {
        let c = try AzureBlobContainer.of(
            target("https://naipeuwest.blob.core.windows.net/naip"), configuredAccount: nil
        ).get()
        #expect(c.container == "naip")
    }

    @Test func theConfiguredAccountWinsAndServesHostsThatDoNotNameOne() throws {
        let local = try AzureBlobContainer.of(target("http://127.0.0.1:8080/cogs/a.tif"), configuredAccount: "pcstore")
            .get()
        #expect(local == AzureBlobContainer(account: "pcstore", container: "cogs"))
        let none = try AzureBlobContainer.of(target("http://127.0.0.1:8080/cogs/a.tif"), configuredAccount: nil).get()
        #expect(none.account == nil)
        let over = try AzureBlobContainer.of(
            target("https://other.blob.core.windows.net/cogs/a.tif"), configuredAccount: "pcstore"
        ).get()
        #expect(over.account == "pcstore")
    }

    @Test func hostsOfOtherCloudsDataLakeAndTheSecondaryNameTheirAccount() {
        #expect(AzureBlobContainer.account(ofHost: "acct1.blob.core.chinacloudapi.cn") == "acct1")
        #expect(AzureBlobContainer.account(ofHost: "acct1.dfs.core.windows.net") == "acct1")
        #expect(AzureBlobContainer.account(ofHost: "ACCT1.Blob.Core.Windows.Net") == "acct1")
        #expect(AzureBlobContainer.account(ofHost: "acct1-secondary.blob.core.windows.net") == "acct1")
        #expect(AzureBlobContainer.account(ofHost: "acct1.file.core.windows.net") == nil)
        #expect(AzureBlobContainer.account(ofHost: "blob.core.windows.net") == nil)
        #expect(AzureBlobContainer.account(ofHost: "my_acct.blob.core.windows.net") == nil)
        #expect(AzureBlobContainer.account(ofHost: "127.0.0.1") == nil)
    }

    @Test func anEscapedLetterIsDecodedAsAzureWould() throws {
        let c = try AzureBlobContainer.of(target("http://127.0.0.1/%63ogs/a.tif"), configuredAccount: "a12").get()
        #expect(c.container == "cogs")
    }

    @Test func pathsThatNameNoContainerAreRefusedWithTheReason() {
        for url in [
            "http://127.0.0.1/", "http://127.0.0.1/a.tif", "http://127.0.0.1/Cogs/a.tif", "http://127.0.0.1//a",
            "http://127.0.0.1/ab/x", "http://127.0.0.1/a--b/x", "http://127.0.0.1/-ab/x",
        ] {
            guard case .failure(let why) = AzureBlobContainer.of(target(url), configuredAccount: "a12") else {
                Issue.record("\(url) was taken as naming a container")
                continue
            }
            #expect(why.message.contains("container"))
        }
    }

    @Test func containerAndAccountNameRules() {
        #expect(AzureBlobContainer.isContainerName("abc"))
        #expect(AzureBlobContainer.isContainerName("landsat-c2"))
        #expect(AzureBlobContainer.isContainerName("$root"))
        #expect(AzureBlobContainer.isContainerName(String(repeating: "a", count: 63)))
        #expect(!AzureBlobContainer.isContainerName(String(repeating: "a", count: 64)))
        #expect(!AzureBlobContainer.isContainerName("abc-"))
        #expect(!AzureBlobContainer.isContainerName("a_c"))
        #expect(AzureBlobContainer.isAccountName("sentinel2l2a01"))
        #expect(!AzureBlobContainer.isAccountName("ab"))
        #expect(!AzureBlobContainer.isAccountName("a-b-c"))
        #expect(!AzureBlobContainer.isAccountName(String(repeating: "a", count: 25)))
    }
}
