import BlemuControl
import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuScenario
import Logging

/// The running devices as a scenario acts on them: control steps through `DeviceControl`,
/// the control socket's own path (so a step does what `blemu ctl` does, and is logged so), and
/// `notify` through the device's context, as the device itself sends.
public enum ScenarioTargets {
    public static func devices(_ peripherals: [Peripheral], scheduler: TimerScheduling, logger: Logger) -> ScenarioDevices {
        let control = DeviceControl(logger: logger, scheduler: scheduler) { peripherals }
        return ScenarioDevices(
            names: DeviceNames(peripherals.map { ($0.deviceName, $0.configuration.name) }),
            execute: { command in
                // Client 0: the scenario (socket clients are numbered from 1).
                guard case .object(let members) = control.execute(ControlRequest(id: 0, command: command), client: 0) else {
                    return "no reply"
                }
                if members.contains(where: { member in
                    if member.0 == "ok", case .bool(true) = member.1 { return true }
                    return false
                }) { return nil }
                if case .string(let message)? = members.first(where: { $0.0 == "error" })?.1 { return message }
                return "refused"
            },
            notify: { index, uuid, value in
                let peripheral = peripherals[index]
                guard let characteristic = peripheral.database.characteristics.first(where: { $0.uuid == uuid }) else {
                    return "\(peripheral.deviceName) has no characteristic \(uuid)"
                }
                if characteristic.properties.contains(.notify) {
                    peripheral.notify(characteristic, value: value, to: nil)
                } else if characteristic.properties.contains(.indicate) {
                    peripheral.indicate(characteristic, value: value, to: nil, completion: nil)
                } else {
                    return "characteristic \(uuid) neither notifies nor indicates"
                }
                return nil
            })
    }
}
