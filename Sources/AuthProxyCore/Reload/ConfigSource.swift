import Logging

/// Where the running configuration comes from, so a reload reads it the same way the start did: the file, the
/// loader (with the environment for `${ENV}` values) and the command-line overrides of `serve`, which keep
/// applying on every reload.
public struct ConfigSource: Sendable {
    public var path: String
    public var loader: ConfigLoader
    public var overrides: Overrides

    /// `serve --listen/--log-level/--log-format`: they replace what the file says, at start and on reload.
    public struct Overrides: Sendable {
        public var listen: [ListenAddress]? = nil
        public var logLevel: Logger.Level? = nil
        public var logFormat: LogFormat? = nil

        public init(listen: [ListenAddress]? = nil, logLevel: Logger.Level? = nil, logFormat: LogFormat? = nil) {
            self.listen = listen
            self.logLevel = logLevel
            self.logFormat = logFormat
        }
    }

    public init(path: String, loader: ConfigLoader = ConfigLoader(), overrides: Overrides = Overrides()) {
        self.path = path
        self.loader = loader
        self.overrides = overrides
    }

    /// Reads and validates the file, applies the overrides, and checks the result for an open relay (a
    /// `--listen` override may expose a configuration that was safe on loopback).
    public func load() throws(ConfigError) -> (config: ProxyConfig, inputs: ConfigInputs) {
        var loader = loader
        loader.listenOverride = overrides.listen
        var (config, inputs) = try loader.loadWithInputs(path: path)
        if let l = overrides.listen { config.listen = l }
        if let l = overrides.logLevel { config.logLevel = l }
        if let f = overrides.logFormat { config.logFormat = f }
        if overrides.listen != nil, let problem = config.openRelayProblem {
            throw ConfigError(key: "--listen", line: nil, problem)
        }
        return (config, inputs)
    }
}
