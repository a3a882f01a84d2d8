import BlemuATT
import BlemuCore
import BlemuGATT

// The GATT procedures of Vol 3, Part G, 4, each a `Procedure` the client runs in turn.

extension GATTClient {
    public typealias Completion<Value> = (Result<Value, GATTClientError>) -> Void

    // MARK: 4.3 Server Configuration

    /// Exchange MTU (4.3.1): offers `clientRxMTU`; the result is the new ATT_MTU.
    public func exchangeMTU(_ clientRxMTU: Int = GATTClient.maximumMTU, completion: @escaping Completion<Int>) {
        enqueue(ExchangeMTU(clientRxMTU: UInt16(clamping: max(Self.defaultMTU, clientRxMTU)), completion))
    }

    // MARK: 4.4 – 4.7 Discovery

    /// Discover All Primary Services (4.4.1), or by UUID (4.4.2), in `range`.
    public func discoverPrimaryServices(_ uuid: BluetoothUUID? = nil, in range: ClosedRange<UInt16> = 0x0001...0xFFFF,
                                        completion: @escaping Completion<[DiscoveredService]>) {
        if let uuid {
            enqueue(DiscoverServicesByUUID(uuid: uuid, range: range, completion))
        } else {
            enqueue(DiscoverAllServices(range: range, completion))
        }
    }

    /// Find Included Services (4.5.1).
    public func findIncludedServices(of service: DiscoveredService, completion: @escaping Completion<[DiscoveredInclude]>) {
        enqueue(FindIncludedServices(range: service.handles, completion))
    }

    /// Discover All Characteristics of a Service (4.6.1).
    public func discoverCharacteristics(of service: DiscoveredService, completion: @escaping Completion<[DiscoveredCharacteristic]>) {
        enqueue(DiscoverCharacteristics(range: service.handles, completion))
    }

    /// Discover All Characteristic Descriptors (4.7.1).
    public func discoverDescriptors(of characteristic: DiscoveredCharacteristic, completion: @escaping Completion<[DiscoveredDescriptor]>) {
        guard characteristic.valueHandle < characteristic.endHandle else { return completion(.success([])) }
        enqueue(DiscoverDescriptors(range: (characteristic.valueHandle + 1)...characteristic.endHandle, completion))
    }

    /// Every primary service in `range` with its included services, characteristics and
    /// descriptors, and the secondary services they include (`isPrimary` false), at any depth
    /// of inclusion, in handle order. Over the whole range, the result also becomes `services`, which Service Changed
    /// indications keep current. One procedure after another, never recursing per service or
    /// characteristic; it ends with `.tooManyAttributes` once the server reports more than
    /// `attributeLimit` services, includes, characteristics and descriptors in all.
    public func discoverAll(in range: ClosedRange<UInt16> = 0x0001...0xFFFF, completion: @escaping Completion<[RemoteService]>) {
        DatabaseDiscovery(client: self, range: range, completion: completion).start()
    }

    func replaceServices(_ services: [RemoteService]) { setServices(services) }

    // MARK: 4.8 Reads

    /// Read Characteristic Value (4.8.1), continued as Read Long Characteristic Values (4.8.3)
    /// while responses fill ATT_MTU - 1, up to the 512-byte attribute maximum.
    public func read(_ handle: UInt16, completion: @escaping Completion<[UInt8]>) {
        enqueue(ReadLong(handle: handle, completion))
    }

    /// Read Multiple Characteristic Values (4.8.4): the values one after the other, cut at ATT_MTU - 1.
    public func readMultiple(_ handles: [UInt16], completion: @escaping Completion<[UInt8]>) {
        guard handles.count >= 2 else { return completion(.failure(.invalidArgument("Read Multiple needs two or more handles"))) }
        enqueue(SingleRequest(ATTReadMultipleRequest(handles: handles), ATTReadMultipleResponse.self, { Array($0.value) }, completion))
    }

