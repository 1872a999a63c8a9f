/// Whether a client connection's first bytes are a TLS ClientHello (the client's proxy URL is `https://`) rather
/// than an HTTP request: a TLS handshake record (content type 22) with a 3.x record version. No HTTP request
/// can begin with byte 22, so a plain connection pays one byte compare on its first read and nothing after.
///
/// Pure: it looks at bytes only.
enum ClientHelloPrefix {
    static func isTLS(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let first = bytes.first, first == 0x16 else { return false }
        // A first read this short is taken as TLS: the handshake then tells (an HTTP parser would refuse it anyway).
        if bytes.count < 2 { return true }
        guard bytes[1] == 0x03 else { return false }
        return bytes.count < 3 || bytes[2] <= 0x04
    }
}
