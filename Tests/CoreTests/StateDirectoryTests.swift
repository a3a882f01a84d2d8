import BlemuCore
import Testing

/// The one rule for where state is kept: --state-dir, else $STATE_DIRECTORY, else ~/.local/state/blemu.
@Suite struct StateDirectoryTests {
    private func path(given: String? = nil, _ environment: [String: String]) -> String? {
        StateDirectory.path(given: given, environment: { environment[$0] })
    }

    @Test func theGivenDirectoryWins() {
        #expect(path(given: "/srv/blemu", ["STATE_DIRECTORY": "/var/lib/blemu", "HOME": "/home/a"]) == "/srv/blemu")
    }

    @Test func systemdsStateDirectoryIsItsFirstEntry() {
        #expect(path(["STATE_DIRECTORY": "/var/lib/blemu:/var/lib/other", "HOME": "/home/a"]) == "/var/lib/blemu")
        #expect(path(["STATE_DIRECTORY": ":/var/lib/other", "HOME": "/home/a"]) == "/var/lib/other", "empty entries are skipped")
    }

    @Test func elseTheUsersXDGStateDirectory() {
        #expect(path(["STATE_DIRECTORY": "", "HOME": "/home/a"]) == "/home/a/.local/state/blemu", "an empty one is none")
        #expect(path(["HOME": "/home/a"]) == "/home/a/.local/state/blemu")
    }

    @Test func noneWithoutAnyOfThem() {
        #expect(path(["HOME": ""]) == nil)
        #expect(path([:]) == nil)
    }
}
