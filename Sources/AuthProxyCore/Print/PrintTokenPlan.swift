/// Which layers of a print job's web map get which credential's token, and which tokens go in once obtained: the
/// rules of `print_services`, pure.
enum PrintTokenPlan {
    /// A layer that gets a token: the credential matching its URL lists the print service.
    struct Wanted {
        var layer: WebMapLayers.Layer
        var credential: Credential
        /// The layer URL, which the token is obtained for (a federated server's layer gets that server's token).
        var target: URLTarget
    }

    /// The layers without a token of their own whose URL a token credential matches that lists the print service at
    /// `printTarget`. A layer whose credential does not list it, or that no credential matches, is left alone.
    static func wanted(_ map: WebMapLayers, printTarget: URLTarget, store: CredentialStore) -> [Wanted] {
        var out: [Wanted] = []
        for layer in map.layers where !layer.hasToken {
            guard let target = HTTPURL.parse(layer.url)?.target, let c = store.tokenCredential(for: target),
                lists(c, printTarget)
            else { continue }
            out.append(Wanted(layer: layer, credential: c, target: target))
        }
        return out
    }

    /// Whether credential `c` lets the print service at `printTarget` receive its tokens.
    static func lists(_ c: Credential, _ printTarget: URLTarget) -> Bool {
        c.printServices.contains { $0.matches(printTarget) }
    }

    /// A token that was obtained and is not inserted, and why (for the log; never the token).
    struct Skipped: Equatable {
        var credential: String
        var layer: String
        var why: String
    }

    /// What goes into the web map.
    struct Insertions {
        var tokens: [(layer: WebMapLayers.Layer, token: String)] = []
        /// The `Referer` the print request must carry for the tokens bound to one (the print service sends its
        /// request's `Referer` with the layer requests); nil: none needed.
        var referer: String? = nil
        var skipped: [Skipped] = []
    }

    /// Decides the insertions from the tokens obtained. `requestReferer`: the `Referer` the print request carries
    /// anyway (its own credential's binding), which every referer-bound token must then share.
    static func insertions(_ got: [(Wanted, IssuedToken)], requestReferer: String?) -> Insertions {
        var result = Insertions()
        var referer = requestReferer
        for (w, t) in got {
            if t.ssl, w.target.scheme == "http" {
                result.skipped.append(
                    Skipped(
                        credential: w.credential.name, layer: w.target.origin,
                        why: "the token service marked its token ssl:true and the layer URL is http://"))
                continue
            }
            if let r = t.referer {
                if let needed = referer, needed != r {
                    result.skipped.append(
                        Skipped(
                            credential: w.credential.name, layer: w.target.origin,
                            why:
                                "its token is bound to another Referer than the print request carries (set the same referer on the credentials whose layers are printed together)"
                        ))
                    continue
                }
                referer = r
            }
            result.tokens.append((w.layer, t.value))
        }
        result.referer = referer == requestReferer ? nil : referer
        return result
    }
}
