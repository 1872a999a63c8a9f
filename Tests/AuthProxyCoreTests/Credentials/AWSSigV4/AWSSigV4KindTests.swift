import Testing

@testable import AuthProxyCore

/// ``AWSSigV4Kind`` on requests as they go upstream: which fields it sets, signs and removes, how it signs the
/// payload, and what it leaves alone.
@Suite struct AWSSigV4KindTests {
    static let may2013: Int64 = 1_369_353_600_000

    static func kind(
        service: String = "s3", session: String? = nil, maxBody: Int = AWSSigV4Kind.defaultMaxSignedBodyBytes
    ) -> AWSSigV4Kind {
        AWSSigV4Kind(
            name: "s3-cogs", region: "eu-central-1", service: service,
            keys: .fixed(AWSCredentials(accessKeyID: "AKIDX", secretAccessKey: "SECRETX", sessionToken: session)),
            maxSignedBodyBytes: maxBody)
    }

    static func request(
        _ pathAndQuery: String, method: String = "GET", host: String = "127.0.0.1", port: Int = 9000,
        fields: [(String, String)] = [], body: [UInt8]? = nil, bodyLength: Int64? = nil
    ) -> OutgoingRequest {
        OutgoingRequest(
            method: method, target: URLTarget(scheme: "http", host: host, port: port, pathAndQuery: pathAndQuery),
            fields: HTTPHeaders(fields), body: body, bodyLength: bodyLength ?? body.map { Int64($0.count) },
            isUpgrade: false, now: may2013, credential: "s3-cogs")
    }

