import ArgumentParser
import AuthProxyCore
import Dispatch
import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#endif

@main
struct AuthProxyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "authproxy",
        abstract: "An authenticating HTTP forward proxy for ArcGIS and OGC services.",
        version: "authproxy \(AuthProxyVersion.string)",
        subcommands: [
            Serve.self, Check.self, Doctor.self, Login.self, SignOutCommand.self, CA.self, CaptureCommand.self,
            PacWorkerCommand.self,
        ],
        defaultSubcommand: Serve.self
    )
}

struct ConfigOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: "Path to proxy.conf (TOML).")
    var config: String = "proxy.conf"

    static func load(_ path: String, acceptUnfilled: Bool = false) throws -> ProxyConfig {
        var o = ConfigOptions()
        o.config = path
        return try o.load(acceptUnfilled: acceptUnfilled)
    }

    /// Loads and validates the file; on error prints the problem and exits with status 2.
    func load(acceptUnfilled: Bool = false) throws -> ProxyConfig {
        do {
            var loader = ConfigLoader()
            loader.acceptUnfilled = acceptUnfilled
            return try loader.load(path: config)
        } catch {
            printError("authproxy: \(config): \(error)")
            throw ExitCode(2)
        }
    }
}

/// The PAC worker (``PacWorker``): started by the proxy itself, never by hand.
struct PacWorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pac-worker", abstract: "Runs a PAC file for the proxy (internal).", shouldDisplay: false)

    @Option(name: .long) var memoryMib: Int
    @Option(name: .long) var seconds: Int
    @Option(name: .long) var parent: Int32

    func run() throws {
        let status = PacWorker.run(memoryMiB: memoryMib, seconds: seconds, parent: parent)
        if status != 0 { throw ExitCode(status) }
    }
}

struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the proxy (the default command).")

    @OptionGroup var options: ConfigOptions

    @Option(
        name: .long,
        help: "Address to listen on, e.g. 127.0.0.1:3128 or [::1]:3128 (repeatable; replaces [proxy] listen).")
    var listen: [String] = []

    @Option(name: .long, help: "Log format: text or json (overrides [log] format).")
    var logFormat: String?

    @Option(
        name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical (overrides [log] level).")
    var logLevel: String?

    func run() throws {
        // A SIGHUP during start-up must not kill the process (the default action): it is handled once serving.
        signal(SIGHUP, SIG_IGN)
        var overrides = ConfigSource.Overrides()
        if !listen.isEmpty {
            overrides.listen = try listen.map { s in
                guard let a = ListenAddress.parse(s) else {
                    printError("authproxy: --listen \(s): not an address like 127.0.0.1:3128 or [::1]:3128")
                    throw ExitCode(2)
                }
                return a
            }
        }
        if let f = logFormat {
            guard let v = LogFormat(rawValue: f) else {
                printError("authproxy: --log-format must be text or json")
                throw ExitCode(2)
            }
            overrides.logFormat = v
        }
        if let l = logLevel {
            guard let v = Logger.Level(rawValue: l) else {
                printError(
                    "authproxy: --log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))"
                )
                throw ExitCode(2)
            }
            overrides.logLevel = v
        }
        // The same source is read again by every reload, with the same overrides.
        let source = ConfigSource(path: options.config, overrides: overrides)
        let config: ProxyConfig
        let inputs: ConfigInputs
        do {
            (config, inputs) = try source.load()
        } catch {
            printError(
                error.key == "--listen" ? "authproxy: \(error.message)" : "authproxy: \(options.config): \(error)")
            throw ExitCode(2)
        }
        let level = LiveLogLevel(config.logLevel)
        let format = config.logFormat
        LoggingSystem.bootstrap { label in ProxyLogHandler(label: label, level: level, format: format) }
        let logger = Logger(label: "authproxy")

        ProxyServer.initializeLibraries()
        let server = ProxyServer(config: config, logger: logger, source: source, inputs: inputs, logLevel: level)

        let grace = config.shutdownGraceSeconds
        nonisolated(unsafe) var stopping = false
        // On the main queue: SIGTERM/SIGINT, and POST /quitquitquit (which starts the same shutdown).
        let stop: @Sendable (String, Bool) -> Void = { trigger, signalled in
            if stopping {
                // A second signal is an operator insisting; a second quitquitquit is a sidecar repeating itself.
                guard signalled else { return }
                logger.warning("second signal: exiting now")
                Glibc.exit(1)
            }
            stopping = true
            logger.notice("shutting down", metadata: ["grace_seconds": "\(grace)", "trigger": "\(trigger)"])
            server.shutdown(grace: grace) {
                logger.notice("stopped")
                Glibc.exit(0)
            }
        }
        server.onShutdownRequest { trigger in DispatchQueue.main.async { stop(trigger, false) } }
        // The signal sources are registered before the proxy listens: libdispatch registers a source after
        // `resume()`, on its manager thread, and a signal that came before that met SIG_IGN and was lost — a SIGHUP
        // or SIGTERM sent as soon as /healthz answered did nothing (seen in CI under load). Each source's
        // registration handler is waited for. A SIGHUP that comes while the proxy starts waits for the start.
        var sources: [any DispatchSourceSignal] = []
        let registered = DispatchGroup()
        let started = DispatchGroup()
        started.enter()
        // SIGTERM/SIGINT are handled on the main queue; their sources are on a queue of their own so that their
        // registration can be waited for before dispatchMain() runs the main queue.
        let signalQueue = ProxyQueue.make("authproxy.signals")
        for sig in [SIGTERM, SIGINT] {
            signal(sig, SIG_IGN)
            let s = DispatchSource.makeSignalSource(signal: sig, queue: signalQueue)
            s.setEventHandler { DispatchQueue.main.async { stop(sig == SIGTERM ? "SIGTERM" : "SIGINT", true) } }
            registered.enter()
            s.setRegistrationHandler { registered.leave() }
            s.resume()
            sources.append(s)
        }
        // SIGHUP reloads the configuration, off the main queue so that a slow reload (a kinit) never delays
        // the handling of SIGTERM.
        let hup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: ProxyQueue.make("authproxy.sighup"))
        hup.setEventHandler {
            started.wait()
            if !stopping { server.reload(trigger: .signal) }
        }
        registered.enter()
        hup.setRegistrationHandler { registered.leave() }
        hup.resume()
        sources.append(hup)
        _ = registered.wait(timeout: .now() + 5)
        do {
            try server.start()
        } catch {
            logger.critical("\(error)")
            // A state file the proxy must not touch (wrong state_key, unreadable) is a configuration error.
            throw ExitCode(error.isConfigurationError ? 2 : 1)
        }
        started.leave()
        logger.notice(
            "authproxy started",
            metadata: [
                "version": "\(AuthProxyVersion.string)", "workers": "\(config.workers)", "cpus": "\(CPUBudget.current)",
            ])
        withExtendedLifetime(sources) { dispatchMain() }
    }
}

