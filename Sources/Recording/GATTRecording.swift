import BlemuCentral
import BlemuCore
import BlemuGATTClient
import BlemuProfile

/// `blemu gatt ... record`: a peripheral's database with every handle, its advertising, every
/// value read and what it notified and indicated with the timing, as a recording that
/// `blemu run FILE.json` replays (Docs/PROFILES.md), and what a person should know of it. Made
/// from what a central's `GATTWorkflow` found (a dump and a timeline), so any front end that
/// drives a central link (the CLI, a test framework's server) makes the same file.
public struct GATTRecording {
    /// The recording, ready to be written (`encoded()`).
    public let profile: GATTProfile
    /// Values heard past `GATTWorkflow.maxHeard`: counted, not kept.
    public let notKept: Int
    /// The ATT error codes each refused handle answered (`GATTWorkflow.Dump.refusals`).
    public let refusals: [UInt16: [UInt8]]
    /// The value handles whose subscription failed, and why.
    public let notSubscribed: [UInt16: GATTClientError]

    /// The recording of `dump` (what was discovered and read, with its refusals) and `heard`
    /// (what came in `duration` seconds) from the peripheral `advertisement` describes.
    public init(dump: GATTWorkflow.Dump, heard: [GATTWorkflow.Heard], notKept: Int = 0,
                notSubscribed: [UInt16: GATTClientError] = [:], duration: Double, advertisement: Advertisement) {
        profile = GATTProfile(
            recording: dump.services, values: dump.values,
            heard: heard.map { GATTProfile.HeardValue(at: $0.at, handle: $0.handle, value: $0.value, indication: $0.indication) },
            duration: duration, permissions: GATTProfile.permissions(refusals: dump.refusals, readSecured: dump.readSecured),
            advertised: GATTProfile.Advertised(advertisement), addressIsRandom: advertisement.advertiser.isRandom,
            advertisingData: advertisement.advertisingData, scanResponseData: advertisement.scanResponseData,
            extendedAdvertising: advertisement.usesExtendedPDUs)
        self.notKept = notKept
        refusals = dump.refusals
        self.notSubscribed = notSubscribed
    }

    /// What the recording lost to its bound, said before it is written; nil when nothing was lost.
    public var lossNote: String? {
        notKept > 0 ? "record: \(notKept) values more than the \(GATTWorkflow.maxHeard) kept were not recorded" : nil
    }

    /// What the file holds and what its twin will not do as the original did
    /// (`GATTProfile.recordingSummary`), said once it is written.
    public var summary: [String] { profile.recordingSummary(refusals: refusals, notSubscribed: notSubscribed) }
}

extension GATTProfile.Advertised {
    /// What the scan heard of the peripheral: its name, address, appearance and services.
    public init(_ advertisement: Advertisement) {
        self.init(name: advertisement.name, address: advertisement.address,
                  appearance: advertisement.appearance, services: advertisement.services)
    }
}

extension GATTProfile {
    /// `blemu gatt ... dump --profile`: the clone of what `dump` found, with the read
    /// permissions its refusals showed and the notifications `captured` to replay.
    public init(cloning dump: GATTWorkflow.Dump, captured: [UInt16: [[UInt8]]] = [:], advertisement: Advertisement) {
        self.init(cloning: dump.services, values: dump.values, captured: captured,
                  permissions: GATTProfile.permissions(refusals: dump.refusals, readSecured: dump.readSecured),
                  advertised: GATTProfile.Advertised(advertisement))
    }
}

extension GATTWorkflow {
    /// `blemu gatt ... record`: the dump (`dump`; `secureAndRetry` as there), then `seconds` of
    /// everything that notifies or indicates (`recordTimeline`), as a recording.
    public func recordProfile(_ services: [RemoteService], for seconds: Double, secureAndRetry: Bool,
                              advertisement: Advertisement, then: @escaping (GATTRecording) -> Void) {
        dump(services, secureAndRetry: secureAndRetry) { [self] dump in
            recordTimeline(dump.services, for: seconds) { heard, notKept, notSubscribed in
                then(GATTRecording(dump: dump, heard: heard, notKept: notKept, notSubscribed: notSubscribed,
                                   duration: seconds, advertisement: advertisement))
            }
        }
    }

    /// `blemu gatt ... dump --profile`: the clone of `dump`; with `capture`, what notifies or
    /// indicates recorded for that many seconds first (`record`), which the clone replays.
    public func cloneProfile(_ dump: Dump, capture: Double?, advertisement: Advertisement,
                             then: @escaping (GATTProfile) -> Void) {
        guard let capture else { return then(GATTProfile(cloning: dump, advertisement: advertisement)) }
        record(dump.services, for: capture) { captured in
            then(GATTProfile(cloning: dump, captured: captured, advertisement: advertisement))
        }
    }
}
