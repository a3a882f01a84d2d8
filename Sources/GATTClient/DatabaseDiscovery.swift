/// `GATTClient.discoverAll` (Vol 3, Part G, 4.4 – 4.7): the primary services, then each
/// service's includes, characteristics and descriptors, one procedure after another, then the
/// services the includes name, level by level however deep they nest, each once. Each step starts from the completion of the step
/// before, which the client calls from `receive` (or at once, with an error, on a dead bearer),
/// so the stack stays flat however large the server's database; characteristics without
/// descriptor handles are described in a loop, with no request. What the walk holds grows by
/// appending, linear in what the server reported, and stops at the client's `attributeLimit`:
/// a server cannot make a client hold more than that, however it describes its database.
final class DatabaseDiscovery {
    private weak var client: GATTClient?
    private let range: ClosedRange<UInt16>
    private var completion: GATTClient.Completion<[RemoteService]>?
    /// The services to fill in, and the index of the one being filled.
    private var pending: [DiscoveredService] = []
    private var serviceIndex = 0
    /// The start handles of the services filled in or to be: each is discovered once.
    private var seen = Set<UInt16>()
    /// Where in `filled` the services whose includes were not looked at yet begin.
    private var levelStart = 0
    private var filled: [RemoteService] = []
    /// The service being filled in: its includes, its characteristics, and those described so far.
    private var includes: [DiscoveredInclude] = []
    private var characteristics: [DiscoveredCharacteristic] = []
    private var described: [RemoteCharacteristic] = []
    /// Services, includes, characteristics and descriptors reported so far.
    private var held = 0

    init(client: GATTClient, range: ClosedRange<UInt16>, completion: @escaping GATTClient.Completion<[RemoteService]>) {
        self.client = client
        self.range = range
        self.completion = completion
    }

    func start() {
        guard let client else { return finish(.failure(.disconnected)) }
        client.discoverPrimaryServices(in: range) { [self] result in
            guard let found = take(result) else { return }
            pending = found
            seen = Set(found.map(\.handles.lowerBound))
            fillNext()
        }
    }

    private func fillNext() {
        guard serviceIndex < pending.count else { return serviceListDone() }
        guard let client else { return finish(.failure(.disconnected)) }
        let service = pending[serviceIndex]
        client.findIncludedServices(of: service) { [self] result in
            guard let found = take(result) else { return }
            includes = found
            guard let client = self.client else { return finish(.failure(.disconnected)) }
            client.discoverCharacteristics(of: service) { [self] result in
                guard let found = take(result) else { return }
                characteristics = found
                described.removeAll(keepingCapacity: true)
                described.reserveCapacity(found.count)
                describeNext()
            }
        }
    }

    /// Descriptors of the characteristics not described yet; then the service is done.
    private func describeNext() {
        while described.count < characteristics.count {
            let characteristic = characteristics[described.count]
            guard characteristic.valueHandle < characteristic.endHandle else {
                // No handle after the value: no descriptors, and no request to ask for them.
                described.append(RemoteCharacteristic(characteristic: characteristic, descriptors: []))
                continue
            }
            guard let client else { return finish(.failure(.disconnected)) }
            client.discoverDescriptors(of: characteristic) { [self] result in
                guard let descriptors = take(result) else { return }
                described.append(RemoteCharacteristic(characteristic: characteristic, descriptors: descriptors))
                describeNext()
            }
            return
        }
        filled.append(RemoteService(service: pending[serviceIndex], includes: includes, characteristics: described))
        includes = []
        characteristics = []
        described = []
        serviceIndex += 1
        fillNext()
    }

    private func serviceListDone() {
        // Included services that are not primary ones are only reachable through include
        // declarations (Vol 3, Part G, 4.5), and may include others in turn: the services the
        // last level includes, not seen yet, are the next level.
        var included: [DiscoveredService] = []
        for service in filled[levelStart...] {
            for include in service.includes where seen.insert(include.service.handles.lowerBound).inserted {
                included.append(include.service)
            }
        }
        levelStart = filled.count
        if !included.isEmpty {
            guard let found = take(.success(included)) else { return }
            pending = found
            serviceIndex = 0
            return fillNext()
        }
        let services = filled.sorted { $0.handles.lowerBound < $1.handles.lowerBound }
        if range == 0x0001...0xFFFF { client?.replaceServices(services) }
        finish(.success(services))
    }

    /// What a step found, counted against the limit; nil when the discovery ended instead.
    private func take<Items: Collection>(_ result: Result<Items, GATTClientError>) -> Items? {
        switch result {
        case .failure(let error):
            finish(.failure(error))
            return nil
        case .success(let items):
            guard let client else {
                finish(.failure(.disconnected))
                return nil
            }
            held += items.count
            guard held <= client.attributeLimit else {
                finish(.failure(.tooManyAttributes(limit: client.attributeLimit)))
                return nil
            }
            return items
        }
    }

    private func finish(_ result: Result<[RemoteService], GATTClientError>) {
        let completion = self.completion
        self.completion = nil
        pending = []
        filled = []
        seen = []
        characteristics = []
        described = []
        completion?(result)
    }
}

extension Array where Element == RemoteService {
    /// Services, includes, characteristics and descriptors: what `attributeLimit` counts.
    var attributeCount: Int {
        reduce(0) { total, service in
            total + 1 + service.includes.count + service.characteristics.reduce(service.characteristics.count) { $0 + $1.descriptors.count }
        }
    }
}
