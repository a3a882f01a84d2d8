import BlemuRunLoop
import Glibc
import Logging

/// Where a line-by-line front end (`blemu gatt ... shell`) takes its lines from: stdin as it
/// comes (`StdinLines`), or a terminal with line editing and history (`TerminalLines`).
protocol LineSource: AnyObject {
    /// Asked after each line: true pauses the reading until `resume()`.
    var holdBack: (() -> Bool)? { get set }
    /// The input ended and every line in it was handed on.
    var onEnd: (() -> Void)? { get set }
    func start()
    func stop()
    func resume()
}

extension StdinLines: LineSource {}

/// Lines typed at a terminal, edited with libedit (BSD editline: arrows, Ctrl-A/E/K/U/W, the
/// history on up and down) through its readline interface, loaded at run time when the system
/// has it (`libedit.so.2`, Debian's libedit2): nothing to link, and a blemu on a board without
/// it reads plain lines instead (`TerminalLines.make` returns nil, `StdinLines` takes over).
///
/// libedit runs on the run loop, never blocking it: the alternate interface
/// (`rl_callback_handler_install`, then `rl_callback_read_char` whenever epoll says stdin is
/// readable, `rl_callback_handler_remove`) takes one keystroke a call and hands a whole line to
/// the handler. The prompt and the echo go to stderr, as `StdinLines`' prompt does, so stdout
/// keeps only values. The history holds the last `historyLimit` lines, never more; the
/// terminal's modes are put back at `stop()` and at exit, whatever ends the process.
final class TerminalLines: LineSource {
    /// The history's bound (libedit's `stifle_history`): memory does not grow with a long session.
    static let historyLimit: Int32 = 500
    /// A line longer than this is cut there (StdinLines' bound for piped lines).
    static let maxLineBytes = 64 * 1024

    var holdBack: (() -> Bool)?
    var onEnd: (() -> Void)?

    private let library: Editline
    private let loop: RunLoop
    private let logger: Logger
    private let prompt: String
    private let onLine: (String) -> Void
    private var installed = false
    private var watching = false
    private var paused = false
    private var ended = false

    /// The one terminal editor of the process: libedit's callback takes no context.
    nonisolated(unsafe) private static var current: TerminalLines?

    /// A line editor on stdin when stdin is a terminal and libedit can be loaded; else nil.
    static func make(loop: RunLoop, logger: Logger, prompt: String, onLine: @escaping (String) -> Void) -> TerminalLines? {
        guard isatty(0) == 1, current == nil, let library = Editline.load() else { return nil }
        return TerminalLines(library: library, loop: loop, logger: logger, prompt: prompt, onLine: onLine)
    }

    private init(library: Editline, loop: RunLoop, logger: Logger, prompt: String, onLine: @escaping (String) -> Void) {
        self.library = library
        self.loop = loop
        self.logger = logger
        self.prompt = prompt
        self.onLine = onLine
    }

    func start() {
        guard !installed, !ended else { return }
        Self.current = self
        // The prompt and the echo on stderr: stdout is for values (a redirected stdout gets none
        // of it). Set before libedit's first call, which initializes it with the streams then.
        library.outstream.pointee = fdopen(2, "w")
        library.catchSignals?.pointee = 0
        install()
        library.stifleHistory(Self.historyLimit)
        watch()
        // Whatever ends the process from here (a clean finish, a fatal signal's stop, exit()),
        // the terminal gets its modes back.
        atexit { TerminalLines.current?.removeHandler() }
    }

    func stop() {
        guard !ended else { return }
        ended = true
        unwatch()
        removeHandler()
    }

    func resume() {
        guard paused, !ended else { return }
        paused = false
        install()
        watch()
    }

    private func install() {
        guard !installed else { return }
        installed = true
        prompt.withCString { library.install($0, TerminalLines.lineTyped) }
    }

    private func removeHandler() {
        guard installed else { return }
        installed = false
        library.remove()
    }

    private func watch() {
        guard !watching else { return }
        do {
            try loop.register(fd: 0, events: .readable) { [weak self] _ in self?.keystroke() }
            watching = true
        } catch {
            logger.warning("the terminal can no longer be watched (\(error)); it is not read any more")
            stop()
        }
    }

    private func unwatch() {
        if watching { loop.unregister(fd: 0) }
        watching = false
    }

