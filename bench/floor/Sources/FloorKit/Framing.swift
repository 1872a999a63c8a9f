// The only HTTP the floors understand: where a head ends, and a response's Content-Length. Inlinable, so the
// floors pay no cross-module call for them on the fast path.

/// Offset just past the last "\r\n\r\n" in `buf` found at or after `from`, or 0.
@inlinable
public func lastHeadEnd(_ buf: UnsafeBufferPointer<UInt8>, from: Int) -> Int {
    var last = 0
    var i = from
    let n = buf.count
    while i + 3 < n {
        if buf[i + 3] != 10 { i += (buf[i + 3] == 13 ? 1 : 4); continue }
        if buf[i] == 13 && buf[i + 1] == 10 && buf[i + 2] == 13 { last = i + 4; i += 4 } else { i += 1 }
    }
    return last
}

/// Offset just past the first "\r\n\r\n" at or after `from`, or -1.
@inlinable
public func firstHeadEnd(_ buf: UnsafeBufferPointer<UInt8>, from: Int) -> Int {
    var i = from
    let n = buf.count
    while i + 3 < n {
        if buf[i + 3] != 10 { i += (buf[i + 3] == 13 ? 1 : 4); continue }
        if buf[i] == 13 && buf[i + 1] == 10 && buf[i + 2] == 13 { return i + 4 }
        i += 1
    }
    return -1
}

/// The header name `contentLength` looks for, lower case.
public let contentLengthName = Array("content-length:".utf8)

/// The Content-Length value in the response head `buf[0..<end]`, if any (case-insensitive name, digits only).
@inlinable
public func contentLength(_ buf: UnsafeBufferPointer<UInt8>, _ end: Int) -> Int? {
    var i = 0
    // Skip the status line.
    while i < end && buf[i] != 10 { i += 1 }
    i += 1
    while i < end {
        var j = 0
        while j < contentLengthName.count && i + j < end && (buf[i + j] | 0x20) == contentLengthName[j] { j += 1 }
        if j == contentLengthName.count {
            var k = i + j
            while k < end && buf[k] == 32 { k += 1 }
            var v = 0
            var digits = 0
            while k < end && buf[k] >= 48 && buf[k] <= 57 { v = v * 10 + Int(buf[k] - 48); k += 1; digits += 1 }
            return digits > 0 ? v : nil
        }
        while i < end && buf[i] != 10 { i += 1 }
        i += 1
    }
    return nil
}