struct Check: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Validate the configuration and print a summary (no secrets); exit non-zero on error.")

    @OptionGroup var options: ConfigOptions

    func run() throws {
        let c = try options.load()
        // What `serve` would refuse beyond the file itself, checked before anything is printed as valid.
        var interception = c.tls.caCert == nil ? "off (no CA)" : "off (intercept = none)"
        if c.tls.enabled, let certPath = c.tls.caCert, let keyPath = c.tls.caKey {
            ProxyServer.initializeLibraries()
            do throws(TLSError) {
                _ = try CertificateAuthority.load(certPath: certPath, keyPath: keyPath)
                interception = "on for CONNECT to matched hosts, CA \(certPath) with its key \(keyPath)"
            } catch {
                printError("authproxy: \(options.config): [tls]: \(error) (create the CA with `authproxy ca init`)")
                throw ExitCode(2)
            }
        }
        // The listener's own TLS (an https:// proxy URL): its certificate files must load, as `serve` needs.
        let proxyTLS = ProxyTLSSource.choose(c)
        if case .files(let cert, let key) = proxyTLS {
            ProxyServer.initializeLibraries()
            do throws(TLSError) {
                _ = try ProxyTLSServer(certPath: cert, keyPath: key)
            } catch {
                printError("authproxy: \(options.config): [proxy] tls_cert, tls_key: \(error)")
                throw ExitCode(2)
            }
        }
        // The token state must open with this configuration, or `serve` would refuse to start.
        let file = TokenStateFile(directory: c.stateDir, secret: c.stateKey)
        let state: String
        var signIns: [String] = []
        do throws(StateError) {
            let contents = try file.load()
            state = "\(file.path): \(contents.tokens.count) token(s), \(contents.refreshTokens.count) refresh token(s)"
            signIns = TokenService.signInSummaries(contents, credentials: c.credentials)
        } catch {
            let hint = error.kind == .damaged ? " (serve would rename it aside and start without saved tokens)" : ""
            printError("authproxy: \(options.config): token state: \(error)\(hint)")
            throw ExitCode(2)
        }
        print("configuration \(options.config) is valid")
        print("  listen:                   \(c.listen.map(\.description).joined(separator: ", "))")
        print("  connect_ports:            \(c.connectPorts.sorted().map(String.init).joined(separator: ", "))")
        print("  unmatched:                \(c.unmatched.rawValue)")
        print("  state_dir:                \(c.stateDir)")
        print("  upstream_timeout_seconds: \(c.upstreamTimeoutSeconds)")
        print("  header_timeout_seconds:   \(c.headerTimeoutSeconds)")
        print("  idle_timeout_seconds:     \(c.idleTimeoutSeconds)")
        print("  shutdown_grace_seconds:   \(c.shutdownGraceSeconds)")
        print(
            "  workers:                  \(c.workers)\(c.workersSet ? "" : " (default: 2 per usable CPU, at least 4; \(CPUBudget.current))")"
        )
        print("  http_client:              \(c.httpClient.rawValue) (plain http:// without a network credential)")
        print(
            "  max_connections:          \(c.maxConnections) (per client address: \(c.effectiveMaxConnectionsPerClient))"
        )
        print(
            "  allow_clients:            \(c.allowClients.map(\.description).joined(separator: ", "))\(c.allowClientsSet ? "" : " (default)")"
        )
        print(
            "  deny_destinations:        \(c.denyDestinations.isEmpty ? "none" : c.denyDestinations.map(\.description).joined(separator: ", "))"
        )
        print(
            "  proxy authentication:     \(c.clients.isEmpty ? "off" : "\(c.clients.count) client(s): " + c.clients.map { cl in cl.name + (cl.credentials.map { " [\($0.joined(separator: ", "))]" } ?? "") }.joined(separator: "; "))"
        )
        let up = c.upstreamProxy
        if up.isConfigured {
            print(
                "  upstream_proxy:           \(up.parents.map(\.url).joined(separator: ", "))\(up.parents.count > 1 ? " (tried in order; a failed one is skipped for \(up.backoffSeconds) s)" : "")"
            )
            print("    credential:             \(up.credentialName ?? "none")")
            print(
                "    no_proxy:               \(up.noProxy.isEmpty ? "none" : "\(up.noProxy.entries.count) entr\(up.noProxy.entries.count == 1 ? "y" : "ies")")"
            )
            for p in up.parents where p.scheme == .http {
                print(
                    "    note: \(p.url) is plain http: https:// destinations go through it inside CONNECT tunnels (end-to-end TLS, or authproxy's interception), http:// ones in absolute form"
                )
            }
        } else {
            print("  upstream_proxy:           none (every destination is reached directly)")
        }
        print("  log:                      level=\(c.logLevel.rawValue) format=\(c.logFormat.rawValue)")
        print("  state_key:                \(c.stateKey == nil ? "not set (token state stored in clear)" : "set")")
        print(
            "  cluster:                  \(c.cluster.map { "\($0.endpoint.redacted), key_prefix \($0.keyPrefix), timeout_ms \($0.timeoutMillis)\($0.required ? ", required" : "") (tokens shared through Redis)" } ?? "off (this process alone)")"
        )
        print("  max_replay_bytes:         \(c.maxReplayBytes)")
        print("  upstream_retries:         \(c.upstreamRetries)")
        print("  max_retry_wait_seconds:   \(c.maxRetryWaitSeconds)")
        print("  retry_budget_percent:     \(c.retryBudgetPercent)")
        print("  get_as_post_above_bytes:  \(c.getAsPostAboveBytes)")
        print(
            "  pac_address:              \(c.pacAddress ?? "not set (/proxy.pac names the proxy by the Host it was fetched with)")"
        )
        print("  pac_fallback:             \(c.pacFallback.rawValue)")
        print("  credentials:              \(c.credentials.count)")
        var warnings: [String] = []
        for cred in c.credentials {
            let limit = cred.rateLimit.map { ", rate_limit=\($0.requests)/\($0.perSeconds)s" } ?? ""
            let placement =
                cred.kind.isToken
                ? ", token_placement=\(cred.kind.placementDescription ?? cred.placement.rawValue)\(cred.overrideClientToken ? ", override_client_token" : "")"
                : ""
            let blind = cred.intercept ? "" : ", intercept=false"
            let layer = cred.layer == .gateway ? ", layer=gateway (applied with the service credential)" : ""
            let binding = cred.kind.checkAttributes
            let refresh = cred.isRefreshable && cred.refresh == .onDemand ? ", refresh=on_demand" : ""
            print(
                "    - \(cred.name) (\(cred.kind.typeName)\(layer)\(binding)\(placement)\(refresh)\(limit)\(blind)): \(cred.match.map(\.description).joined(separator: ", "))"
            )
            for prefix in TokenService.unprefetchable(cred) {
                warnings.append(
                    "credential '\(cred.name)': prefetch cannot fetch a token ahead for match \(prefix) (a host alone names no server root or portal): give the root, e.g. \(prefix)/arcgis or \(prefix)/portal; /readyz does not wait for it"
                )
            }
            if let w = CertificateRenewal.expiryWarning(
                cred, now: Int64(time(nil)) * 1000, warningDays: c.expiryWarningDays)
            {
                warnings.append(w)
            }
            for (name, value) in cred.kind.statusDetails { print("        \(name): \(value)") }
            warnings += cred.kind.expiryWarnings(
                credential: cred.name, now: Int64(time(nil)) * 1000, warningDays: c.expiryWarningDays)
        }
        warnings += c.upstreamProxy.warnings
        warnings += TokenBinding.warnings(c.credentials, clustered: c.cluster != nil, upstream: c.upstreamProxy)
        for w in warnings { printError("authproxy: warning: \(w)") }
        print("  interception ([tls]):     \(interception)")
        print("  proxy over TLS:           \(proxyTLS.summary)")
        if !c.tls.noIntercept.isEmpty {
            print(
                "  no_intercept ([tls]):     \(c.tls.noIntercept.map(\.description).joined(separator: ", ")) (blind tunnels on connect_ports)"
            )
        }
        print("  token state:              \(state)")
        for line in signIns { print("    \(line)") }
        if let why = file.unwritableReason() {
            // serve starts all the same, but every token save fails and tokens are fetched again after a restart.
            printError("authproxy: warning: state_dir \(c.stateDir): \(why); tokens will not be saved")
        }
    }
}

struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Probe a service and print the [[credential]] blocks it needs (summary on stderr, TOML on stdout).",
        discussion: """
            Fetches <server root>/rest/info?f=json, requests URL without credentials, and for https checks the \
            certificate and whether the server asks for a client certificate. Exit status: 0 when the probe \
            worked (whatever it found), 1 when the service cannot be reached, 2 for a bad URL or configuration.
            """)

    @Argument(help: "The service URL, e.g. https://gis.example.com/arcgis/rest/services/Roads/FeatureServer/0")
    var url: String

    @Option(
        name: .shortAndLong,
        help:
            "proxy.conf whose server-trust (and client certificate) settings the probe uses, and whose credentials count as configured."
    )
    var config: String?

    @Option(name: .long, help: "Seconds each connection and request may take.")
    var timeout: Int = 15

    func run() throws {
        guard timeout > 0, timeout <= 3600 else {
            printError("authproxy: doctor: --timeout must be 1…3600 seconds")
            throw ExitCode(2)
        }
        // Blocks proposed by earlier runs may not be filled in yet (see ConfigLoader.acceptUnfilled).
        let loaded = try config.map { try ConfigOptions.load($0, acceptUnfilled: true) }
        ProxyServer.initializeLibraries()
        do throws(DoctorError) {
            var probe = DoctorProbe(url: url, timeoutSeconds: timeout, credentials: loaded?.credentials ?? [])
            if let u = loaded?.upstreamProxy { probe.upstreamProxy = u }
            let report = try probe.run()
            printError(report.summary.hasSuffix("\n") ? String(report.summary.dropLast()) : report.summary)
            print(report.toml, terminator: "")
        } catch {
            printError("authproxy: doctor: \(error)")
            throw ExitCode(error.cause == .badURL ? 2 : 1)
        }
    }
}