    /// A key typed: libedit takes it; a whole line (or the end of input) it hands to
    /// `lineTyped`, which only keeps it, and it is acted on here, once libedit returned.
    private func keystroke() {
        guard installed, !paused, !ended else { return }
        library.readChar()
        guard let typed = self.typed else { return }
        self.typed = nil
        // The next prompt waits for the line's command: stdin unwatched meanwhile (what is typed
        // waits in the terminal), the terminal in its own modes, the handler installed again
        // (the prompt with it) on resume().
        pause()
        switch typed {
        case .line(let text):
            onLine(text)
            if holdBack?() != true { resume() }
        case .end:
            stop()
            Self.writeErr("\n")
            let onEnd = self.onEnd
            self.onEnd = nil
            onEnd?()
        }
    }

    private enum Typed { case line(String), end }
    /// What libedit handed over during the last `readChar`.
    private var typed: Typed?

    /// libedit's line handler: the line typed (malloc'd, ours to free), or nil at end of input
    /// (Ctrl-D on an empty line). It runs inside `rl_callback_read_char`, which goes on using
    /// its state after it returns, so it only keeps the line (and blanks the prompt libedit
    /// shows again on its way out: the command's output comes first).
    private static let lineTyped: @convention(c) (UnsafeMutablePointer<CChar>?) -> Void = { line in
        guard let editor = TerminalLines.current else {
            free(line)
            return
        }
        guard let line else {
            editor.typed = .end
            return
        }
        let length = min(strlen(line), maxLineBytes)
        let text = String(decoding: UnsafeRawBufferPointer(start: line, count: length), as: UTF8.self)
        if !text.allSatisfy({ $0 == " " || $0 == "\t" }) { editor.library.addHistory(line) }
        free(line)
        editor.typed = .line(text)
        "".withCString { _ = editor.library.setPrompt($0) }
    }

    private func pause() {
        paused = true
        unwatch()
        removeHandler()
    }

    private static func writeErr(_ text: String) {
        var text = text
        text.withUTF8 { _ = write(2, $0.baseAddress, $0.count) }
    }
}

/// libedit's readline interface, looked up at run time (`dlopen`), so blemu links nothing new.
struct Editline {
    typealias LineHandler = @convention(c) (UnsafeMutablePointer<CChar>?) -> Void
    let install: (UnsafePointer<CChar>, LineHandler) -> Void
    let readChar: () -> Void
    let remove: () -> Void
    let addHistory: (UnsafePointer<CChar>) -> Void
    let stifleHistory: (Int32) -> Void
    let setPrompt: (UnsafePointer<CChar>) -> Int32
    /// `rl_outstream`: where the prompt and the echo go.
    let outstream: UnsafeMutablePointer<UnsafeMutablePointer<FILE>?>
    /// `rl_catch_signals`, when the library has it: 0 leaves the signals to blemu's signalfd.
    let catchSignals: UnsafeMutablePointer<Int32>?

    /// The names libedit 3.1 exports (readline.h); nil when the library or one of them is missing.
    static func load() -> Editline? {
        guard let handle = dlopen("libedit.so.2", RTLD_NOW | RTLD_LOCAL) else { return nil }
        func symbol(_ name: String) -> UnsafeMutableRawPointer? { dlsym(handle, name) }
        guard let install = symbol("rl_callback_handler_install"),
              let readChar = symbol("rl_callback_read_char"),
              let remove = symbol("rl_callback_handler_remove"),
              let addHistory = symbol("add_history"),
              let stifle = symbol("stifle_history"),
              let setPrompt = symbol("rl_set_prompt"),
              let outstream = symbol("rl_outstream") else {
            dlclose(handle)
            return nil
        }
        typealias Install = @convention(c) (UnsafePointer<CChar>?, LineHandler?) -> Void
        typealias Void0 = @convention(c) () -> Void
        typealias AddHistory = @convention(c) (UnsafePointer<CChar>?) -> Int32
        typealias Stifle = @convention(c) (Int32) -> Void
        typealias SetPrompt = @convention(c) (UnsafePointer<CChar>?) -> Int32
        let installFunction = unsafeBitCast(install, to: Install.self)
        let readCharFunction = unsafeBitCast(readChar, to: Void0.self)
        let removeFunction = unsafeBitCast(remove, to: Void0.self)
        let addHistoryFunction = unsafeBitCast(addHistory, to: AddHistory.self)
        let stifleFunction = unsafeBitCast(stifle, to: Stifle.self)
        let setPromptFunction = unsafeBitCast(setPrompt, to: SetPrompt.self)
        return Editline(install: { installFunction($0, $1) },
                        readChar: { readCharFunction() },
                        remove: { removeFunction() },
                        addHistory: { _ = addHistoryFunction($0) },
                        stifleHistory: { stifleFunction($0) },
                        setPrompt: { setPromptFunction($0) },
                        outstream: outstream.assumingMemoryBound(to: UnsafeMutablePointer<FILE>?.self),
                        catchSignals: symbol("rl_catch_signals")?.assumingMemoryBound(to: Int32.self))
    }
}
