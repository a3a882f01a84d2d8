/// Independent requests spread over a link's ATT bearers, at most one outstanding on each: a
/// bearer carries one transaction at a time (Vol 3, Part F, 3.3.2), so requests go faster only
/// on several bearers (Part G, 3.6). A request is handed to a bearer only when that bearer is
/// free, so a slow bearer holds up nothing queued behind it. The bearers are asked for again at
/// each step (`endpoints`): one that closed takes no more; a request on it ends with its own
/// failure (the endpoint's business) and the rest go on.
public final class RequestSpread<Endpoint: AnyObject, Request> {
    /// Runs one request on an endpoint; calls `done` exactly once when its transaction is over.
    public typealias Run = (_ request: Request, _ on: Endpoint, _ done: @escaping () -> Void) -> Void

    private var waiting: ArraySlice<Request>
    private let endpoints: () -> [Endpoint]
    private let run: Run
    private var then: ((Int) -> Void)?
    private var busy: Set<ObjectIdentifier> = []
    private var used: Set<ObjectIdentifier> = []

    /// Starts `requests` at once on as many free endpoints as there are; `then` with how many
    /// endpoints carried any once all are done. `endpoints` must not be empty while requests wait.
    public static func start(_ requests: [Request], over endpoints: @escaping () -> [Endpoint], run: @escaping Run,
                             then: @escaping (_ endpointsUsed: Int) -> Void) {
        RequestSpread(requests, endpoints: endpoints, run: run, then: then).step()
    }

    private init(_ requests: [Request], endpoints: @escaping () -> [Endpoint], run: @escaping Run, then: @escaping (Int) -> Void) {
        waiting = requests[...]
        self.endpoints = endpoints
        self.run = run
        self.then = then
    }

    private func step() {
        for endpoint in endpoints() where !waiting.isEmpty {
            let id = ObjectIdentifier(endpoint)
            guard !busy.contains(id), let request = waiting.popFirst() else { continue }
            busy.insert(id)
            used.insert(id)
            var ended = false
            // The closure keeps this spread alive until its last request is done.
            run(request, endpoint) { [self] in
                guard !ended else { return }
                ended = true
                busy.remove(id)
                step()
            }
        }
        guard waiting.isEmpty, busy.isEmpty, let then else { return }
        self.then = nil
        then(used.count)
    }
}
