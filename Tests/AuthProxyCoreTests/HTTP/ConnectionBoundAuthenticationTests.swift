import Testing

@testable import AuthProxyCore

@Suite struct ConnectionBoundAuthenticationTests {
    @Test(arguments: [
        "NTLM TlRMTVNTUAABAAAAB4IIogAAAAAAAAAAAAAAAAAAAAAGAbEdAAAADw==",
        "ntlm TlRMTVNTUAAB",
        "Negotiate YIIBhwYGKwYBBQUCoIIBezCCAXeg",
        "  negotiate abc",
        "NEGOTIATE",
    ])
    func ntlmAndNegotiateBindTheConnection(_ value: String) {
        #expect(ConnectionBoundAuthentication.isConnectionBound(value))
        #expect(ConnectionBoundAuthentication.starts(HTTPHeaders([("Host", "x"), ("authorization", value)])))
    }

    @Test(arguments: ["Basic YWxpY2U6cHc=", "Digest username=\"a\"", "Bearer abc", "NTLMX abc", "Negotiated x", ""])
    func otherSchemesDoNot(_ value: String) {
        #expect(!ConnectionBoundAuthentication.isConnectionBound(value))
        #expect(!ConnectionBoundAuthentication.starts(HTTPHeaders([("Authorization", value)])))
    }

    @Test func onlyTheAuthorizationFieldCounts() {
        #expect(!ConnectionBoundAuthentication.starts(HTTPHeaders([("Proxy-Authorization", "NTLM abc")])))
        #expect(!ConnectionBoundAuthentication.starts(HTTPHeaders([("X-Esri-Authorization", "Negotiate abc")])))
        #expect(ConnectionBoundAuthentication.starts(
            HTTPHeaders([("Authorization", "Basic abc"), ("Authorization", "NTLM abc")])))
    }
}
