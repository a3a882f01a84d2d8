import BlemuControl
import BlemuCore
import BlemuGATT
import BlemuHost
import BlemuScenario
import Logging

/// The running devices as a scenario acts on them: control steps, `notify:` among them, through
/// `DeviceControl`, the control socket's own path (so a step does what `blemu ctl` does, and is
/// logged so), and checked before the scenario starts against the devices as they run.
public enum ScenarioTargets {
    public static func devices(_ peripherals: [Peripheral], scheduler: TimerScheduling, logger: Logger) -> ScenarioDevices {
        let control = DeviceControl(logger: logger, scheduler: scheduler) { peripherals }
        let names = DeviceNames(peripherals.map { ($0.deviceName, $0.configuration.name) })
        var devices = ScenarioDevices(
            names: names,
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
            check: { command in DeviceControl.check(command, devices: peripherals) },
            links: { index in peripherals.indices.contains(index) ? peripherals[index].peers.count : 0 })
        devices.logLinesLeftOut = { control.logLinesLeftOut }
        return devices
    }
}
