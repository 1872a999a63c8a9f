/// A `[[client]]` that proxy authentication admitted on a connection, and the `Proxy-Authorization` value it
/// presented.
final class AuthenticatedClient {
    let client: ProxyClient
    let authorization: String

    init(client: ProxyClient, authorization: String) {
        self.client = client
        self.authorization = authorization
    }
}
