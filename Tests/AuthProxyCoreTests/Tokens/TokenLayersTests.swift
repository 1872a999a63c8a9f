import Testing

@testable import AuthProxyCore

/// The order of a gateway token layer and the service's (``TokenLayers``).
@Suite struct TokenLayersTests {
    @Test(arguments: [
        (true, true, TokenLayers.Next.obtain(.gateway)),
        (true, false, .obtain(.gateway)),
        (false, true, .obtain(.service)),
        (false, false, .transfer),
    ])
    func theGatewaysTokenComesFirst(_ gateway: Bool, _ service: Bool, _ expected: TokenLayers.Next) {
        #expect(TokenLayers.next(gatewayNeedsToken: gateway, serviceNeedsToken: service) == expected)
    }

    @Test func aRejectionBelongsToTheGatewayWhenItsSignalMatchesFirst() {
        var asked = 0
        func service() -> ExchangeStateMachine.Inspection {
            asked += 1
            return .holdBody
        }
        // Not a head to judge: nothing, and the service is not asked.
        #expect(
            TokenLayers.inspection(inspect: false, gatewayRejects: true, inspectsService: true, service: service)
                == (.none, .service))
        // The gateway's signal: its layer, and the service's reading is not needed.
        #expect(
            TokenLayers.inspection(inspect: true, gatewayRejects: true, inspectsService: true, service: service)
                == (.rejectedByStatus, .gateway))
        #expect(asked == 0)
        // Otherwise the service's own reading, when its token may be refreshed.
        #expect(
            TokenLayers.inspection(inspect: true, gatewayRejects: false, inspectsService: true, service: service)
                == (.holdBody, .service))
        #expect(
            TokenLayers.inspection(inspect: true, gatewayRejects: false, inspectsService: false, service: service)
                == (.none, .service))
        #expect(asked == 1)
    }

    @Test func eachLayerIsRetriedOnce() {
        #expect(TokenLayers.attempt(layerRetried: false) == 1)
        #expect(TokenLayers.attempt(layerRetried: true) == 2)
    }
}
