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
        #expect(
            ConnectionBoundAuthentication.starts(
                HTTPHeaders([("Authorization", "Basic abc"), ("Authorization", "NTLM abc")])))
    }

    @Test func anyOwnSchemeButBearerMeansTheClientLogsInItself() {
        for v in ["Basic Ym9iOnB3", "Digest username=\"bob\"", "NTLM TlRMTVNTUAAB", "Negotiate YII=", " basic x"] {
            #expect(ConnectionBoundAuthentication.clientAuthenticates(HTTPHeaders([("Authorization", v)])), "\(v)")
        }
        for v in ["Bearer abc", "bearer abc", "", "   "] {
            #expect(!ConnectionBoundAuthentication.clientAuthenticates(HTTPHeaders([("Authorization", v)])), "\(v)")
        }
        #expect(!ConnectionBoundAuthentication.clientAuthenticates(HTTPHeaders([("Proxy-Authorization", "Basic x")])))
    }
}
