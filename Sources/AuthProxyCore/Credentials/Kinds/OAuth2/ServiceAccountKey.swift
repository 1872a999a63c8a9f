import Foundation

/// A Google service-account JSON key (`gcloud iam service-accounts keys create`): the fields the jwt-bearer grant
/// needs. Pure; the file is read again for every token request (a rotated key is used without a reload), and no
/// message quotes the key.
struct ServiceAccountKey: Equatable {
    /// The service account's email: the assertion's `iss` and `sub`.
    var clientEmail: String
    /// The PEM private key (PKCS#8 in Google's files).
    var privateKeyPEM: String
    /// The key's id: the assertion's `kid`, so Google picks the right public key.
    var privateKeyID: String?
    /// Google's token endpoint (`https://oauth2.googleapis.com/token`): where the assertion goes, and its `aud`.
    var tokenURI: String

    static let googleTokenURI = "https://oauth2.googleapis.com/token"

    /// Reads the JSON of `source` (a path, for messages).
    static func parse(_ bytes: [UInt8], source: String) -> Result<ServiceAccountKey, OAuth2Problem> {
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any] else {
            return .failure(OAuth2Problem("\(source) is not a JSON object (a service-account key file)"))
        }
        if let type = object["type"] as? String, type != "service_account" {
            return .failure(
                OAuth2Problem("\(source) is a \"\(jsonEscaped(type))\" credential, not a service-account key"))
        }
        guard let email = object["client_email"] as? String, !email.isEmpty else {
            return .failure(OAuth2Problem("\(source) has no client_email"))
        }
        guard let key = object["private_key"] as? String, key.contains("PRIVATE KEY") else {
            return .failure(OAuth2Problem("\(source) has no PEM private_key"))
        }
        let uri = (object["token_uri"] as? String).flatMap { $0.isEmpty ? nil : $0 } ?? googleTokenURI
        guard HTTPURL.parse(uri) != nil else {
            return .failure(OAuth2Problem("the token_uri of \(source) is not an http(s) URL"))
        }
        let kid = (object["private_key_id"] as? String).flatMap { $0.isEmpty ? nil : $0 }
        return .success(ServiceAccountKey(clientEmail: email, privateKeyPEM: key, privateKeyID: kid, tokenURI: uri))
    }

    /// Reads and parses the file at `path`.
    static func read(path: String) -> Result<ServiceAccountKey, OAuth2Problem> {
        guard let text = readTextFile(path) else {
            return .failure(OAuth2Problem("cannot read service_account_file '\(path)': \(lastErrorString())"))
        }
        return parse(Array(text.utf8), source: "service_account_file '\(path)'")
    }

    /// The signing key, checked to be RSA (Google signs and verifies service-account assertions with RS256).
    func signingKey(source: String) -> Result<JWTSigningKey, OAuth2Problem> {
        do {
            return .success(
                try JWTSigningKey(
                    pem: Array(privateKeyPEM.utf8), algorithm: .rs256, source: "the private_key of \(source)")
            )
        } catch {
            return .failure(error)
        }
    }
}