    /// Read Multiple Variable Length Characteristic Values (4.8.5): one value per handle (the
    /// last may be cut at ATT_MTU - 1).
    public func readMultipleVariable(_ handles: [UInt16], completion: @escaping Completion<[[UInt8]]>) {
        guard handles.count >= 2 else { return completion(.failure(.invalidArgument("Read Multiple Variable needs two or more handles"))) }
        enqueue(SingleRequest(ATTReadMultipleVariableRequest(handles: handles), ATTReadMultipleVariableResponse.self, { response in
            var values: [[UInt8]] = []
            var reader = ByteReader(response.value)
            while !reader.isAtEnd {
                guard let length = try? reader.u16() else { break }
                values.append(Array((try? reader.bytes(Int(length))) ?? reader.rest()))
            }
            return values
        }, completion))
    }

    // MARK: 4.9 Writes

    /// Write Without Response (4.9.1): sent at once, beside any request in flight; the result
    /// only says whether the link took it.
    @discardableResult
    public func writeWithoutResponse(_ handle: UInt16, _ value: [UInt8]) -> Result<Void, GATTClientError> {
        if isClosed { return .failure(.disconnected) }
        if isTimedOut { return .failure(.timeout) }
        guard value.count <= mtu - 3 else {
            return .failure(.invalidArgument("a write without response carries at most ATT_MTU - 3 = \(mtu - 3) bytes, not \(value.count)"))
        }
        return sendCommand(ATTWriteCommand(handle: handle, value: value[...])) ? .success(()) : .failure(.notSent)
    }

    /// Write Characteristic Value (4.9.3), or Write Long Characteristic Values (4.9.4) by
    /// Prepare and Execute Write when the value does not fit one request.
    public func write(_ handle: UInt16, _ value: [UInt8], completion: @escaping Completion<Void>) {
        guard value.count <= ValueLength.attributeMaximum else {
            return completion(.failure(.invalidArgument("a value holds at most 512 bytes, not \(value.count)")))
        }
        if value.count <= mtu - 3 {
            enqueue(SingleRequest(ATTWriteRequest(handle: handle, value: value[...]), ATTWriteResponse.self, { _ in () }, completion))
        } else {
            enqueue(PreparedWrites([(handle, value)], completion))
        }
    }

    /// Reliable Writes (4.9.5): every value prepared, each echo checked, then executed
    /// together; an echo that differs cancels them all.
    public func reliableWrite(_ writes: [(handle: UInt16, value: [UInt8])], completion: @escaping Completion<Void>) {
        guard !writes.isEmpty, writes.allSatisfy({ $0.value.count <= ValueLength.attributeMaximum }) else {
            return completion(.failure(.invalidArgument("a reliable write needs one or more values of at most 512 bytes")))
        }
        enqueue(PreparedWrites(writes, completion))
    }

    /// Asks the server for Service Changed indications (Vol 3, Part G, 7.1), so `services`
    /// follows its database; succeeds at once when it has no Service Changed characteristic.
    public func followServiceChanged(completion: @escaping Completion<Void>) {
        guard let serviceChanged = services.characteristic(GATTType.serviceChanged, in: GATTType.gattService),
              serviceChanged.properties.contains(.indicate), serviceChanged.clientConfigurationHandle != nil else {
            return completion(.success(()))
        }
        configure(serviceChanged, notify: false, indicate: true, completion: completion)
    }

    // MARK: 4.10 – 4.11 Notifications and indications

    /// Writes the characteristic's CCCD (Vol 3, Part G, 3.3.3.3): notifications, indications,
    /// both or neither. Values then arrive through `onNotification` and `onIndication`.
    public func configure(_ characteristic: RemoteCharacteristic, notify: Bool, indicate: Bool, completion: @escaping Completion<Void>) {
        guard let cccd = characteristic.clientConfigurationHandle else {
            return completion(.failure(.invalidArgument("characteristic \(characteristic.uuid) has no Client Characteristic Configuration descriptor")))
        }
        let flags: UInt16 = (notify ? 0x0001 : 0) | (indicate ? 0x0002 : 0)
        var value: [UInt8] = []
        value.appendLE(flags)
        write(cccd, value, completion: completion)
    }
}

// MARK: - Procedures

