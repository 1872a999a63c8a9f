import CAuthProxyShims
import CCurl
import Dispatch
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// The libcurl side of a forwarded request: starting the transfer, feeding it the request body, and
/// relaying the response head and body (the `UpstreamTransferDelegate` callbacks).
extension ClientConnection {
    /// Starts the libcurl transfer for the current request with `headers` (hop-by-hop fields are removed here).
    func startTransfer(url: URLTarget, headers: HTTPHeaders) {
        guard state != .closed, let h = head else { return }
        var lines: [String] = []
        lines.reserveCapacity(headers.count + 3)
        var hasAccept = false
        let named = headers.connectionNamedFields()
        for f in headers {
            if HTTPHeaders.isHopByHop(f.name, named: named) { continue }
            if f.name.caseInsensitiveEquals("host") || f.name.caseInsensitiveEquals("content-length")
                || f.name.caseInsensitiveEquals("expect")
            {
                continue
            }
            if f.name.caseInsensitiveEquals("accept") { hasAccept = true }
            lines.append(f.value.isEmpty ? "\(f.name);" : "\(f.name): \(f.value)")
        }
        lines.append("Via: \(context.viaValue)")
        // Stop libcurl adding headers the client did not send.
        lines.append("Expect:")
        if !hasAccept { lines.append("Accept:") }
        var bodyLength: Int64?
        if let form = formBody {
            bodyLength = Int64(form.count)
        } else {
            switch h.framing {
            case .none: bodyLength = nil
            case .contentLength(let n): bodyLength = (n == 0 && (h.method == "GET" || h.method == "HEAD")) ? nil : n
            case .chunked: bodyLength = -1
            }
        }
        if h.method == "HEAD" { bodyLength = nil }
        state = .forwarding
        var request = UpstreamRequest(method: h.method, url: url.url, headerLines: lines, bodyLength: bodyLength,
            timeoutSeconds: context.config.upstreamTimeoutSeconds)
        request.network = networkAuth
        request.denyDestinations = context.access.denyDestinations
        let t = UpstreamTransfer(
            multi: loop.multi,
            request: request,
            destination: "\(url.urlHost):\(url.port)", delegate: self)
        transfer = t
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        t.start()
        pumpBody()
    }

    /// Moves request-body bytes from the input buffer to the body buffer libcurl reads from.
    func pumpBody() {
        guard state == .forwarding, !bodyComplete else { return }
        if collectingForm {
            let n = Int(min(bodyRemaining, Int64(inbuf.count)))
            inbuf.withUnreadBytes { formBody!.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            inbuf.consume(n)
            bodyRemaining -= Int64(n)
            if bodyRemaining == 0 {
                bodyComplete = true
                formCollected()
            }
            return
        }
        while bodyBuffer.count < Self.maxBuffered, !inbuf.isEmpty, !bodyComplete {
            let space = Self.maxBuffered - bodyBuffer.count
            if var decoder = chunkDecoder {
                // Move the buffer out while the closure appends to it, so appending does not copy it.
                var out = ByteBuffer()
                swap(&out, &bodyBuffer)
                let result: Result<Int, HTTPParseError> = inbuf.withUnreadBytes { bytes in
                    do throws(HTTPParseError) {
                        return .success(try decoder.decode(bytes, limit: space) { out.append($0) })
                    } catch {
                        return .failure(error)
                    }
                }
                swap(&out, &bodyBuffer)
                let consumed: Int
                switch result {
                case .success(let n): consumed = n
                case .failure(let error):
                    chunkDecoder = nil
                    bodyFailed(error)
                    return
                }
                inbuf.consume(consumed)
                chunkDecoder = decoder
                if decoder.isDone { bodyComplete = true }
            } else {
                let n = Int(min(bodyRemaining, Int64(min(inbuf.count, space))))
                inbuf.withUnreadBytes { bodyBuffer.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                inbuf.consume(n)
                bodyRemaining -= Int64(n)
                if bodyRemaining == 0 { bodyComplete = true }
            }
        }
        if curlReadPaused, !bodyBuffer.isEmpty || bodyComplete {
            curlReadPaused = false
            lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
            transfer?.resume()
        }
    }

    func bodyFailed(_ e: HTTPParseError) {
        transfer?.cancel()
        transfer = nil
        bodyComplete = false
        if responseHeadSent && heldHead == nil {
            close()
        } else {
            heldHead = nil
            respond(ErrorResponse.forParseError(e), close: true)
        }
    }

    func transferNeedsBody(_ buffer: UnsafeMutableRawBufferPointer) -> BodySupply {
        if head?.expectsContinue == true, !sentContinue, !responseHeadSent {
            sentContinue = true
            send("HTTP/1.1 100 Continue\r\n\r\n")
        }
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        if let form = formBody {
            let n = min(buffer.count, form.count - formOffset)
            if n == 0 { return .end }
            form.withUnsafeBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[formOffset..<(formOffset + n)])) }
            formOffset += n
            if attempt == 1 { bodyBytesIn += Int64(n) }
            return .bytes(n)
        }
        if let r = replay, replayOffset < r.count {
            // A retry: first the bytes the rejected attempt already sent.
            let n = r.read(at: replayOffset, into: buffer)
            if n <= 0 { return .abort }
            replayOffset += Int64(n)
            return .bytes(n)
        }
        if bodyBuffer.isEmpty {
            if bodyComplete { return .end }
            curlReadPaused = true
            return .pause
        }
        let n = min(buffer.count, bodyBuffer.count)
        bodyBuffer.withUnreadBytes { buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        bodyBuffer.consume(n)
        bodyBytesIn += Int64(n)
        if let r = replay {
            r.append(UnsafeRawBufferPointer(buffer.baseAddress.map { UnsafeRawBufferPointer(start: $0, count: n) }!))
            replayOffset = r.count
        }
        if !bodyComplete, !inbuf.isEmpty {
            pumpBody()
        }
        updateReadInterest()
        return .bytes(n)
    }

