extension ExchangeStateMachine {
    /// Where reading the exchange's request body stands: a sub-machine of the exchange, whose phase changes only
    /// through the events below (the top machine composes it with ``Upstream`` and ``Response``).
    struct RequestBody: Equatable {
        enum Phase: Equatable {
            case complete
            /// Being read and handed to the upstream as it comes.
            case streaming
            /// An urlencoded form collected whole before the transfer starts (the token goes into it).
            case collectingForm
        }

        private(set) var phase: Phase

        /// A request with no body left to read.
        static let complete = RequestBody(phase: .complete)

        /// A request whose body follows its head (read as it comes until told otherwise).
        static let streaming = RequestBody(phase: .streaming)

        private init(phase: Phase) {
            self.phase = phase
        }

        /// The body was read to its end (or there was none).
        var isComplete: Bool { phase == .complete }

        /// The body is being collected whole as a form; the client must keep sending.
        var isCollectingForm: Bool { phase == .collectingForm }

        /// The body is to be collected whole (a form that will carry the token). False when it is already complete.
        mutating func collectForm() -> Bool {
            guard phase != .complete else { return false }
            phase = .collectingForm
            return true
        }

        /// The form, or the streamed body, was read to its end.
        mutating func finished() {
            phase = .complete
        }
    }
}