final class ExchangeMTU: TypedProcedure<Int> {
    let clientRxMTU: UInt16
    init(clientRxMTU: UInt16, _ completion: @escaping GATTClient.Completion<Int>) {
        self.clientRxMTU = clientRxMTU
        super.init(completion)
    }
    override func start(client: GATTClient) -> Step { client.prepare(ATTExchangeMTURequest(clientRxMTU: clientRxMTU)) }
    override func handle(_ pdu: ArraySlice<UInt8>, client: GATTClient) -> Step {
        switch decode(ATTExchangeMTUResponse.self, pdu) {
        case .failure(let error): return complete(.failure(error))
        case .success(let response):
            // Vol 3, Part F, 3.4.2.2: min of the two, and never below the default.
            let mtu = max(GATTClient.defaultMTU, min(Int(clientRxMTU), Int(response.serverRxMTU)))
            client.setMTU(mtu)
            return complete(.success(mtu))
        }
    }
}

/// One request, one response, decoded by `transform`. The request is kept as its PDU (a
/// written value as a view of the caller's bytes) and encoded only when it goes out.
final class SingleRequest<Request: ATTPDU, Response: ATTPDU, Value>: TypedProcedure<Value> {
    let request: Request
    let transform: (Response) -> Value
    init(_ request: Request, _ type: Response.Type, _ transform: @escaping (Response) -> Value,
         _ completion: @escaping GATTClient.Completion<Value>) {
        self.request = request
        self.transform = transform
        super.init(completion)
    }
    override func start(client: GATTClient) -> Step { client.prepare(request) }
    override func handle(_ pdu: ArraySlice<UInt8>, client: GATTClient) -> Step {
        complete(decode(Response.self, pdu).map(transform))
    }
}

/// A discovery that walks a handle range with one request after another, collecting what each
/// response reports, until the range is done or the server answers Attribute Not Found
/// (Vol 3, Part G, 4.4.1 and alike). Each response must move forward, and the items in it too,
/// one handle after another, so a server can neither keep the client walking forever nor report
/// more items than the range has handles.
class RangeWalk<Item>: TypedProcedure<[Item]> {
    let range: ClosedRange<UInt16>
    var next: UInt16
    var found: [Item] = []

    init(range: ClosedRange<UInt16>, _ completion: @escaping GATTClient.Completion<[Item]>) {
        self.range = range
        next = range.lowerBound
        super.init(completion)
    }

    /// Prepares the request for `start...range.upperBound` (`client.prepare`; each walk
    /// overrides it, and one that does not ends with an error).
    func request(from start: UInt16, client: GATTClient) -> Step {
        complete(.failure(.invalidArgument("internal: \(type(of: self)) sends no request")))
    }
    /// The items of one response and the last handle it covered (each walk overrides it).
    func items(of pdu: ArraySlice<UInt8>) -> Result<(items: [Item], last: UInt16), GATTClientError> {
        .failure(.invalidArgument("internal: \(type(of: self)) reads no response"))
    }
    /// Once the walk is done: the result (a subclass may need more requests first).
    func walked(client: GATTClient) -> Step { complete(.success(found)) }

    override func start(client: GATTClient) -> Step { request(from: next, client: client) }

    override func handle(_ pdu: ArraySlice<UInt8>, client: GATTClient) -> Step {
        if let error = Self.errorResponse(pdu) {
            // The end of the walk, or a failure.
            return error.error == .attributeNotFound ? walked(client: client) : complete(.failure(.att(error.error, handle: error.handle)))
        }
        switch items(of: pdu) {
        case .failure(let error): return complete(.failure(error))
        case .success(let (items, last)):
            guard last >= next, range.contains(last) else {
                return complete(.failure(.malformedResponse("handle \(Hex.word(last)) outside \(Hex.word(next))-\(Hex.word(range.upperBound))")))
            }
            found += items
            guard last < range.upperBound else { return walked(client: client) }
            next = last + 1
            return request(from: next, client: client)
        }
    }
}

