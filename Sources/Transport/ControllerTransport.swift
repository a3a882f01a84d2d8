import BlemuCore
import BlemuHCI
import BlemuRunLoop

/// An open, nonblocking connection to a controller, registered in a run loop.
///
/// Callbacks run on the loop. `onClosed` fires at most once, when the controller side goes
/// away (EOF, reset, hangup, a failed read or write), never because of `close()`; the
/// transport is closed by then. A packet body handed to `onPacket` is valid during the call;
/// copy it to keep it.
public protocol ControllerTransport: AnyObject {
    var spec: ControllerSpec { get }
    var isOpen: Bool { get }
    var onPacket: ((H4PacketType, ArraySlice<UInt8>) -> Void)? { get set }
    var onClosed: ((TransportError) -> Void)? { get set }
    /// Incoming bytes that could not be framed as packets (skipped while resynchronising).
    var discardedBytes: Int { get }
    /// Writes the indicator byte and `body` (an HCI packet without indicator). What the kernel
    /// does not take at once waits in a bounded buffer, flushed as the fd becomes writable.
    /// Returns false, having written nothing, when the transport is closed or the buffer cannot
    /// take the whole packet: the caller keeps it and decides.
    func send(_ type: H4PacketType, _ body: ArraySlice<UInt8>) -> Bool
    /// Unregisters from the loop and closes the fd; pending output is dropped. Idempotent.
    func close()
}

extension ControllerTransport {
    public func send(_ type: H4PacketType, _ body: [UInt8]) -> Bool { send(type, body[...]) }
}

/// An open in progress; `cancel()` stops it and closes whatever it opened.
public final class TransportOpening {
    fileprivate var cancelAction: (() -> Void)?
    public private(set) var isFinished = false

    fileprivate init() {}

    public func cancel() {
        guard !isFinished else { return }
        isFinished = true
        let action = cancelAction
        cancelAction = nil
        action?()
    }

    fileprivate func finish() -> Bool {
        guard !isFinished else { return false }
        isFinished = true
        cancelAction = nil
        return true
    }
}

public enum ControllerTransports {
    /// The default bound on output waiting for the kernel, per transport.
    public static let defaultOutputCapacity = 256 * 1024

    /// Opens a transport for `spec`. `completion` runs exactly once, on the loop and never before
    /// `open` returns, unless the returned opening is cancelled first. Unix sockets, serial ports
    /// and HCI adapters open at once; TCP connects without blocking the loop, trying each address
    /// of the host and giving up after `connectTimeout`.
    @discardableResult
    public static func open(_ spec: ControllerSpec, on loop: RunLoop, connectTimeout: Duration = .seconds(3),
                            outputCapacity: Int = defaultOutputCapacity,
                            _ completion: @escaping (Result<any ControllerTransport, TransportError>) -> Void)
        -> TransportOpening
    {
        let opening = TransportOpening()
        if case let (host, port)? = spec.tcpEndpoint {
            // The closures hold `opening` strongly, so an opening the caller drops still completes;
            // finish() and cancel() break the cycle through cancelAction.
            let connector = TCPConnector(spec: spec, host: host, port: port, loop: loop, timeout: connectTimeout) {
                result in
                guard opening.finish() else {
                    if case .success(let fd) = result { closeFD(fd) }
                    return
                }
                switch result {
                case .success(let fd):
                    do throws(TransportError) {
                        let transport = try StreamTransport(adopting: fd, spec: spec, medium: .socket, loop: loop,
                                                            outputCapacity: outputCapacity)
                        completion(.success(transport))
                    } catch {
                        completion(.failure(error))
                    }
                case .failure(let error):
                    completion(.failure(error))
                }
            }
            opening.cancelAction = { connector.cancel() }
            connector.start()
            return opening
        }

        let result: Result<any ControllerTransport, TransportError>
        do throws(TransportError) {
            result = .success(try openAtOnce(spec, on: loop, outputCapacity: outputCapacity))
        } catch {
            result = .failure(error)
        }
        let timer = loop.schedule(after: .zero) {
            guard opening.finish() else {
                if case .success(let transport) = result { transport.close() }
                return
            }
            completion(result)
        }
        opening.cancelAction = {
            loop.cancel(timer)
            if case .success(let transport) = result { transport.close() }
        }
        return opening
    }

    /// Opens the specs that need no waiting: unix, serial, hci. TCP throws: use `open`.
    public static func openAtOnce(_ spec: ControllerSpec, on loop: RunLoop,
                                  outputCapacity: Int = defaultOutputCapacity) throws(TransportError)
        -> any ControllerTransport
    {
        switch spec {
        case .hci(let index):
            return try HCIUserChannelTransport(index: index, loop: loop, queueCapacity: outputCapacity)
        case .unix(let path):
            return try StreamTransport.connect(unixPath: path, loop: loop, outputCapacity: outputCapacity)
        case .serial(let device, let baud):
            return try StreamTransport.openSerial(device: device, baud: baud, loop: loop, outputCapacity: outputCapacity)
        case .tcp, .netsim:
            throw TransportError(.invalidSpec, "\(spec): TCP connects asynchronously: open it with ControllerTransports.open")
        }
    }
}
