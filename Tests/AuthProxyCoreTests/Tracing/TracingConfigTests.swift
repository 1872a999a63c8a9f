import Foundation
import Testing

@testable import AuthProxyCore

/// `[tracing]` and the `OTEL_*` variables: off by default, on with an endpoint from either, the table winning key by
/// key, and errors that name the key or the variable.
@Suite struct TracingConfigTests {
    static let base = "[proxy]\nlisten = [\"127.0.0.1:3128\"]\n"

    func load(_ extra: String = "", env: [String: String] = [:]) throws -> ProxyConfig {
        try ConfigLoader(environment: env).parse(Self.base + extra)
    }

    func error(_ extra: String = "", env: [String: String] = [:]) -> String {
        do {
            _ = try load(extra, env: env)
            return ""
        } catch {
            return "\(error)"
        }
    }

    @Test func offWithoutAnEndpoint() throws {
        #expect(try load().tracing == nil)
        #expect(try load(env: ["OTEL_SERVICE_NAME": "x"]).tracing == nil)
    }

    @Test func theStandardVariablesTurnItOn() throws {
        let t = try #require(
            try load(env: [
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/", "OTEL_SERVICE_NAME": "gis",
                "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
                "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=abc%20def,other=1", "OTEL_BSP_SCHEDULE_DELAY": "250",
                "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=ignored",
            ]).tracing)
        #expect(t.endpoint == "http://collector:4318/v1/traces")
        #expect(t.serviceName == "gis")
        #expect(t.sampler == .parentBased(root: .traceIDRatio(0.25)))
        #expect(t.headers == [.init(name: "x-api-key", value: "abc def"), .init(name: "other", value: "1")])
        #expect(t.scheduleDelayMillis == 250)
        #expect(t.resourceAttributes == [.init(name: "deployment.environment", value: "prod")])
    }

    @Test func theTracesEndpointIsUsedAsIs() throws {
        let t = try #require(
            try load(env: [
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:9/x",
            ]).tracing)
        #expect(t.endpoint == "http://b:9/x")
    }

    @Test func theTableWinsKeyByKey() throws {
        let t = try #require(
            try load(
                "[tracing]\nendpoint = \"http://table:4318\"\nsampler = \"always_off\"\n",
                env: [
                    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_TRACES_SAMPLER": "always_on",
                    "OTEL_SERVICE_NAME": "from-env",
                ]
            ).tracing)
        #expect(t.endpoint == "http://table:4318/v1/traces")
        #expect(t.sampler == .alwaysOff)
        #expect(t.serviceName == "from-env")
    }

    @Test func switchedOff() throws {
        let env = ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318"]
        #expect(try load("[tracing]\nenabled = false\n", env: env).tracing == nil)
        #expect(try load(env: env.merging(["OTEL_SDK_DISABLED": "true"]) { a, _ in a }).tracing == nil)
        #expect(try load(env: env.merging(["OTEL_TRACES_EXPORTER": "none"]) { a, _ in a }).tracing == nil)
    }

    @Test func errorsNameTheKeyOrVariable() {
        #expect(error("[tracing]\nsampler = \"always_on\"\n").contains("tracing.endpoint"))
        #expect(error("[tracing]\nendpoint = \"ftp://x\"\n").contains("tracing.endpoint"))
        #expect(
            error("[tracing]\nendpoint = \"http://x:4318\"\nsampler = \"sometimes\"\n").contains("tracing.sampler"))
        let env = ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318"]
        #expect(
            error(env: env.merging(["OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"]) { a, _ in a })
                .contains("OTEL_EXPORTER_OTLP_PROTOCOL"))
        #expect(
            error(
                env: env.merging(["OTEL_TRACES_SAMPLER_ARG": "2", "OTEL_TRACES_SAMPLER": "traceidratio"]) { a, _ in a }
            )
            .contains("OTEL_TRACES_SAMPLER_ARG"))
        #expect(
            error(env: env.merging(["OTEL_BSP_MAX_QUEUE_SIZE": "lots"]) { a, _ in a }).contains(
                "OTEL_BSP_MAX_QUEUE_SIZE"))
        // A header value (an API key) is never quoted.
        let bad = error("[tracing]\nendpoint = \"http://x:4318\"\nheaders = \"k=secret-value\\u0001\"\n")
        #expect(bad.contains("tracing.headers") && !bad.contains("secret-value"))
    }

    @Test func anHTTPSEndpointsCAIsReadAtLoadFromTheTableOrTheVariable() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("tracing-ca-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let ca = dir.appendingPathComponent("ca.pem").path
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
        try pem.write(toFile: ca, atomically: true, encoding: .utf8)
        let t = try #require(
            try load("[tracing]\nendpoint = \"https://collector:4318\"\nca_file = \"\(ca)\"\n").tracing)
        #expect(t.caFile == ca && t.trust?.caBundle == Array(pem.utf8) && t.trust?.insecure == false)
        let v = try #require(
            try load(env: ["OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE": ca])
                .tracing)
        #expect(v.caFile == ca)
        // The traces-specific variable wins; an http endpoint ignores both (as OTel SDKs do).
        #expect(
            try load(env: [
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent",
            ]).tracing?.trust == nil)
        #expect(
            error(env: [
                "OTEL_EXPORTER_OTLP_ENDPOINT": "https://c:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE": ca,
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": dir.appendingPathComponent("none.pem").path,
            ]).contains("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"))
        #expect(error("[tracing]\nendpoint = \"http://c:4318\"\nca_file = \"\(ca)\"\n").contains("tracing.ca_file"))
        let notPEM = dir.appendingPathComponent("x.pem").path
        try "hello".write(toFile: notPEM, atomically: true, encoding: .utf8)
        #expect(
            error("[tracing]\nendpoint = \"https://c:4318\"\nca_file = \"\(notPEM)\"\n").contains(
                "holds no PEM certificate"))
    }
}
