import Testing
import Tracing

@testable import AuthProxyCore

/// A span's attributes as a list: `SpanAttributes`' semantics (a key set again is replaced), kept in the order
/// first set, and the same values whichever way they were set.
@Suite struct SpanAttributeListTests {
    @Test func aKeySetAgainIsReplacedInPlace() {
        var a = SpanAttributeList()
        a.set("http.request.method", "GET")
        a.set("server.port", 80)
        a.set("error.type", "timeout")
        a.set("server.port", 8080)
        a.set("authproxy.token.rejected", true)
        #expect(a.items.map(\.0) == ["http.request.method", "server.port", "error.type", "authproxy.token.rejected"])
        #expect(a["server.port"] == .int(8080))
        #expect(a["error.type"] == .string("timeout"))
        #expect(a["authproxy.token.rejected"] == .bool(true))
        #expect(a["url.full"] == nil)
    }

    @Test func keysOfTheSameLengthAreToldApart() {
        var a = SpanAttributeList()
        a.set("url.path", "/a")
        a.set("url.full", "http://h/a")
        a.set("url.path", "/b")
        #expect(a.items.count == 2)
        #expect(a["url.path"] == .string("/b"))
        #expect(a["url.full"] == .string("http://h/a"))
    }

    @Test func convertsToAndFromSpanAttributes() {
        var a = SpanAttributeList()
        a.set("s", "x")
        a.set("i", -4)
        a.set("b", false)
        a.set("d", .double(1.5))
        a.set("l", .strings(["p:1", "q:2"]))
        let converted = a.spanAttributes
        #expect(converted["s"]?.toSpanAttribute() == .string("x"))
        #expect(converted["i"]?.toSpanAttribute() == .int64(-4))
        #expect(converted["l"]?.toSpanAttribute() == .stringArray(["p:1", "q:2"]))
        let back = SpanAttributeList(converted)
        #expect(back.items.count == 5)
        for (k, v) in a.items { #expect(back[k] == v) }
    }

    @Test func kindsOTLPHasNoScalarForBecomeText() {
        var s = SpanAttributes()
        s["small"] = SpanAttribute.int32(7)
        s["port"] = SpanAttribute.stringConvertible(443)
        let a = SpanAttributeList(s)
        #expect(a["small"] == .int(7))
        #expect(a["port"] == .string("443"))
    }
}