    /// The signature of a virtual-hosted request with a session token, computed independently (Python `hmac`) from
    /// the canonical request `GET /a%20b/c.tif`, `host:cogs.localhost:9000`, `UNSIGNED-PAYLOAD`.
    @Test func virtualHostGetWithSessionTokenIsSignedUnsigned() {
        var r = Self.request("/a%20b/c.tif", host: "cogs.localhost")
        #expect(Self.kind(session: "SESSIONTOKEN").apply(nil, to: &r) == nil)
        #expect(r.fields.first("X-Amz-Date") == "20130524T000000Z")
        #expect(r.fields.first("X-Amz-Content-SHA256") == "UNSIGNED-PAYLOAD")
        #expect(r.fields.first("X-Amz-Security-Token") == "SESSIONTOKEN")
        #expect(
            r.fields.first("Authorization")
                == "AWS4-HMAC-SHA256 Credential=AKIDX/20130524/eu-central-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature=4e489130007c45b436b3f0567cf132f5a6ee06b9ef2b42b14f9a9158f824e836"
        )
        // The request itself is unchanged.
        #expect(r.method == "GET" && r.target.pathAndQuery == "/a%20b/c.tif" && r.body == nil)
    }

    @Test func theClientsOwnSigningFieldsAreReplacedAndItsOtherAmzFieldsSigned() throws {
        var r = Self.request(
            "/cogs/a.tif",
            fields: [
                ("Authorization", "AWS4-HMAC-SHA256 Credential=CLIENT/…"), ("x-amz-date", "19990101T000000Z"),
                ("X-Amz-Security-Token", "clients"), ("x-amz-content-sha256", "abc"), ("Range", "bytes=0-16383"),
                ("x-amz-request-payer", "requester"), ("Accept", "*/*"), ("Connection", "x-amz-meta-dropped"),
                ("x-amz-meta-dropped", "hop"),
            ])
        #expect(Self.kind().apply(nil, to: &r) == nil)
        #expect(r.fields.values("Authorization").count == 1)
        #expect(r.fields.values("X-Amz-Date") == ["20130524T000000Z"])
        #expect(r.fields.values("X-Amz-Content-SHA256") == ["UNSIGNED-PAYLOAD"])
        #expect(!r.fields.contains("X-Amz-Security-Token"))
        let auth = try #require(r.fields.first("Authorization"))
        #expect(auth.contains("Credential=AKIDX/20130524/eu-central-1/s3/aws4_request"))
        // A field named in `Connection` is not sent, so it is not signed.
        #expect(auth.contains("SignedHeaders=host;range;x-amz-content-sha256;x-amz-date;x-amz-request-payer,"))
    }

    @Test func heldBodyIsSignedWithItsHash() throws {
        let body = Array("Welcome to Amazon S3.".utf8)
        let kind = Self.kind()
        let view = RequestView(
            method: "PUT", target: URLTarget(scheme: "http", host: "h", port: 80, pathAndQuery: "/b/k"),
            fields: HTTPHeaders(), bodyLength: Int64(body.count), isUpgrade: false)
        #expect(kind.prepare(view).holdsBodyUpTo == AWSSigV4Kind.defaultMaxSignedBodyBytes)
        var r = Self.request("/b/k", method: "PUT", fields: [("Content-Type", "text/plain")], body: body)
        #expect(kind.apply(nil, to: &r) == nil)
        #expect(
            r.fields.first("X-Amz-Content-SHA256") == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        )
        #expect(try #require(r.fields.first("Authorization")).contains("SignedHeaders=content-type;host;"))
    }

    @Test func largeOrChunkedBodiesStreamUnsignedToS3() {
        let kind = Self.kind(maxBody: 1024)
        for length: Int64 in [1025, -1] {
            let view = RequestView(
                method: "PUT", target: URLTarget(scheme: "http", host: "h", port: 80, pathAndQuery: "/b/k"),
                fields: HTTPHeaders(), bodyLength: length, isUpgrade: false)
            #expect(kind.prepare(view).holdsBodyUpTo == nil)
            var r = Self.request("/b/k", method: "PUT", bodyLength: length)
            #expect(kind.apply(nil, to: &r) == nil)
            #expect(r.fields.first("X-Amz-Content-SHA256") == "UNSIGNED-PAYLOAD")
        }
        var empty = Self.request("/b/k", method: "PUT", bodyLength: 0)
        #expect(kind.apply(nil, to: &empty) == nil)
        #expect(empty.fields.first("X-Amz-Content-SHA256") == SigV4Signer.emptyPayloadHash)
    }

    @Test func otherServicesSignTheEmptyHashAndRefuseAnUnheldBody() throws {
        let kind = Self.kind(service: "execute-api", maxBody: 10)
        var get = Self.request("/prod/items", host: "api.example", port: 443)
        #expect(kind.apply(nil, to: &get) == nil)
        #expect(!get.fields.contains("X-Amz-Content-SHA256"))
        #expect(try #require(get.fields.first("Authorization")).contains("/eu-central-1/execute-api/aws4_request"))
        var big = Self.request("/prod/items", method: "POST", bodyLength: 11)
        let failure = try #require(kind.apply(nil, to: &big))
        #expect(failure.status == 413)
        #expect(failure.message.contains("'s3-cogs'") && failure.message.contains("max_signed_body_bytes = 10"))
        #expect(!failure.message.contains("SECRETX"))
    }

    @Test func presignedURLsGoAsTheClientMadeThem() {
        let presigned =
            "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=A%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        #expect(AWSSigV4Kind.isPresigned(presigned))
        #expect(AWSSigV4Kind.isPresigned("/b/k?AWSAccessKeyId=A&Expires=1&Signature=x"))
        #expect(!AWSSigV4Kind.isPresigned("/b/k?Signature=x"))
        #expect(!AWSSigV4Kind.isPresigned("/b/k?list-type=2&prefix=X-Amz-Signature"))
        let view = RequestView(
            method: "GET", target: URLTarget(scheme: "http", host: "h", port: 80, pathAndQuery: presigned),
            fields: HTTPHeaders(), bodyLength: nil, isUpgrade: false)
        #expect(Self.kind().prepare(view).clientHasOwn)
        var r = Self.request(presigned)
        #expect(Self.kind().apply(nil, to: &r) == nil)
        #expect(!r.fields.contains("Authorization") && !r.fields.contains("X-Amz-Date"))
    }

    @Test func temporaryCredentialsRoundTripThroughATokenValue() throws {
        let k = AWSCredentials(
            accessKeyID: "ASIAEXAMPLE", secretAccessKey: "wJal/rXU+tn=", sessionToken: "FwoGZXIvYXdzE+/x==")
        let v = k.tokenValue
        #expect(TokenSyntax.arcgisProblem(v) == nil)
        #expect(!v.contains("wJal") && !v.contains("FwoG"))
        #expect(AWSCredentials(tokenValue: v) == k)
        #expect(AWSCredentials(tokenValue: "a-plain-token") == nil)
        #expect(AWSCredentials(tokenValue: "aws1.QQ..") == nil)
        let w = AWSSigV4Kind(
            name: "w", region: "us-east-1", service: "s3",
            keys: .webIdentity(
                STSWebIdentity(
                    roleARN: "arn:aws:iam::123456789012:role/r", tokenFile: "/t", sessionName: "authproxy-w",
                    endpoint: "https://sts.us-east-1.amazonaws.com/", durationSeconds: nil)),
            maxSignedBodyBytes: 0)
        #expect(w.tokenSource == .fetched)
        let token = IssuedToken(value: v, expires: nil, issued: 0, ssl: false, referer: nil)
        #expect(w.secrets(token: token) == ["wJal/rXU+tn=", "FwoGZXIvYXdzE+/x=="])
        var r = Self.request("/b/k")
        #expect(w.apply(token, to: &r) == nil)
        #expect(r.fields.first("X-Amz-Security-Token") == "FwoGZXIvYXdzE+/x==")
        #expect(try #require(r.fields.first("Authorization")).contains("Credential=ASIAEXAMPLE/"))
        var none = Self.request("/b/k")
        #expect(w.apply(nil, to: &none)?.message.contains("'s3-cogs'") == true)
    }

    @Test func staticKeysNeedNoTokenAndKeepTheirSecretsOut() {
        let k = Self.kind(session: "SESS")
        #expect(k.tokenSource == .none)
        #expect(k.secrets(token: nil) == ["SECRETX", "SESS"])
        #expect(
            !k.statusDetails.contains { $0.1.contains("SECRETX") || $0.1.contains("SESS") || $0.1.contains("AKIDX") })
        #expect(k.identityMaterial.contains("SECRETX"))
        #expect(Self.kind().identityMaterial != Self.kind(session: "SESS").identityMaterial)
    }

    @Test func onlyRefusalsAreRead() {
        func head(_ status: Int) -> ResponseView {
            ResponseView(
                status: status, request: URLTarget(scheme: "http", host: "h", port: 80, pathAndQuery: "/"),
                field: { _ in [] })
        }
        #expect(Self.kind().rejection(of: head(200)) == .none)
        #expect(Self.kind().rejection(of: head(206)) == .none)
        #expect(Self.kind().rejection(of: head(404)) == .none)
        #expect(Self.kind().rejection(of: head(403)) == .readBody)
        #expect(Self.kind().rejection(of: head(400)) == .readBody)
        let expired = Array(
            "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>".utf8)
        #expect(Self.kind(session: "S").reading(of: head(400), body: expired, now: 0).rejected == false)
        var web = Self.kind()
        web.keys = .webIdentity(
            STSWebIdentity(
                roleARN: "arn:aws:iam::1:role/r", tokenFile: "/t", sessionName: "s1", endpoint: "http://sts/",
                durationSeconds: nil))
        let reading = web.reading(of: head(400), body: expired, now: 0)
        #expect(reading.rejected)
        #expect(reading.note?.contains("credential 's3-cogs'") == true)
        #expect(Self.kind().inspectsResponses && web.inspectsResponses)
        // The protocol's entry point reads the same.
        #expect(web.rejection(of: head(400), body: expired).rejected)
    }
}
