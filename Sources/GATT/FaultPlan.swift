import BlemuATT
import BlemuCore

/// Faults a test asks for, to see how an app copes with a misbehaving peripheral: the next N
/// requests for a characteristic answered with an ATT error or delayed, the next N of its
/// notifications dropped. Shared by every link of one device; the ATT server consults it
/// before it handles a request, so a fault looks on the air exactly like a device that
/// answered so.
public final class FaultPlan {
    public enum Action: Equatable, Sendable, CustomStringConvertible {
        /// The request gets an Error Response with this error instead of its answer.
        case error(ATTError)
        /// The request is answered this much later (the client still has one request
        /// outstanding, Vol 3, Part F, 3.3.2, so nothing else is answered meanwhile).
        case delay(Duration)
        /// The notification or indication is not sent.
        case drop

        public var description: String {
            switch self {
            case .error(let error): return "error \(Hex.byte(error.rawValue))"
            case .delay(let duration): return "delay \(duration)"
            case .drop: return "drop"
            }
        }

        var appliesToRequests: Bool {
            if case .drop = self { return false }
            return true
        }
    }

    private struct Entry {
        let action: Action
        /// How many more times it applies; nil until cleared.
        var remaining: Int?
    }

    /// By value handle, in the order they were asked for.
    private var entries: [UInt16: [Entry]] = [:] {
        didSet {
            guard entries.isEmpty != isEmpty else { return }
            isEmpty = entries.isEmpty
            stagesPlanChanged()
        }
    }

    /// The stages of the device's links, told when the plan becomes active or empty so each
    /// puts itself in front of its server or takes itself out.
    private final class StageReference {
        weak var stage: FaultStage?
        init(_ stage: FaultStage) { self.stage = stage }
    }
    private var stages: [StageReference] = []

    func register(_ stage: FaultStage) {
        stages.removeAll { $0.stage == nil }
        stages.append(StageReference(stage))
    }

    func unregister(_ stage: FaultStage) {
        stages.removeAll { $0.stage == nil || $0.stage === stage }
    }

    private func stagesPlanChanged() {
        for reference in stages { reference.stage?.planChanged() }
    }

    public init() {}

    /// Nothing planned. Kept, not computed: every request and update of the device's links reads
    /// it (the perf gate counts them), and only the plan's own changes write it; one thread.
    @exclusivity(unchecked) public private(set) var isEmpty = true

    /// Adds a fault for the characteristic whose value has `valueHandle`; `count` nil applies
    /// it until `clear`.
    public func add(_ action: Action, valueHandle: UInt16, count: Int?) {
        entries[valueHandle, default: []].append(Entry(action: action, remaining: count.map { max(1, $0) }))
    }

    public func clear() { entries.removeAll() }

    /// What is planned, for listings: (value handle, action, remaining count or nil).
    public var planned: [(valueHandle: UInt16, action: Action, remaining: Int?)] {
        entries.sorted { $0.key < $1.key }.flatMap { handle, list in list.map { (handle, $0.action, $0.remaining) } }
    }

    /// The fault for a request on `handle` (an error or a delay), used up by one.
    func takeForRequest(_ handle: UInt16) -> Action? { take(handle) { $0.appliesToRequests } }

    /// Whether the next update (notification or indication) of `handle` is dropped.
    func takeDrop(_ handle: UInt16) -> Bool { take(handle) { !$0.appliesToRequests } != nil }

    private func take(_ handle: UInt16, where matches: (Action) -> Bool) -> Action? {
        guard var list = entries[handle], let index = list.firstIndex(where: { matches($0.action) }) else { return nil }
        let action = list[index].action
        if let remaining = list[index].remaining {
            if remaining <= 1 { list.remove(at: index) } else { list[index].remaining = remaining - 1 }
        }
        entries[handle] = list.isEmpty ? nil : list
        return action
    }
}
