import Foundation

/// Reads `jwks_uri` from an OpenID Connect discovery document, checking that it describes the configured issuer
/// (OIDC Discovery §4.3: a document naming another issuer must not be used) and that the URI is http(s).
enum OIDCDiscovery {
    struct Problem: Error, Equatable {
        let reason: String
    }

    static func jwksURI(status: Int, body: [UInt8], issuer: String) -> Result<String, Problem> {
        guard status == 200 else { return .failure(Problem(reason: "HTTP \(status)")) }
        guard let doc = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else {
            return .failure(Problem(reason: "not a JSON object"))
        }
        guard let named = doc["issuer"] as? String, named == issuer else {
            return .failure(Problem(reason: "the document names another issuer than sign_in_issuer"))
        }
        guard let uri = doc["jwks_uri"] as? String, let u = HTTPURL.parse(uri),
            u.target.scheme == "https" || u.target.scheme == "http"
        else { return .failure(Problem(reason: "no http(s) jwks_uri")) }
        return .success(uri)
    }
}
