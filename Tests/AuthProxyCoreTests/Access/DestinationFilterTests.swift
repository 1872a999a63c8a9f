import Testing

@testable import AuthProxyCore

#if canImport(Glibc)
    import Glibc
#endif

@Suite struct DestinationFilterTests {
    private func address(_ ip: String) -> (family: Int32, addr: sockaddr_storage, len: socklen_t) {
        numericAddress(ip, port: 80)!
    }

    @Test func deniedAddressesAreSkippedAndTheRestKeptInOrder() throws {
        let deny = [
            try #require(AddressBlock.parse("169.254.0.0/16")), try #require(AddressBlock.parse("fd00:ec2::254/128")),
        ]
        let all = [address("169.254.169.254"), address("10.0.0.7"), address("fd00:ec2::254"), address("::1")]
        guard case .success(let kept) = DestinationFilter.allowed(all, deny: deny) else {
            Issue.record("allowed addresses were refused")
            return
        }
        #expect(kept.map { IPAddress($0.addr)!.description } == ["10.0.0.7", "::1"])
    }

    @Test func onlyDeniedAddressesNameTheFirst() throws {
        let deny = [try #require(AddressBlock.parse("169.254.0.0/16"))]
        guard
            case .failure(let f) = DestinationFilter.allowed(
                [address("169.254.169.254"), address("169.254.1.1")], deny: deny)
        else {
            Issue.record("denied addresses were allowed")
            return
        }
        #expect(f == .denied(IPAddress.parse("169.254.169.254")!))
    }

    @Test func anEmptyListKeepsEverything() {
        guard case .success(let kept) = DestinationFilter.allowed([address("127.0.0.1")], deny: []) else {
            Issue.record("refused without a deny list")
            return
        }
        #expect(kept.count == 1)
    }
}