func printError(_ s: String) {
    var line = s + "\n"
    line.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
}

struct Login: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Sign in for an oauth-user or oauth2 (grant = \"authorization_code\") credential (authorization code + PKCE) and store its refresh token."
    )

    @OptionGroup var options: ConfigOptions

    @Option(name: .long, help: "Name of the oauth-user or oauth2 credential.")
    var credential: String

    @Option(name: .long, help: "Seconds to wait for the browser redirect.")
    var timeout: Int = 300

    func run() throws {
        let config = try options.load()
        guard let c = config.credentials.first(where: { $0.name == credential }) else {
            printError("authproxy: no credential named '\(credential)' in \(options.config)")
            throw ExitCode(2)
        }
        ProxyServer.initializeLibraries()
        // The key must open the state file before the authorization code is spent (a code is single-use).
        do throws(StateError) {
            _ = try TokenStateFile(directory: config.stateDir, secret: config.stateKey).load()
        } catch  where error.kind == .wrongKey || error.kind == .unreadable {
            printError("authproxy: login: \(error)")
            throw ExitCode(2)
        } catch {
            printError("authproxy: warning: \(error); it will be renamed aside when the refresh token is stored")
        }
        do {
            let fetch = SyncFetch(
                timeoutSeconds: config.upstreamTimeoutSeconds, credentials: config.credentials,
                upstreamProxy: config.upstreamProxy)
            let login = try c.kind.signInFlow(c, fetch: fetch)
            let listener = try login.loopbackPort.map { (port: Int) throws(StateError) in
                try LoopbackRedirect(port: port)
            }
            printNow("Open this URL in a browser and sign in:\n\n  \(login.authorizeURL)\n")
            let code: String
            if let listener, let port = login.loopbackPort {
                printNow("Waiting for the redirect on http://127.0.0.1:\(port)/ …")
                let target = try listener.awaitRequest(timeoutSeconds: timeout)
                code = try login.code(fromCallback: target)
            } else {
                printNow("Paste the authorization code shown by the portal or identity provider, then press Enter:")
                guard let line = readLine(strippingNewline: true), !line.trimmingCharacters(in: .whitespaces).isEmpty
                else {
                    printError("authproxy: no code entered")
                    throw ExitCode(1)
                }
                code = line.trimmingCharacters(in: .whitespaces)
            }
            let grant = try login.exchange(code: code, fetch: fetch)
            if let aside = try TokenService.storeRefreshToken(
                c, config: config, refreshToken: grant.refreshToken,
                expires: grant.refreshExpires, username: grant.username)
            {
                printError("authproxy: warning: the damaged token state file was renamed to \(aside)")
            }
            if config.cluster != nil {
                try ClusterSignIn.store(
                    c, config: config, refreshToken: grant.refreshToken,
                    expires: grant.refreshExpires, username: grant.username)
                printNow("The refresh token is in the fleet's Redis ([cluster]): every replica uses it.")
            }
            printNow(
                "Signed in\(grant.username.map { " as \($0)" } ?? ""); refresh token stored for credential '\(c.name)'."
            )
            printNow("A running proxy picks it up with its next request for this credential.")
        } catch let e as StateError {
            printError("authproxy: login failed: \(e)")
            throw ExitCode(e.kind == .wrongKey || e.kind == .unreadable ? 2 : 1)
        }
    }
}

struct SignOutCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signout",
        abstract: "Revoke OAuth tokens at the portal and delete cached tokens (all credentials, or one).")

    @OptionGroup var options: ConfigOptions

    @Option(name: .long, help: "Only this credential.")
    var credential: String?

    func run() throws {
        let config = try options.load()
        ProxyServer.initializeLibraries()
        do throws(StateError) {
            for line in try SignOut.run(
                config: config, credentialName: credential,
                fetch: SyncFetch(
                    timeoutSeconds: config.upstreamTimeoutSeconds, credentials: config.credentials,
                    upstreamProxy: config.upstreamProxy))
            {
                print(line)
            }
        } catch {
            printError("authproxy: signout failed: \(error)")
            throw ExitCode(error.kind == .wrongKey || error.kind == .unreadable ? 2 : 1)
        }
    }
}