    func transferRewindBody() -> Bool {
        if formBody != nil {
            formOffset = 0
            return true
        }
        guard let r = replay, !r.overflowed else { return bodyBytesIn == 0 && bodyBuffer.isEmpty }
        replayOffset = 0
        return true
    }

    func transferDidReceiveHeaderLine(_ raw: UnsafeRawBufferPointer) {
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        guard !responseHeadSent else { return }  // trailers of a chunked response: hop-by-hop, dropped
        var end = raw.count
        while end > 0, raw[end - 1] == 10 || raw[end - 1] == 13 { end -= 1 }
        let line = UnsafeRawBufferPointer(rebasing: raw[0..<end])
        if line.starts(with: "HTTP/".utf8) {
            // "HTTP/1.1 200 OK": a new response (1xx ones come first and are not relayed).
            let text = String(decoding: line, as: UTF8.self)
            let parts = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: false)
            responseStatus = parts.count > 1 ? Int(parts[1]) ?? 502 : 502
            responseReason = parts.count > 2 ? String(parts[2]) : reasonPhrase(responseStatus)
            responseHeaders = HTTPHeaders()
            return
        }
        if line.isEmpty {
            // With a password/Kerberos credential, libcurl answers a 401 itself and the next status line starts
            // the real response: a 401 is only final if a body (or the end) follows.
            if responseStatus >= 200, !(networkAuth.answersChallenges && (responseStatus == 401 || responseStatus == 407)) {
                commitResponseHead()
                if sniffing { decideSniffing() }
            }
            return
        }
        if line[0] == 32 || line[0] == 9 {
            // obs-fold from an old upstream: join to the previous field.
            responseHeaders.continueLast(with: String(decoding: line, as: UTF8.self).trimmingHTTPWhitespace())
            return
        }
        guard let colon = line.firstIndex(of: 58) else { return }
        let name = String(decoding: line[0..<colon], as: UTF8.self)
        let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingHTTPWhitespace()
        responseHeaders.add(name: name, value: String(value))
    }

    func commitResponseHead() {
        guard !responseHeadSent, let h = head else { return }
        responseHeadSent = true
        let status = responseStatus
        responseNoBody = h.isHead || status == 204 || status == 304 || status < 200
        var out = responseHeaders.removingHopByHop()
        let lengths = out.values("content-length")
        out.remove(name: "content-length")
        var length: Int64? = nil
        // With Transfer-Encoding the upstream's Content-Length is meaningless (libcurl de-chunks the body).
        if !responseHeaders.contains("transfer-encoding"), let first = lengths.first, lengths.allSatisfy({ $0 == first }),
            let n = Int64(first), n >= 0
        {
            length = n
        }
        if responseNoBody {
            if let length, status != 204 { out.add(name: "Content-Length", value: String(length)) }
        } else if let length {
            out.add(name: "Content-Length", value: String(length))
        } else if h.minorVersion >= 1 {
            out.add(name: "Transfer-Encoding", value: "chunked")
            responseChunked = true
        } else {
            keepAlive = false  // close-delimited for an HTTP/1.0 client
        }
        out.add(name: "Via", value: context.viaValue)
        if let o = corsOrigin {
            out.remove(name: "access-control-allow-origin")
            out.add(name: "Access-Control-Allow-Origin", value: o)
            out.add(name: "Vary", value: "Origin")
        }
        if !keepAlive {
            out.add(name: "Connection", value: "close")
        } else if h.minorVersion == 0 {
            out.add(name: "Connection", value: "keep-alive")
        }
        var s = "HTTP/1.1 \(status) \(responseReason)\r\n"
        for f in out { s += "\(f.name): \(f.value)\r\n" }
        s += "\r\n"
        heldHead = s
    }

    /// Writes the held response head, if any, followed by `tail`.
    func flushHead(then tail: String = "") {
        if var h = heldHead {
            heldHead = nil
            h += tail
            send(h)
        } else if !tail.isEmpty {
            send(tail)
        }
    }

    func transferDidReceiveBody(_ bytes: UnsafeRawBufferPointer) -> BodyAcceptance {
        lastUpstreamProgress = DispatchTime.now().uptimeNanoseconds
        if !responseHeadSent { commitResponseHead() }
        if holding {
            if sniffBuffer.count + bytes.count <= TokenRejection.lookAhead {
                sniffBuffer.append(contentsOf: bytes)
                return .accepted
            }
            // Token errors are small: a body this large is the real answer.
            releaseHeldResponse()
        }
        if channel.failed || channel.isClosed { return .abort }
        if responseNoBody { return .accepted }
        if channel.pendingCount >= Self.maxBuffered {
            curlWritePaused = true
            return .pause
        }
        loop.writeBody(bytes, head: heldHead, chunked: responseChunked) { send($0) }
        heldHead = nil
        bodyBytesOut += Int64(bytes.count)
        return channel.failed ? .abort : .accepted
    }

    func transferDidFinish(error: UpstreamError?) {
        transfer = nil
        if let error {
            if error.isClientSide || state == .closed {
                close()
                return
            }
            logger.warning("upstream failed", metadata: ["client": "\(peer)", "destination": "\(error.destination)",
                "cause": "\(error.detail.isEmpty ? error.response.message : error.detail)"])
            if responseHeadSent && heldHead == nil {
                // Headers are out: the only honest signal left is to cut the connection (truncation).
                logAccess()
                close()
            } else {
                heldHead = nil
                responseHeadSent = false
                respond(error.response, close: !bodyComplete)
                process()
                updateReadInterest()
            }
            return
        }
        if !responseHeadSent {
            if responseStatus < 200 { responseStatus = 502; responseReason = "Bad Gateway" }
            commitResponseHead()
        }
        if responseStatus == 401, networkAuth.answersChallenges, let url = upstreamURL {
            logger.warning("upstream refused the network credential", metadata: ["url": "\(url.origin)\(url.path)",
                "credential": "\(networkAuth.passwordName ?? "kerberos")"])
        }
        if holding {
            if TokenRejection.isRejection(status: responseStatus, contentType: responseHeaders.first("content-type"),
                contentEncoding: responseHeaders.first("content-encoding"), body: sniffBuffer),
                tokenRejected()
            {
                return
            }
            if holding { releaseHeldResponse() }
        }
        flushHead(then: responseChunked ? "0\r\n\r\n" : "")
        finishExchange()
        process()
        updateReadInterest()
    }
}
