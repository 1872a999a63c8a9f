/// What an upstream exchange (the own client's ``HTTP1Transfer``, or a libcurl ``CurlTransfer``) reports back, on the
/// event loop's queue, from inside its callbacks.
protocol UpstreamExchangeDelegate: AnyObject {
    /// One raw header line from the upstream, CRLF included (status lines of every response, 1xx too).
    func transferDidReceiveHeaderLine(_ line: UnsafeRawBufferPointer)
    /// Body bytes. Return false to have libcurl keep them and pause until ``CurlTransfer/resume()``.
    func transferDidReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyAcceptance
    /// Fill `buffer` with request-body bytes.
    func transferNeedsBody(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply
    /// libcurl wants to send the request body again from the start; false if that is impossible.
    func transferRewindBody() -> Bool
    /// The transfer ended; `error` is nil on success.
    func transferDidFinish(error: UpstreamError?)
    /// The upstream answered an upgrade request (``UpstreamRequest/upgrade``) with `101`, whose head lines were
    /// handed on: the exchange is over and its connection is the delegate's, with `leftover` (bytes of the new
    /// protocol read behind the head). The channel has no owner and reads paused: the delegate takes it over or
    /// closes it. Only the own client (``HTTP1Transfer``) carries upgrades.
    func transferSwitchedProtocols(channel: SocketChannel, leftover: ByteBuffer)
}

extension UpstreamExchangeDelegate {
    /// The proxy's own fetches (tokens, sign-in) never ask for an upgrade; a connection handed over anyway is closed.
    func transferSwitchedProtocols(channel: SocketChannel, leftover: ByteBuffer) {
        channel.close()
    }
}

enum BodyAcceptance {
    case accepted
    case pause
    /// The client is gone: abort the transfer.
    case abort
}

enum BodySupply {
    case bytes(Int)
    case end
    case pause
    case abort
}