final class DiscoverAllServices: RangeWalk<DiscoveredService> {
    override func request(from start: UInt16, client: GATTClient) -> Step {
        client.prepare(ATTReadByGroupTypeRequest(startHandle: start, endHandle: range.upperBound, groupType: GATTType.primaryService))
    }
    override func items(of pdu: ArraySlice<UInt8>) -> Result<(items: [DiscoveredService], last: UInt16), GATTClientError> {
        decode(ATTReadByGroupTypeResponse.self, pdu).flatMap { response in
            var services: [DiscoveredService] = []
            var last: UInt16 = 0
            var floor = Int(next)
            for entry in response.entries {
                guard entry.handle <= entry.endGroup, entry.handle >= floor,
                      let uuid = try? BluetoothUUID(littleEndian: entry.value), entry.value.count == 2 || entry.value.count == 16 else {
                    return .failure(.malformedResponse("service entry at \(Hex.word(entry.handle))"))
                }
                services.append(DiscoveredService(uuid: uuid, handles: entry.handle...entry.endGroup))
                last = entry.endGroup
                floor = Int(entry.endGroup) + 1
            }
            return .success((services, last))
        }
    }
}

final class DiscoverServicesByUUID: RangeWalk<DiscoveredService> {
    let uuid: BluetoothUUID
    init(uuid: BluetoothUUID, range: ClosedRange<UInt16>, _ completion: @escaping GATTClient.Completion<[DiscoveredService]>) {
        self.uuid = uuid
        super.init(range: range, completion)
    }
    override func request(from start: UInt16, client: GATTClient) -> Step {
        var value: [UInt8] = []
        uuid.appendATT(to: &value)
        return client.prepare(ATTFindByTypeValueRequest(startHandle: start, endHandle: range.upperBound,
                                                        attributeType: 0x2800, value: value[...]))
    }
    override func items(of pdu: ArraySlice<UInt8>) -> Result<(items: [DiscoveredService], last: UInt16), GATTClientError> {
        decode(ATTFindByTypeValueResponse.self, pdu).flatMap { response in
            var services: [DiscoveredService] = []
            var last: UInt16 = 0
            var floor = Int(next)
            for (handle, end) in response.ranges {
                guard handle <= end, handle >= floor else { return .failure(.malformedResponse("service range at \(Hex.word(handle))")) }
                services.append(DiscoveredService(uuid: uuid, handles: handle...end))
                last = end
                floor = Int(end) + 1
            }
            return .success((services, last))
        }
    }
}

/// 4.5.1: Read By Type for «Include»; an included service with a 128-bit UUID carries no UUID
/// in its declaration, so its UUID is read from its service declaration afterwards. That read is
/// made for every include, also those that came with a 16-bit UUID: some servers (Bumble
/// 0.0.236) put the first two octets of a 128-bit UUID there, against Vol 3, Part G, 3.2, and
/// the service declaration is what counts.
final class FindIncludedServices: RangeWalk<DiscoveredInclude> {
    private var unresolved: [Int] = []

    override func request(from start: UInt16, client: GATTClient) -> Step {
        client.prepare(ATTReadByTypeRequest(startHandle: start, endHandle: range.upperBound, attributeType: GATTType.include))
    }
    override func items(of pdu: ArraySlice<UInt8>) -> Result<(items: [DiscoveredInclude], last: UInt16), GATTClientError> {
        decode(ATTReadByTypeResponse.self, pdu).flatMap { response in
            var includes: [DiscoveredInclude] = []
            var last: UInt16 = 0
            var floor = Int(next)
            for (handle, value) in response.pairs {
                var reader = ByteReader(value)
                guard handle >= floor, value.count == 4 || value.count == 6,
                      let start = try? reader.u16(), let end = try? reader.u16(), start <= end else {
                    return .failure(.malformedResponse("include declaration at \(Hex.word(handle))"))
                }
                let uuid = value.count == 6 ? (try? reader.u16()).map(BluetoothUUID.init) : nil
                unresolved.append(found.count + includes.count)
                includes.append(DiscoveredInclude(declarationHandle: handle,
                                                  service: DiscoveredService(uuid: uuid ?? BluetoothUUID(0), handles: start...end, isPrimary: false)))
                last = handle
                floor = Int(handle) + 1
            }
            return .success((includes, last))
        }
    }
    override func walked(client: GATTClient) -> Step {
        guard let index = unresolved.first else { return complete(.success(found)) }
        return client.prepare(ATTReadRequest(handle: found[index].service.handles.lowerBound))
    }
    override func handle(_ pdu: ArraySlice<UInt8>, client: GATTClient) -> Step {
        guard pdu.first == ATTOpcode.readResponse.rawValue || (Self.errorResponse(pdu)?.requestOpcode == ATTOpcode.readRequest.rawValue) else {
            return super.handle(pdu, client: client)
        }
        let index = unresolved.removeFirst()
        let announced = found[index].service.uuid
        switch decode(ATTReadResponse.self, pdu) {
        case .failure(let error):
            // A 16-bit UUID from the include stands when the declaration cannot be read.
            guard announced.uint16 != nil && announced != BluetoothUUID(0) else { return complete(.failure(error)) }
        case .success(let response):
            guard response.value.count == 2 || response.value.count == 16,
                  let uuid = try? BluetoothUUID(littleEndian: response.value) else {
                return complete(.failure(.malformedResponse("included service declaration of \(response.value.count) bytes")))
            }
            found[index].service.uuid = uuid
        }
        return walked(client: client)
    }
}

