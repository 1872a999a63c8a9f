import Testing

@testable import AuthProxyCore

/// ``SigV4Signer`` against AWS's published examples: the SigV4 test suite (`get-vanilla`,
/// `get-vanilla-query-order-key-case`, `post-x-www-form-urlencoded`) and the S3 documentation's header-signing
/// examples (GET Object with a range, PUT Object, GET Bucket with a query). The `UNSIGNED-PAYLOAD` signature, which
/// AWS publishes no example of, was computed by an independent implementation (Python `hmac`) from the same
/// canonical request.
@Suite struct SigV4SignerTests {
    static let suite = SigV4Signer(
        accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", region: "us-east-1",
        service: "service")
    static let s3 = SigV4Signer(
        accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        region: "us-east-1", service: "s3")

    @Test func getVanilla() {
        let s = Self.suite.sign(
            .init(
                method: "GET", pathAndQuery: "/",
                fields: [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")],
                payloadHash: SigV4Signer.emptyPayloadHash), amzDate: "20150830T123600Z")
        #expect(
            s.canonicalRequest
                == "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n"
                + SigV4Signer.emptyPayloadHash)
        #expect(
            s.stringToSign
                == "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\nbb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"
        )
        #expect(
            s.authorization
                == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        )
    }

    @Test func getVanillaQueryOrderKeyCase() {
        let s = Self.suite.sign(
            .init(
                method: "GET", pathAndQuery: "/?Param2=value2&Param1=value1",
                fields: [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")],
                payloadHash: SigV4Signer.emptyPayloadHash), amzDate: "20150830T123600Z")
        #expect(
            s.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)[2]
                == "Param1=value1&Param2=value2")
        #expect(s.signature == "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
    }

    @Test func postXWWWFormURLEncoded() {
        let s = Self.suite.sign(
            .init(
                method: "POST", pathAndQuery: "/",
                fields: [
                    ("Content-Type", "application/x-www-form-urlencoded"), ("Host", "example.amazonaws.com"),
                    ("X-Amz-Date", "20150830T123600Z"),
                ],
                payloadHash: Crypto.hex(Crypto.sha256(Array("Param1=value1".utf8)))), amzDate: "20150830T123600Z")
        #expect(s.signedHeaders == "content-type;host;x-amz-date")
        #expect(s.signature == "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a")
    }

    /// S3 documentation, "Example: GET Object" (the first ten bytes of `test.txt`).
    @Test func s3GetObjectWithRange() {
        let s = Self.s3.sign(
            .init(
                method: "GET", pathAndQuery: "/test.txt",
                fields: [
                    ("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"),
                    ("x-amz-content-sha256", SigV4Signer.emptyPayloadHash), ("x-amz-date", "20130524T000000Z"),
                ], payloadHash: SigV4Signer.emptyPayloadHash), amzDate: "20130524T000000Z")
        #expect(
            s.authorization
                == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        )
    }

    /// The same request with `UNSIGNED-PAYLOAD`, as the proxy signs every GET to S3.
    @Test func s3GetObjectUnsignedPayload() {
        let s = Self.s3.sign(
            .init(
                method: "GET", pathAndQuery: "/test.txt",
                fields: [
                    ("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"),
                    ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"), ("x-amz-date", "20130524T000000Z"),
                ], payloadHash: SigV4Signer.unsignedPayload), amzDate: "20130524T000000Z")
        #expect(s.canonicalRequest.hasSuffix("\nhost;range;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD"))
        #expect(s.signature == "edacce68e5445863e1f916719fac26d3be9c1581fccd7878ade0879597fc0dc1")
    }

    /// S3 documentation, "Example: PUT Object": `$` in the key is encoded once (`%24`), the payload hash signed.
    @Test func s3PutObject() {
        let body = Array("Welcome to Amazon S3.".utf8)
        let hash = Crypto.hex(Crypto.sha256(body))
        #expect(hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let s = Self.s3.sign(
            .init(
                method: "PUT", pathAndQuery: "/test$file.text",
                fields: [
                    ("Host", "examplebucket.s3.amazonaws.com"), ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                    ("x-amz-date", "20130524T000000Z"), ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                    ("x-amz-content-sha256", hash),
                ], payloadHash: hash), amzDate: "20130524T000000Z")
        #expect(s.canonicalRequest.hasPrefix("PUT\n/test%24file.text\n\n"))
        #expect(s.signedHeaders == "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class")
        #expect(s.signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
        // A client that sent the key encoded gets the same signature.
        let encoded = Self.s3.sign(
            .init(
                method: "PUT", pathAndQuery: "/test%24file.text",
                fields: [
                    ("Host", "examplebucket.s3.amazonaws.com"), ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
                    ("x-amz-date", "20130524T000000Z"), ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                    ("x-amz-content-sha256", hash),
                ], payloadHash: hash), amzDate: "20130524T000000Z")
        #expect(encoded.signature == s.signature)
    }

    /// S3 documentation, "Example: GET Bucket (List Objects)".
    @Test func s3ListObjects() {
        let s = Self.s3.sign(
            .init(
                method: "GET", pathAndQuery: "/?max-keys=2&prefix=J",
                fields: [
                    ("Host", "examplebucket.s3.amazonaws.com"), ("x-amz-date", "20130524T000000Z"),
                    ("x-amz-content-sha256", SigV4Signer.emptyPayloadHash),
                ], payloadHash: SigV4Signer.emptyPayloadHash), amzDate: "20130524T000000Z")
        #expect(s.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test func amzDateIsUTCBasicFormat() {
        #expect(SigV4Signer.amzDate(millis: 1_440_938_160_000) == "20150830T123600Z")
        #expect(SigV4Signer.amzDate(millis: 1_369_353_600_999) == "20130524T000000Z")
    }

    @Test func fieldValuesAreTrimmedAndRepeatedFieldsJoined() {
        let (block, signed) = SigV4Signer.canonicalFields([
            ("My-Header1", "  value1  "), ("my-header2", "\"a   b   c\""), ("My-Header1", "value2"), ("Host", "h"),
        ])
        #expect(block == "host:h\nmy-header1:value1,value2\nmy-header2:\"a b c\"\n")
        #expect(signed == "host;my-header1;my-header2")
    }
}

