import BlemuATT
import BlemuCore
import BlemuGATT
import BlemuGATTClient
import Logging

/// Who hears each value handle's notifications and indications on a link's GATT client: one
/// listener a handle (a subscription, or a control point's answer awaited), so several
/// subscriptions share the client's one notification path. `install` puts the dispatch on the
/// client; a value for a handle nobody listens to is dropped.
public final class GATTValueListeners {
    private var listeners: [UInt16: (ArraySlice<UInt8>) -> Void] = [:]

    public init() {}

    /// Makes the client's notifications and indications go to the listeners.
    public func install(on client: GATTClient) {
        let dispatch: (UInt16, ArraySlice<UInt8>) -> Void = { [unowned self] handle, value in listeners[handle]?(value) }
        client.onNotification = dispatch
        client.onIndication = dispatch
    }

    public subscript(handle: UInt16) -> ((ArraySlice<UInt8>) -> Void)? {
        get { listeners[handle] }
        set { listeners[handle] = newValue }
    }

    /// Whether values are still awaited (a subscription, an answer).
    public var isListening: Bool { !listeners.isEmpty }
}

extension GATTWorkflow {
    /// How long a control point's answer is awaited after its write was acknowledged.
    public static let controlPointAnswerTime: Duration = .seconds(5)

    /// What became of a write to a characteristic that may answer with an indication.
    public enum AnsweredWrite: Equatable {
        /// The Write Response came (the answer, if any, follows).
        case written
        /// The control point's answer: the indication of its value.
        case answered(ArraySlice<UInt8>)
        /// The command is over: answered, or `controlPointAnswerTime` passed without an answer,
        /// or a characteristic that does not indicate was written.
        case finished
        /// Indications could not be turned on, or the write was refused; nothing more comes.
        case failed(String)
    }

    /// Writes a value the way an app writes a control point (write and indicate, Vol 3, Part G,
    /// 4.11; the SIG's RACP and CGM control points answer so): its indications turned on first
    /// (where it has a Client Characteristic Configuration), then the write with a response,
    /// then its answer awaited for `controlPointAnswerTime`. A characteristic that does not
    /// indicate is simply written. Each request is retried once after securing the link when
    /// refused for want of security. While the answer is awaited, its listener stands in for
    /// any subscription to the value, which is put back afterwards. `event` hears `written`,
    /// then `answered` (when it came) and `finished`; or `failed`.
    public func writeAwaitingAnswer(_ characteristic: RemoteCharacteristic, _ value: [UInt8], listeners: GATTValueListeners,
                                    event: @escaping (AnsweredWrite) -> Void) {
        let handle = characteristic.valueHandle, uuid = characteristic.uuid
        var over = false
        let subscribedBefore = listeners[handle]
        let finish = {
            guard !over else { return }
            over = true
            listeners[handle] = subscribedBefore
            event(.finished)
        }
        let fail = { (message: String) in
            over = true
            listeners[handle] = subscribedBefore
            event(.failed(message))
        }
        let write = { [self] in
            retryingOnSecurity({ [client] done in client.write(handle, value, completion: done) }) { [self] result in
                switch result {
                case .failure(let error):
                    fail("write \(uuid): \(error)")
                case .success:
                    event(.written)
                    guard characteristic.properties.contains(.indicate) else { return finish() }
                    scheduler.schedule(after: Self.controlPointAnswerTime) { finish() }
                }
            }
        }
        guard characteristic.properties.contains(.indicate), characteristic.clientConfigurationHandle != nil else { return write() }
        listeners[handle] = { indicated in
            event(.answered(indicated))
            finish()
        }
        retryingOnSecurity({ [client] done in client.configure(characteristic, notify: false, indicate: true, completion: done) }) { result in
            if case .failure(let error) = result { return fail("subscribe \(uuid) before writing: \(error)") }
            write()
        }
    }

    /// Subscribes to one characteristic as an app does: notifications when it notifies, else
    /// indications (Vol 3, Part G, 4.10, 4.11), the Client Characteristic Configuration write
    /// retried once after securing the link when refused for want of security. `listener`
    /// hears each value from before the write goes out, so the first value after the answer is
    /// not missed; a refusal takes it away again. `then` with the outcome. False (nothing done)
    /// when the characteristic neither notifies nor indicates.
    public func subscribe(_ characteristic: RemoteCharacteristic, listeners: GATTValueListeners,
                          listener: @escaping (ArraySlice<UInt8>) -> Void,
                          then: @escaping (Result<Void, GATTClientError>) -> Void) -> Bool {
        let notify = characteristic.properties.contains(.notify)
        guard notify || characteristic.properties.contains(.indicate) else { return false }
        let handle = characteristic.valueHandle
        listeners[handle] = listener
        retryingOnSecurity({ [client] done in client.configure(characteristic, notify: notify, indicate: !notify, completion: done) }) { result in
            if case .failure = result { listeners[handle] = nil }
            then(result)
        }
        return true
    }

    /// Notifications and indications off again; the listener goes at once (nothing more is
    /// shown, whatever the answer).
    public func unsubscribe(_ characteristic: RemoteCharacteristic, listeners: GATTValueListeners,
                            then: @escaping (Result<Void, GATTClientError>) -> Void) {
        listeners[characteristic.valueHandle] = nil
        client.configure(characteristic, notify: false, indicate: false, completion: then)
    }

    /// Watches the peripheral's database for `uuid` while its value is listened to (Vol 3, Part
    /// G, 7.1: the client has rediscovered the changed range when it hears of it): a change is
    /// logged; if the characteristic is gone, its listener is dropped and `gone` says why.
    public func watchForRemoval(of uuid: BluetoothUUID, valueHandle: UInt16, listeners: GATTValueListeners,
                                gone: @escaping (String) -> Void) {
        client.onServiceChanged = { [client, logger] range in
            logger.notice("the peripheral changed its database (handles \(Hex.word(range.lowerBound))-\(Hex.word(range.upperBound))): rediscovered")
            if client.services.characteristic(uuid) == nil {
                listeners[valueHandle] = nil
                gone("characteristic \(uuid) is gone: the peripheral took it out (Service Changed)")
            }
        }
    }
}