/// 4.6.1: Read By Type for «Characteristic»; each characteristic ends where the next begins.
final class DiscoverCharacteristics: RangeWalk<DiscoveredCharacteristic> {
    override func request(from start: UInt16, client: GATTClient) -> Step {
        client.prepare(ATTReadByTypeRequest(startHandle: start, endHandle: range.upperBound, attributeType: GATTType.characteristic))
    }
    override func items(of pdu: ArraySlice<UInt8>) -> Result<(items: [DiscoveredCharacteristic], last: UInt16), GATTClientError> {
        decode(ATTReadByTypeResponse.self, pdu).flatMap { response in
            var characteristics: [DiscoveredCharacteristic] = []
            var last: UInt16 = 0
            var floor = Int(next)
            for (handle, value) in response.pairs {
                var reader = ByteReader(value)
                // Vol 3, Part G, 3.3.1: properties, value handle, then a 16- or 128-bit UUID.
                guard handle >= floor, value.count == 5 || value.count == 19, let properties = try? reader.u8(),
                      let valueHandle = try? reader.u16(), valueHandle > handle, range.contains(valueHandle),
                      let uuid = try? BluetoothUUID(littleEndian: reader.rest()) else {
                    return .failure(.malformedResponse("characteristic declaration at \(Hex.word(handle))"))
                }
                characteristics.append(DiscoveredCharacteristic(uuid: uuid, properties: CharacteristicProperties(rawValue: properties),
                                                                declarationHandle: handle, valueHandle: valueHandle,
                                                                endHandle: range.upperBound))
                last = handle
                floor = Int(handle) + 1
            }
            return .success((characteristics, last))
        }
    }
    override func walked(client: GATTClient) -> Step {
        for index in found.indices.dropLast() {
            found[index].endHandle = max(found[index].valueHandle, found[index + 1].declarationHandle - 1)
        }
        return complete(.success(found))
    }
}

/// 4.7.1: Find Information over the handles after the value.
final class DiscoverDescriptors: RangeWalk<DiscoveredDescriptor> {
    override func request(from start: UInt16, client: GATTClient) -> Step {
        client.prepare(ATTFindInformationRequest(startHandle: start, endHandle: range.upperBound))
    }
    override func items(of pdu: ArraySlice<UInt8>) -> Result<(items: [DiscoveredDescriptor], last: UInt16), GATTClientError> {
        decode(ATTFindInformationResponse.self, pdu).flatMap { response in
            let pairs = response.pairs
            guard let last = pairs.last?.handle, pairs.first.map({ $0.handle >= next }) == true,
                  zip(pairs, pairs.dropFirst()).allSatisfy({ $0.handle < $1.handle }) else {
                return .failure(.malformedResponse("Find Information handles"))
            }
            return .success((pairs.map { DiscoveredDescriptor(uuid: $0.type, handle: $0.handle) }, last))
        }
    }
}

