import BlemuConfig
import BlemuCore
import BlemuDevices
import BlemuHost
import BlemuRunLoop
import BlemuSecurity
import BlemuStack
import BlemuTransport
import Logging
import Testing

/// `blemu run`'s assembly from plans (`RunStack`): controllers shared or not, copies named
/// apart, and each device's bond file keyed to the address the device itself uses.
@Suite struct RunStackTests {
    static let quiet = Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })

    static func plan(_ device: String, _ spec: String, name: String? = nil, address: String? = nil) throws -> DevicePlan {
        var plan = DevicePlan(device: device, spec: try ControllerSpec(parsing: spec))
        plan.name = name
        plan.address = address.flatMap(BluetoothAddress.init)
        return plan
    }

    /// The identity-address rule is written once (`PeripheralConfiguration.identityAddress`): the
    /// bond and identity files are named for the address the peripheral advertises from, with a
    /// derived address as with a given one. Were the assembly's rule to drift from the
    /// peripheral's, bonds would be kept under an address the device never uses.
    @Test func bondFilesAreKeyedToTheAddressTheDeviceUses() throws {
        var options = RunOptions()
        options.stateDirectory = "/nonexistent-state"
        let plans = [try Self.plan("heart-rate", "tcp:127.0.0.1:1", name: "Chest"),
                     try Self.plan("thermostat", "tcp:127.0.0.1:2", address: "C9:01:02:03:04:05")]
        let stacks = try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: Self.quiet)
        let peripherals = stacks.flatMap(\.peripherals)
        #expect(peripherals.count == 2 && stacks.count == 2)
        for peripheral in peripherals {
            let owner = BondOwner(device: peripheral.deviceName, name: peripheral.configuration.name, address: peripheral.address)
            #expect(peripheral.configuration.security.bondStorePath == "/nonexistent-state/" + owner.fileName)
            #expect(peripheral.configuration.security.identityPath == "/nonexistent-state/" + owner.identityFileName)
        }
        #expect(peripherals[0].address == BluetoothAddress.staticRandom(seed: "blemu/heart-rate/Chest"))
        #expect(peripherals[1].address == BluetoothAddress("C9:01:02:03:04:05"))
    }

    /// Two copies of one device get two names (so two addresses); one unix:/tcp: spec is one
    /// controller per device unless shared, an adapter always one controller.
    @Test func copiesAreNumberedAndControllersSharedAsAsked() throws {
        var options = RunOptions()
        let plans = [try Self.plan("heart-rate", "tcp:127.0.0.1:1"), try Self.plan("heart-rate", "tcp:127.0.0.1:1")]
        let apart = try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: Self.quiet)
        #expect(apart.count == 2)
        let names = apart.flatMap(\.peripherals).map(\.configuration.name)
        #expect(names.count == 2 && names[1] == names[0] + " 2")
        options.shareController = true
        let shared = try RunStack.assemble(plans, options: options, loop: RunLoop(), logger: Self.quiet)
        #expect(shared.count == 1 && shared[0].peripherals.count == 2)
    }

    /// A refused initial value found only at assembly is a failure of the run, not a trap.
    @Test func aRefusedSettingIsAStackFailure() throws {
        var plan = try Self.plan("heart-rate", "tcp:127.0.0.1:1")
        plan.settings = [.init(key: "no-such-setting", value: "1", location: "test.yaml:3")]
        #expect(throws: StackFailure.self) { try RunStack.assemble([plan], options: RunOptions(), loop: RunLoop(), logger: Self.quiet) }
        #expect(throws: PlanError.self) { try DevicePlanning.checkSettings([plan]) }
    }
}
