import BlemuCore

/// Choosing the one peripheral a central command names by what it advertises (`blemu gatt
/// --name`, `--service`): a name or service may fit several advertisers, and the first heard
/// is then a coin toss. The scan lasts at least `window` from its start; every advertiser that
/// matches meanwhile is kept, and when the window is over one match is the peripheral, several
/// an error that lists them. A match heard after the window is taken at once: every advertiser
/// that sends at least once a window was heard by then, so a slow first match costs nothing
/// more, and a unique fast one at most the window.
///
/// A peripheral with privacy changes its resolvable private address now and then (Vol 6,
/// Part B, 1.3.2.2): heard under one address and then, never again under that one, under a new
/// one with the same name, it is one advertiser, not two — kept under its latest address. Two
/// devices that advertise at once are heard in turn, their reports interleaved, and stay two.
public struct AdvertiserChoice {
    /// How long the scan lasts at least: longer than the advertising interval of nearly every
    /// device that wants to be found (Apple's slowest recommended is 1285 ms), short enough
    /// not to be felt.
    public static let defaultWindow: Duration = .milliseconds(1500)

    public enum Decision: Equatable {
        /// Nothing matched yet: keep scanning.
        case keepScanning
        /// Keep scanning until this time (the scheduler's monotonic nanoseconds), then ask
        /// `windowEnded`.
        case waitUntil(UInt64)
        /// The one advertiser that matched.
        case connect(Advertisement)
        /// More than one matched, in the order first heard.
        case ambiguous([Advertisement])
    }

    public let startedAt: UInt64
    public let window: Duration
    /// The matches heard, by address, in the order first heard (latest report of each).
    public private(set) var matches: [Advertisement] = []
    /// When each match was first and last heard, as `matches`.
    private var heardAt: [(first: UInt64, last: UInt64)] = []

    /// `startedAt`: when the scan started, the scheduler's monotonic nanoseconds. A window of
    /// zero takes the first match (an address names one peripheral).
    public init(startedAt: UInt64, window: Duration = AdvertiserChoice.defaultWindow) {
        self.startedAt = startedAt
        self.window = window
    }

    private var windowEnd: UInt64 {
        let (seconds, attoseconds) = window.components
        let nanoseconds = max(0, seconds) &* 1_000_000_000 &+ max(0, attoseconds) / 1_000_000_000
        return startedAt &+ UInt64(clamping: nanoseconds)
    }

    /// An advertisement that matches (connectable, name or service as asked), heard at `now`.
    /// At most this many matches are kept: the air is not ours, and an advertiser that sends
    /// the name from a new address in every packet must not grow the list without end. Past
    /// it the choice is ambiguous anyway.
    public static let maximumMatches = 64

    public mutating func heard(_ advertisement: Advertisement, now: UInt64) -> Decision {
        if let index = matches.firstIndex(where: { $0.address == advertisement.address }) {
            matches[index] = advertisement
            heardAt[index].last = now
        } else if matches.count < Self.maximumMatches {
            matches.append(advertisement)
            heardAt.append((now, now))
        }
        return now >= windowEnd ? decision : .waitUntil(windowEnd)
    }

    /// The window is over (or the command's time is up): the choice as it stands.
    public func windowEnded() -> Decision { decision }

    private var decision: Decision {
        let distinct = distinctAdvertisers
        switch distinct.count {
        case 0: return .keepScanning
        case 1: return .connect(distinct[0])
        default: return .ambiguous(distinct)
        }
    }

    /// The matches less those a later one took over: a resolvable private address last heard
    /// before another of the same name was first heard.
    private var distinctAdvertisers: [Advertisement] {
        matches.indices.filter { index in
            let match = matches[index]
            guard match.isResolvablePrivate else { return true }
            return !matches.indices.contains { other in
                other != index && matches[other].isResolvablePrivate && matches[other].name == match.name
                    && heardAt[other].first > heardAt[index].last
            }
        }.map { matches[$0] }
    }

    /// One line: the matches (name, address, RSSI) and what to do.
    public static func ambiguity(_ matches: [Advertisement], matching what: String) -> String {
        let list = matches.map { match in
            // An advertiser's name is its own: control characters are shown, not obeyed (one line).
            let name = match.name.isEmpty ? "(no name)" : "\"\(match.name.visible)\""
            return "\(name) \(match.address) \(match.rssi.map { "\($0) dBm" } ?? "RSSI unknown")"
        }
        return "\(matches.count) advertisers match \(what): \(list.joined(separator: ", ")); give --address to choose one"
    }
}

extension Advertisement {
    /// A random address whose two top bits are 0b01 (Vol 6, Part B, 1.3.2.2), as heard (not
    /// resolved to an identity).
    var isResolvablePrivate: Bool { reportedAddressType == 0x01 && address.bytes.5 & 0xC0 == 0x40 }
}