/// ``SigV4Encoding``: S3 encodes the path once and keeps its segments; other services normalize it and encode it
/// twice (the SigV4 test suite's `get-space`, `get-utf8`, `get-slashes`, `get-relative-relative`).
@Suite struct SigV4EncodingTests {
    @Test func s3PathIsDecodedAndEncodedOnce() {
        #expect(SigV4Encoding.canonicalURI(path: "/cogs/a%20b/c.tif", s3: true) == "/cogs/a%20b/c.tif")
        #expect(SigV4Encoding.canonicalURI(path: "/cogs/a b/~x(1).tif", s3: true) == "/cogs/a%20b/~x%281%29.tif")
        #expect(SigV4Encoding.canonicalURI(path: "/cogs/%7e%2fkey", s3: true) == "/cogs/~%2Fkey")
        // S3 keys may hold `//`, `.` and `..`: nothing is normalized.
        #expect(SigV4Encoding.canonicalURI(path: "/b//./../k", s3: true) == "/b//./../k")
        #expect(SigV4Encoding.canonicalURI(path: "/a+b", s3: true) == "/a%2Bb")
        #expect(SigV4Encoding.canonicalURI(path: "", s3: true) == "/")
    }

    @Test func otherServicesNormalizeAndEncodeTwice() {
        #expect(SigV4Encoding.canonicalURI(path: "/example%20space/", s3: false) == "/example%2520space/")
        #expect(SigV4Encoding.canonicalURI(path: "/example space/", s3: false) == "/example%20space/")
        #expect(SigV4Encoding.canonicalURI(path: "/ሴ", s3: false) == "/%E1%88%B4")
        #expect(SigV4Encoding.canonicalURI(path: "//example//", s3: false) == "/example/")
        #expect(SigV4Encoding.canonicalURI(path: "/example1/example2/../..", s3: false) == "/")
        #expect(SigV4Encoding.canonicalURI(path: "/./", s3: false) == "/")
    }

    @Test func queryIsReencodedAndSorted() {
        #expect(SigV4Encoding.canonicalQuery("Param2=value2&Param1=value1") == "Param1=value1&Param2=value2")
        #expect(SigV4Encoding.canonicalQuery("b=2&a=2&a=1") == "a=1&a=2&b=2")
        #expect(SigV4Encoding.canonicalQuery("ሴ=bar") == "%E1%88%B4=bar")
        #expect(SigV4Encoding.canonicalQuery("lifecycle") == "lifecycle=")
        #expect(SigV4Encoding.canonicalQuery("prefix=a%2fb%7E&x=a b") == "prefix=a%2Fb~&x=a%20b")
        #expect(SigV4Encoding.canonicalQuery("-._~0-9A-Za-z=-._~0-9A-Za-z") == "-._~0-9A-Za-z=-._~0-9A-Za-z")
        #expect(SigV4Encoding.canonicalQuery("") == "")
    }
}
