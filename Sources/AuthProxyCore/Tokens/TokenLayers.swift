/// The two token layers a request may carry (an `oauth2` credential with `layer = "gateway"` in front of the
/// service credential), decided without I/O: which token is obtained next, which layer a response rejects, and
/// which attempt a rejection counts as.
enum TokenLayers {
    enum Next: Equatable {
        /// Obtain this layer's token (from the cache or the token service), then ask again.
        case obtain(Credential.Layer)
        /// Every token is in hand: start the transfer.
        case transfer
    }

    /// The gateway's token first: the service's token fetch itself may have to pass the gateway, and a request
    /// without the gateway's token would never reach the service.
    static func next(gatewayNeedsToken: Bool, serviceNeedsToken: Bool) -> Next {
        if gatewayNeedsToken { return .obtain(.gateway) }
        return serviceNeedsToken ? .obtain(.service) : .transfer
    }

    /// What a response head means for the injected tokens. `inspect`: the head is the final one of a transfer
    /// whose tokens may be judged; `gatewayRejects`: the gateway credential's rejection signal matches it;
    /// `inspectsService`: the service's token may be refreshed; `service`: the service layer's own reading. The
    /// gateway answers before the service is reached, so its rejection is read first.
    static func inspection(
        inspect: Bool, gatewayRejects: Bool, inspectsService: Bool,
        service: () -> ExchangeStateMachine.Inspection
    ) -> (inspection: ExchangeStateMachine.Inspection, layer: Credential.Layer) {
        guard inspect else { return (.none, .service) }
        if gatewayRejects { return (.rejectedByStatus, .gateway) }
        return (inspectsService ? service() : .none, .service)
    }

    /// The attempt a layer's rejection counts as for ``TokenRetryPolicy``: each layer is refreshed once, so a
    /// gateway's rejection and then the service's, on the retry, are two first rejections.
    static func attempt(layerRetried: Bool) -> Int { layerRetried ? 2 : 1 }
}
