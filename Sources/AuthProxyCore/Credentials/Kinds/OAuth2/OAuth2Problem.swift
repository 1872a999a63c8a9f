/// Why an `oauth2` credential cannot make a token request (its key, its assertion file, the provider's discovery
/// document): a sentence naming files and URLs, never their secret contents.
struct OAuth2Problem: Error, Sendable, Equatable {
    let message: String

    init(_ message: String) { self.message = message }
}