/// Writes a line to stdout at once (unbuffered): `login` output must reach a pipe before it blocks.
func printNow(_ s: String) {
    var line = s + "\n"
    line.withUTF8 { _ = write(1, $0.baseAddress, $0.count) }
}

struct CA: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ca", abstract: "Manage the CA that signs certificates for intercepted HTTPS hosts.",
        subcommands: [CAInit.self, CAExport.self])
}

struct CAInit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init", abstract: "Create DIR/ca.pem and DIR/ca.key (EC P-256).")

    @Option(name: .long, help: "Directory for ca.pem and ca.key.")
    var dir: String

    @Flag(name: .long, help: "Add X.509 Name Constraints limiting the CA to the hosts the configuration matches.")
    var constrain = false

    @Option(name: .shortAndLong, help: "proxy.conf whose credential hosts --constrain permits.")
    var config: String?

    func run() throws {
        ProxyServer.initializeLibraries()
        var permitted: [String]? = nil
        if constrain {
            guard let path = config else {
                printError("authproxy: --constrain needs --config to know which hosts to permit")
                throw ExitCode(2)
            }
            let cfg = try ConfigOptions.load(path)
            let hosts = cfg.credentials.flatMap { $0.match.map { $0.wildcard ? "*." + $0.host : $0.host } }
            guard !hosts.isEmpty else {
                printError("authproxy: \(path) has no credentials, so --constrain would permit nothing")
                throw ExitCode(2)
            }
            permitted = hosts
        }
        do {
            let ca = try CertificateAuthority.create(commonName: "authproxy interception CA", permitted: permitted)
            let paths = try ca.write(toDirectory: dir)
            print("Wrote \(paths.cert) (certificate) and \(paths.key) (private key, mode 0600).")
            if let permitted {
                print("The CA is name-constrained to: \(Set(permitted).sorted().joined(separator: ", "))")
            }
            print(trustInstructions(paths.cert))
        } catch {
            printError("authproxy: \(error)")
            throw ExitCode(1)
        }
    }
}

struct CAExport: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "export", abstract: "Print the CA certificate (PEM).")

    @Option(name: .long, help: "Directory holding ca.pem.")
    var dir: String?

    @Option(name: .shortAndLong, help: "proxy.conf whose [tls] ca_cert to print.")
    var config: String?

    func run() throws {
        let path: String
        if let dir {
            path = dir + "/ca.pem"
        } else if let config, let cert = try ConfigOptions.load(config).tls.caCert {
            path = cert
        } else {
            printError("authproxy: give --dir DIR or --config FILE (with [tls] ca_cert)")
            throw ExitCode(2)
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8), text.contains("BEGIN CERTIFICATE") else {
            printError("authproxy: cannot read a certificate from \(path)")
            throw ExitCode(1)
        }
        print(text, terminator: text.hasSuffix("\n") ? "" : "\n")
    }
}

func trustInstructions(_ cert: String) -> String {
    """

    Make clients trust it (only clients that go through this proxy need it):
      curl / libcurl:      export CURL_CA_BUNDLE=\(cert)         (or curl --cacert \(cert))
      Python requests:     export REQUESTS_CA_BUNDLE=\(cert)
      GDAL / QGIS:         export GDAL_CURL_CA_BUNDLE=\(cert)    (or CURL_CA_BUNDLE)
      OpenSSL-based tools: export SSL_CERT_FILE=\(cert)
      Node.js:             export NODE_EXTRA_CA_CERTS=\(cert)
      Debian/Ubuntu:       cp \(cert) /usr/local/share/ca-certificates/authproxy.crt && update-ca-certificates
      Windows / ArcGIS Pro: certutil -addstore -f Root ca.pem   (or import it in the
                           "Trusted Root Certification Authorities" store with certmgr.msc)
    Note: those bundle variables replace the default CA list for that client; append the system bundle if the
    client also talks to hosts the proxy does not intercept.
    Then set in proxy.conf:
      [tls]
      ca_cert = "\(cert)"
      ca_key  = "\((cert as NSString).deletingLastPathComponent)/ca.key"
    """
}
