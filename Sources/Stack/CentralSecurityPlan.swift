import BlemuCentral
import BlemuCore
import BlemuCrypto
import BlemuSMP
import BlemuSecurity
import Logging

/// How a central command (`blemu gatt`) pairs: what it declares and answers.
public struct CentralPairingOptions: Sendable {
    public var ioCapability: SMPIOCapability = .keyboardDisplay
    /// The passkey to type when the peripheral shows one (Passkey Entry).
    public var passkey: UInt32?
    public var acceptNumericComparison = true
    /// Where the central's bonds and identity are kept; nil: nowhere.
    public var stateDirectory: String?

    public init() {}

    /// A passkey as a person types it (`--passkey`): one to six ASCII digits, 0 to 999999
    /// (Vol 3, Part H, 2.3.5.3); nil for anything else.
    public static func parsePasskey(_ text: String) -> UInt32? {
        guard (1...6).contains(text.count), text.allSatisfy(\.isASCII), let value = UInt32(text), value <= 999_999 else { return nil }
        return value
    }
}

extension CentralSession {
    /// The central's security, attached to its host: its bonds in the state directory, beside
    /// the devices' but in a file of their own, under a static random address derived from that
    /// directory, so a peripheral that bonded with this central recognises it on the next run;
    /// its IRK (which it distributes when a peripheral asks for IdKey) in an identity file there.
    public func attachSecurity(_ options: CentralPairingOptions) -> CentralSecurity {
        let address = Self.identityAddress(stateDirectory: options.stateDirectory)
        host.ownRandomAddress = address
        let owner = Self.bondOwner(address)
        let configuration = CentralSecurityConfiguration(
            ioCapability: options.ioCapability, passkey: options.passkey,
            acceptNumericComparison: options.acceptNumericComparison,
            bondStorePath: options.stateDirectory.map { $0 + "/" + owner.fileName },
            identityPath: options.stateDirectory.map { $0 + "/" + owner.identityFileName })
        let security = CentralSecurity(configuration: configuration, owner: owner,
                                       localAddress: LEAddress(address, isRandom: true), scheduler: loop, logger: logger)
        host.attach(security: security)
        return security
    }

    /// The central's static random address: one per state directory, stable across runs.
    public static func identityAddress(stateDirectory: String?) -> BluetoothAddress {
        BluetoothAddress.staticRandom(seed: "blemu central " + (stateDirectory ?? ""))
    }

    public static func bondOwner(_ address: BluetoothAddress) -> BondOwner {
        BondOwner(device: "central", name: "blemu central", address: address)
    }
}
