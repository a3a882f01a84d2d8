import ArgumentParser

@main
struct Blemu: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blemu",
        abstract: "Bluetooth Low Energy peripheral firmware emulator: the host firmware of emulated sensors, over HCI.",
        discussion: """
            Controllers: hciN (Linux HCI user channel), tcp:HOST:PORT (rootcanal, Bumble), netsim[:INSTANCE] \
            (the Android Emulator), unix:PATH, serial:DEVICE[:BAUD]. BLEMU_CONTROLLER in the environment is the default for --controller.
            """,
        version: "blemu 0.1.0",
        subcommands: [RunCommand.self, DevicesCommand.self, CtlCommand.self, ScanCommand.self, GattCommand.self, ChatCommand.self,
                      HostCommand.self, BondsCommand.self, BenchCommand.self, LintCommand.self,
                      AttachCommand.self]
    )
}
