import CAuthProxyShims
import CCurl

/// libcurl's options for a parent proxy, and the reading of a failure as the parent's: the only place a route
/// becomes `CURLOPT_PROXY*`.
extension CurlEasyHandle {
    /// Sends this handle's connection through `parent`, authenticated with `routing`'s credential. `tunnel`:
    /// CONNECT even for an `http://` URL (a `CONNECT_ONLY` connection the proxy relays itself); otherwise libcurl
    /// tunnels https and sends http in absolute form. The handle is marked for a reset before reuse, so no
    /// later request inherits the parent or its password.
    func applyParent(_ parent: ParentProxy, routing: ParentRouting, tunnel: Bool, https: Bool) {
        markCarriesCredential()
        let e = raw
        parent.url.withCString { _ = ap_easy_setopt_ptr(e, CURLOPT_PROXY, $0) }
        if tunnel || https {
            // The CONNECT carries this process's Via too, so a parent that sends it back is caught (508) like a
            // relayed request. (A request in absolute form carries it already: libcurl would send both lists.)
            if proxyHeaders == nil { proxyHeaders = "Via: \(routing.via)".withCString { curl_slist_append(nil, $0) } }
            ap_easy_setopt_ptr(e, CURLOPT_PROXYHEADER, proxyHeaders)
        }
        // The parent's answer to CONNECT is not the destination's: it never reaches a header callback.
        ap_easy_setopt_long(e, CURLOPT_SUPPRESS_CONNECT_HEADERS, 1)
        if tunnel { ap_easy_setopt_long(e, CURLOPT_HTTPPROXYTUNNEL, 1) }
        if parent.scheme == .https, let ca = routing.config.caFile { ap_easy_setopt_ptr(e, CURLOPT_PROXY_CAINFO, ca) }
        var mask = 0
        // upstream_proxy_credential_parents: a parent outside the list gets no credential (and no login).
        let authenticated = routing.config.mayAuthenticate(parent)
        if authenticated, let pw = routing.password {
            // Basic goes in clear to an http:// parent, as from every other client of that proxy; libcurl picks
            // the strongest scheme the parent offers (a warning at start says when Basic may go in clear).
            if pw.schemes.contains(.basic) { mask |= CurlTransfer.authBasic }
            if pw.schemes.contains(.basic), routing.kerberos == nil, routing.health.basicOnly(parent) {
                // Known to take Basic only: sent with the request, so it does not meet a 407 first.
                mask = CurlTransfer.authBasic
            } else {
                if pw.schemes.contains(.digest) { mask |= CurlTransfer.authDigest }
                if pw.schemes.contains(.ntlm) { mask |= CurlTransfer.authNTLM }
            }
            ap_easy_setopt_ptr(e, CURLOPT_PROXYUSERNAME, pw.curlUser)
            ap_easy_setopt_ptr(e, CURLOPT_PROXYPASSWORD, pw.password)
        }
        if authenticated, routing.kerberos != nil {
            // GSS-API takes the identity from the process's credential cache (SPN HTTP/<parent host>).
            mask |= CurlTransfer.authNegotiate
            if routing.password == nil { ap_easy_setopt_ptr(e, CURLOPT_PROXYUSERPWD, ":") }
        }
        if mask != 0 { ap_easy_setopt_long(e, CURLOPT_PROXYAUTH, mask) }
    }

    /// Whether a transfer or connection that ended with `code` failed at the parent, and how: it could not be
    /// reached, did not answer, refused the login (407) or refused the CONNECT. nil: the destination's failure
    /// (or none).
    func parentFailure(code: CURLcode, parent: ParentProxy) -> ParentFailover.Cause? {
        var connectCode = 0
        ap_easy_getinfo_long(raw, CURLINFO_HTTP_CONNECTCODE, &connectCode)
        if code != CURLE_OK, connectCode >= 300 { return connectCode == 407 ? .auth : .refused }
        if parent.scheme == .https, connectCode == 0,
            code == CURLE_SSL_CONNECT_ERROR || code == CURLE_PEER_FAILED_VERIFICATION
                || code == CURLE_SSL_CACERT_BADFILE
        {
            // TLS failed before any answer to CONNECT (or, in absolute form, where the parent's is the only TLS):
            // the connection to the parent, not the destination's handshake inside the tunnel.
            return .connect
        }
        switch code {
        case CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT:
            return .connect
        case CURLE_OPERATION_TIMEDOUT:
            // Before the request went out, the time was spent reaching the parent or in its CONNECT.
            var pretransfer: curl_off_t = 0
            ap_easy_getinfo_off(raw, CURLINFO_PRETRANSFER_TIME_T, &pretransfer)
            return pretransfer == 0 ? .timeout : nil
        case CURLE_PROXY:
            return .connect
        default:
            return nil
        }
    }

    /// The status of the parent's answer to CONNECT (0: none).
    var parentConnectStatus: Int {
        var connectCode = 0
        ap_easy_getinfo_long(raw, CURLINFO_HTTP_CONNECTCODE, &connectCode)
        return connectCode
    }
}
