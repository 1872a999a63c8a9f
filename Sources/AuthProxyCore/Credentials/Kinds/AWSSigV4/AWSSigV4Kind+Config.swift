/// The `[[credential]]` keys of `type = "aws-sigv4"` (docs/configuration.md, docs/credentials-cloud.md).
extension AWSSigV4Kind {
    public static func parse(_ entry: inout TableReader, name: String) throws(ConfigError) -> AWSSigV4Kind {
        func fail(_ key: String, _ message: String) -> ConfigError {
            ConfigError(
                key: entry.path + (key.isEmpty ? "" : "." + key), line: entry.line(of: key) ?? entry.table.line,
                message)
        }
        // A region or service name goes into the credential scope (`…/us-east-1/s3/aws4_request`): AWS's names are
        // lower-case letters, digits and `-`.
        func checkScopeName(_ key: String, _ v: String?) throws(ConfigError) {
            guard let v else { return }
            guard !v.isEmpty,
                v.utf8.allSatisfy({ ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D })
            else { throw fail(key, "\(entry.shown(key, v)) is not an AWS name (lower-case letters, digits and '-')") }
        }
        // Keys and tokens go into request heads as they are: visible ASCII, never quoted in an error.
        func checkSendable(_ key: String, _ v: String?) throws(ConfigError) {
            if let v, let why = TokenSyntax.arcgisProblem(v) { throw fail(key, "the value (not shown): \(why)") }
        }

        let region = try entry.string("region")
        try checkScopeName("region", region)
        guard let region else {
            throw entry.missing("region", "credential '\(name)' of type aws-sigv4 needs region (e.g. \"eu-central-1\")")
        }
        let configuredService = try entry.string("service")
        try checkScopeName("service", configuredService)
        let service = configuredService ?? "s3"
        let maxBody =
            try entry.int("max_signed_body_bytes", range: 0...(64 * 1024 * 1024)) ?? Self.defaultMaxSignedBodyBytes

        let accessKeyID = try entry.string("access_key_id")
        let secretKey = try entry.string("secret_access_key")
        try checkSendable("secret_access_key", secretKey)
        let sessionToken = try entry.string("session_token")
        try checkSendable("session_token", sessionToken)
        let roleARN = try entry.string("role_arn")
        let tokenFile = try entry.string("web_identity_token_file")
        let sessionName = try entry.string("role_session_name")
        let endpoint = try entry.string("sts_endpoint")
        let duration = try entry.int("duration_seconds", range: 900...43200)

        let hasStatic = accessKeyID != nil || secretKey != nil || sessionToken != nil
        let hasWeb = roleARN != nil || tokenFile != nil || sessionName != nil || endpoint != nil || duration != nil
        let keys: Keys
        switch (hasStatic, hasWeb) {
        case (true, true):
            throw fail(
                "",
                "credential '\(name)' of type aws-sigv4 takes either access_key_id + secret_access_key (static keys) or role_arn + web_identity_token_file (web identity), not both"
            )
        case (false, false):
            throw entry.missing(
                "access_key_id",
                "credential '\(name)' of type aws-sigv4 needs access_key_id + secret_access_key, or role_arn + web_identity_token_file"
            )
        case (true, false):
            guard let accessKeyID, !accessKeyID.isEmpty else {
                throw entry.missing("access_key_id", "credential '\(name)' of type aws-sigv4 needs access_key_id")
            }
            // It is written into `Credential=<id>/<scope>`: letters and digits, as AWS issues them.
            guard accessKeyID.utf8.allSatisfy({ $0 < 0x80 && SigV4Encoding.isUnreserved($0) }) else {
                throw fail("access_key_id", "\(entry.shown("access_key_id", accessKeyID)) is not an AWS access key id")
            }
            guard let secretKey, !secretKey.isEmpty else {
                throw entry.missing(
                    "secret_access_key", "credential '\(name)' of type aws-sigv4 needs secret_access_key")
            }
            if sessionToken?.isEmpty == true { throw fail("session_token", "is empty") }
            keys = .fixed(
                AWSCredentials(accessKeyID: accessKeyID, secretAccessKey: secretKey, sessionToken: sessionToken))
        case (false, true):
            guard let roleARN, !roleARN.isEmpty else {
                throw entry.missing(
                    "role_arn", "credential '\(name)' of type aws-sigv4 with web identity needs role_arn")
            }
            guard roleARN.hasPrefix("arn:"), roleARN.contains(":role/") else {
                throw fail(
                    "role_arn",
                    "\(entry.shown("role_arn", roleARN)) is not an IAM role ARN (arn:aws:iam::<account>:role/<name>)")
            }
            guard let tokenFile, !tokenFile.isEmpty else {
                throw entry.missing(
                    "web_identity_token_file",
                    "credential '\(name)' of type aws-sigv4 with role_arn needs web_identity_token_file")
            }
            // Checked now so a wrong path fails at load; read again at every exchange (it is rotated).
            guard readTextFile(tokenFile) != nil else {
                throw fail(
                    "web_identity_token_file",
                    "cannot read \(entry.shown("web_identity_token_file", tokenFile)): \(lastErrorString())")
            }
            if let sessionName, !STSWebIdentity.isValidSessionName(sessionName) {
                throw fail(
                    "role_session_name",
                    "\(entry.shown("role_session_name", sessionName)) is not a session name (2 to 64 of letters, digits and _+=,.@-)"
                )
            }
            let url = endpoint ?? STSWebIdentity.defaultEndpoint(region: region)
            guard let parsed = HTTPURL.parse(url) else {
                throw fail("sts_endpoint", "\(entry.shown("sts_endpoint", url)) is not an http(s) URL")
            }
            keys = .webIdentity(
                STSWebIdentity(
                    roleARN: roleARN, tokenFile: tokenFile,
                    sessionName: sessionName ?? STSWebIdentity.sessionName(forCredential: name),
                    endpoint: parsed.string, durationSeconds: duration))
        }
        return AWSSigV4Kind(name: name, region: region, service: service, keys: keys, maxSignedBodyBytes: maxBody)
    }
}
