import CCurl
import Testing

@testable import AuthProxyCore

/// libcurl's codes become the proxy's causes in one place, and each cause its answer and metric label.
@Suite struct UpstreamFailureTests {
    @Test func libcurlCodesMapToCauses() {
        #expect(UpstreamFailure(curl: CURLE_COULDNT_RESOLVE_HOST) == .dns)
        #expect(UpstreamFailure(curl: CURLE_COULDNT_CONNECT) == .connect)
        #expect(UpstreamFailure(curl: CURLE_OPERATION_TIMEDOUT) == .timeout)
        #expect(UpstreamFailure(curl: CURLE_GOT_NOTHING) == .nothing)
        #expect(UpstreamFailure(curl: CURLE_RECV_ERROR) == .reset)
        #expect(UpstreamFailure(curl: CURLE_PEER_FAILED_VERIFICATION) == .untrustedCertificate)
        #expect(UpstreamFailure(curl: CURLE_SSL_PINNEDPUBKEYNOTMATCH) == .pinMismatch)
        #expect(UpstreamFailure(curl: CURLE_SSL_CACERT_BADFILE) == .tlsHandshake)
        #expect(UpstreamFailure(curl: CURLE_WRITE_ERROR) == .clientGone)
        #expect(UpstreamFailure(curl: CURLE_READ_ERROR) == .requestBody)
        guard case .other(let what) = UpstreamFailure(curl: CURLE_TOO_MANY_REDIRECTS) else {
            Issue.record("a rare code lost its description")
            return
        }
        #expect(!what.isEmpty)
    }

    @Test(arguments: [
        (UpstreamFailure.dns, 502, "Could not resolve host"), (.connect, 502, "Could not connect"),
        (.timeout, 504, "did not respond within 60 s"), (.nothing, 502, "closed the connection without a response"),
        (.untrustedCertificate, 502, "could not be verified"), (.pinMismatch, 502, "pinned_public_key"),
        (.tlsHandshake, 502, "TLS handshake"), (.partial, 502, "inside the response"),
    ])
    func eachCauseHasItsAnswer(_ cause: UpstreamFailure, _ status: Int, _ words: String) {
        let r = UpstreamError(cause: cause, detail: "", destination: "gis.example.com:443", timeoutSeconds: 60).response
        #expect(r.status == status)
        #expect(r.message.contains(words), "\(r.message)")
    }

    @Test func clientSideCausesAreNotTheUpstreams() {
        #expect(UpstreamError(cause: .clientGone, detail: "", destination: "h:80", timeoutSeconds: 1).isClientSide)
        #expect(UpstreamError(cause: .requestBody, detail: "", destination: "h:80", timeoutSeconds: 1).isClientSide)
        #expect(!UpstreamError(cause: .reset, detail: "", destination: "h:80", timeoutSeconds: 1).isClientSide)
    }
}