/// 4.8.1 then 4.8.3: Read, then Read Blob from where the value stopped while responses come full.
final class ReadLong: TypedProcedure<[UInt8]> {
    let handle: UInt16
    var value: [UInt8] = []
    init(handle: UInt16, _ completion: @escaping GATTClient.Completion<[UInt8]>) {
        self.handle = handle
        super.init(completion)
    }
    override func start(client: GATTClient) -> Step { client.prepare(ATTReadRequest(handle: handle)) }
    override func handle(_ pdu: ArraySlice<UInt8>, client: GATTClient) -> Step {
        let chunk: ArraySlice<UInt8>
        if value.isEmpty && pdu.first != ATTOpcode.readBlobResponse.rawValue
            && Self.errorResponse(pdu)?.requestOpcode != ATTOpcode.readBlobRequest.rawValue {
            switch decode(ATTReadResponse.self, pdu) {
            case .failure(let error): return complete(.failure(error))
            case .success(let response): chunk = response.value
            }
        } else {
            if let error = Self.errorResponse(pdu), error.error == .attributeNotLong || error.error == .invalidOffset {
                // The value ended exactly at a response boundary.
                return complete(.success(value))
            }
            switch decode(ATTReadBlobResponse.self, pdu) {
            case .failure(let error): return complete(.failure(error))
            case .success(let response): chunk = response.value
            }
        }
        // A first response that fills ATT_MTU - 1 means a long value: room for the most a value
        // can hold (Vol 3, Part F, 3.2.9) is taken once, not grown chunk by chunk.
        if value.isEmpty && chunk.count >= client.mtu - 1 { value.reserveCapacity(ValueLength.attributeMaximum) }
        value += chunk
        guard chunk.count >= client.mtu - 1, value.count < ValueLength.attributeMaximum else {
            // A server that sends past the 512-byte maximum (Vol 3, Part F, 3.2.9) is cut there.
            if value.count > ValueLength.attributeMaximum { value.removeLast(value.count - ValueLength.attributeMaximum) }
            return complete(.success(value))
        }
        return client.prepare(ATTReadBlobRequest(handle: handle, offset: UInt16(value.count)))
    }
}

/// 4.9.4 and 4.9.5: each value in Prepare Write parts of ATT_MTU - 5 bytes, each echo checked,
/// then Execute Write; an echo that differs, or an error, cancels the queue on the server.
final class PreparedWrites: TypedProcedure<Void> {
    private var parts: [(handle: UInt16, offset: UInt16, value: ArraySlice<UInt8>)] = []
    private let writes: [(handle: UInt16, value: [UInt8])]
    private var sent: (handle: UInt16, offset: UInt16, value: ArraySlice<UInt8>)?
    private var failure: GATTClientError?
    private var executing = false

    init(_ writes: [(handle: UInt16, value: [UInt8])], _ completion: @escaping GATTClient.Completion<Void>) {
        self.writes = writes
        super.init(completion)
    }

    override func start(client: GATTClient) -> Step {
        let size = client.mtu - 5
        for (handle, value) in writes {
            var offset = 0
            repeat {
                let end = min(value.count, offset + size)
                parts.append((handle, UInt16(offset), value[offset..<end]))
                offset = end
            } while offset < value.count
        }
        return prepareNext(client: client)
    }

    private func prepareNext(client: GATTClient) -> Step {
        guard !parts.isEmpty else {
            executing = true
            return client.prepare(ATTExecuteWriteRequest(flags: .write))
        }
        let part = parts.removeFirst()
        sent = part
        return client.prepare(ATTPrepareWriteRequest(handle: part.handle, offset: part.offset, value: part.value))
    }

    private func cancel(_ error: GATTClientError, client: GATTClient) -> Step {
        failure = error
        executing = true
        return client.prepare(ATTExecuteWriteRequest(flags: .cancel))
    }

    override func handle(_ pdu: ArraySlice<UInt8>, client: GATTClient) -> Step {
        if executing {
            if let failure { return complete(.failure(failure)) }
            return complete(decode(ATTExecuteWriteResponse.self, pdu).map { _ in () })
        }
        switch decode(ATTPrepareWriteResponse.self, pdu) {
        case .failure(let error):
            // Whatever was queued before the error is dropped on the server too.
            return cancel(error, client: client)
        case .success(let echo):
            guard let part = sent, echo.handle == part.handle, echo.offset == part.offset, echo.value.elementsEqual(part.value) else {
                return cancel(.echoMismatch(handle: sent?.handle ?? 0, offset: sent?.offset ?? 0), client: client)
            }
            return prepareNext(client: client)
        }
    }
}
