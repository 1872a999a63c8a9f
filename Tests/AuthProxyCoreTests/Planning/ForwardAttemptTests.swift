import Testing

@testable import AuthProxyCore

/// ``ForwardAttempt``: the decisions made for one attempt at sending a request upstream, as tables.
@Suite struct ForwardAttemptTests {
    static func url(_ s: String) -> URLTarget { HTTPURL.parse(s)!.target }
    static let query = url("https://gis.example.com/arcgis/rest/services/P/FeatureServer/0/query?where=1%3D1")
    static let edit = url("https://gis.example.com/arcgis/rest/services/P/FeatureServer/0/applyEdits?f=json")

    static func attempt(
        _ url: URLTarget = query, method: String = "GET", framing: BodyFraming = .none, upgrade: String? = nil,
        heldForm: Int? = nil, retries: Bool = true, limit: Int = 0, getAsPost: GetAsPost.Cause? = nil
    ) -> ForwardAttempt {
        ForwardAttempt(
            url: url, headers: HTTPHeaders(), method: method, framing: framing, upgrade: upgrade, heldForm: heldForm,
            client: .own, retries: retries, getAsPostLimit: limit, getAsPost: getAsPost)
    }

    @Test(arguments: [
        ("GET", BodyFraming.none, Int?.none, Int64?.none),
        ("GET", .contentLength(0), nil, nil),
        ("POST", .contentLength(0), nil, 0),
        ("POST", .contentLength(12), nil, 12),
        ("POST", .chunked, nil, -1),
        ("HEAD", .contentLength(5), nil, nil),
        ("POST", .contentLength(12), 20, 20),
        ("HEAD", .none, 20, nil),
    ])
    func theBodyLength(method: String, framing: BodyFraming, heldForm: Int?, expected: Int64?) {
        #expect(Self.attempt(method: method, framing: framing, heldForm: heldForm).bodyLength == expected)
    }

    /// A form made by an earlier attempt is made again from the `GET`: its length is not the client's body.
    @Test func aFormFromALongGetIsNotTheClientsBody() {
        #expect(Self.attempt(heldForm: 40, getAsPost: .length).bodyLength == nil)
    }

    @Test func onlyRequestsThePolicyRepeatsAreKeptForAResend() {
        #expect(Self.attempt().resendable)
        #expect(Self.attempt(retries: false, limit: 2000).resendable)
        #expect(!Self.attempt(retries: false).resendable)
        #expect(!Self.attempt(method: "POST", framing: .contentLength(3)).resendable)
        #expect(!Self.attempt(Self.edit).resendable)
        #expect(Self.attempt(Self.edit).edits)
        #expect(!Self.attempt(upgrade: "websocket").resendable)
    }

    @Test func aLongReadGoesAsAFormOnceDecidedAndAfter() {
        var a = Self.attempt(limit: 20)
        #expect(a.form(applied: Self.query, limit: 20, matched: false) == .asSent)
        #expect(a.form(applied: Self.query, limit: 2000, matched: true) == .asSent)
        #expect(a.form(applied: Self.query, limit: 20, matched: true) == .newlyByLength)
        #expect(a.getAsPost == .length)
        #expect(a.form(applied: Self.query, limit: 2000, matched: true) == .asForm)
        // The next attempt of the exchange carries the cause over.
        var next = Self.attempt(limit: 20, getAsPost: a.getAsPost)
        #expect(next.form(applied: Self.query, limit: 2000, matched: true) == .asForm)
    }

    @Test func anEditNeverGoesAsAForm() {
        var a = Self.attempt(Self.edit, limit: 20)
        #expect(a.form(applied: Self.edit, limit: 20, matched: true) == .asSent)
    }

    @Test func a414SendsAReadAgainAsAFormOnce() {
        var a = Self.attempt(limit: 2000)
        #expect(!a.goesAsFormAfter414(limit: 2000, matched: false))
        #expect(!a.goesAsFormAfter414(limit: 0, matched: true))
        #expect(a.goesAsFormAfter414(limit: 2000, matched: true))
        a.refusedAsTooLong()
        #expect(a.getAsPost == .status414)
        #expect(!a.goesAsFormAfter414(limit: 2000, matched: true))
        #expect(a.form(applied: Self.query, limit: 2000, matched: true) == .asForm)
        #expect(!Self.attempt(retries: false).goesAsFormAfter414(limit: 2000, matched: true))
    }
}
