import CYAML

/// One YAML node (a `--config` or `--scenario` file's) with the line it starts on (1-based), as libyaml's events give it.
///
/// libyaml (Debian `libyaml-dev`) tokenises and parses; this file only stacks its events into
/// a tree. Scalars keep their text as written (`0123` stays `0123`): the reader decides what a
/// value means. Tags are ignored; an alias stands for its anchor's node.
public struct YAMLNode: Sendable {
    public enum Kind: Sendable {
        case scalar(String)
        case sequence([YAMLNode])
        /// In file order; duplicate keys are kept (the reader reports them with their line).
        case mapping([(key: YAMLNode, value: YAMLNode)])
    }

    public var kind: Kind
    public var line: Int
    /// Levels of collections below this node (0 for a scalar): the tree is freed recursively.
    var height: Int
    /// Nodes in this subtree, itself included, aliases counted as what they stand for: what
    /// the reader will walk.
    var size: Int = 1

    public var scalar: String? {
        if case .scalar(let text) = kind { return text }
        return nil
    }
}

/// A syntax error from libyaml or a shape this layer does not take, with where it is.
public struct YAMLError: Error, Sendable {
    public let message: String
    /// Set for a limit passed (not a syntax error): the line where it was passed.
    public var limitLine: Int?
}

public enum YAMLTree {
    /// Deeper nesting than a configuration needs is refused: the tree is freed recursively.
    static let maximumDepth = 64
    /// More nodes than any configuration needs (hundreds of devices of a few dozen nodes each;
    /// thousands are a few `fleets:` entries) is
    /// refused as soon as it is passed: an anchor aliased 100,000 times, or a list of 40,000
    /// devices, would otherwise be expanded and checked whole (seconds and gigabytes).
    /// Aliases count as the nodes they stand for.
    static let maximumNodes = 20_000

    /// The single document of `text`, or nil when there is none (empty, comments only).
    public static func compose(_ text: String) throws(YAMLError) -> YAMLNode? {
        var bytes = Array(text.utf8)
        if bytes.isEmpty { bytes = [0x0A] }  // libyaml reads from a non-null pointer
        let result: Result<YAMLNode?, YAMLError> = bytes.withUnsafeBufferPointer { buffer in
            var parser = yaml_parser_t()
            guard yaml_parser_initialize(&parser) != 0 else { return .failure(YAMLError(message: "libyaml could not start (out of memory)")) }
            defer { yaml_parser_delete(&parser) }
            yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING)
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            var composer = Composer()
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(&parser, &event) != 0 else { return .failure(parserError(&parser, buffer)) }
                defer { yaml_event_delete(&event) }
                do throws(YAMLError) {
                    if try composer.take(&event) { return .success(composer.root) }
                } catch {
                    return .failure(error)
                }
            }
        }
        return try result.get()
    }

    private static func parserError(_ parser: inout yaml_parser_t, _ bytes: UnsafeBufferPointer<UInt8>) -> YAMLError {
        let problem = parser.problem.map { String(cString: $0) } ?? "unreadable input"
        var line = Int(parser.problem_mark.line) + 1, column = Int(parser.problem_mark.column) + 1
        if parser.error == YAML_READER_ERROR {
            // The reader (encoding, control characters) gives a byte offset, not a mark.
            let offset = min(Int(parser.problem_offset), bytes.count)
            let before = bytes[..<offset]
            line = 1 + before.count(where: { $0 == 0x0A })
            column = 1 + offset - ((before.lastIndex(of: 0x0A)).map { $0 + 1 } ?? 0)
        }
        var message = "line \(line), column \(column): \(problem)"
        if let context = parser.context {
            message += " (\(String(cString: context)), line \(parser.context_mark.line + 1))"
        }
        return YAMLError(message: message)
    }

    /// Collections under construction, innermost last.
    private struct Composer {
        struct Frame {
            var isMapping: Bool
            var line: Int
            var anchor: String?
            var items: [YAMLNode] = []
            var pairs: [(key: YAMLNode, value: YAMLNode)] = []
            var key: YAMLNode?
            /// The tallest child so far, aliases counted at their own height.
            var height = 0
            /// Nodes so far, this one included.
            var size = 1
        }

        var stack: [Frame] = []
        var anchors: [String: YAMLNode] = [:]
        var root: YAMLNode?
        var documents = 0
        /// Nodes so far, aliases expanded (YAMLTree.maximumNodes).
        var nodes = 0

        /// Takes one event; true at the end of the stream.
        mutating func take(_ event: inout yaml_event_t) throws(YAMLError) -> Bool {
            let line = Int(event.start_mark.line) + 1
            switch event.type {
            case YAML_STREAM_END_EVENT:
                return true
            case YAML_DOCUMENT_START_EVENT:
                documents += 1
                guard documents == 1 else { throw YAMLError(message: "line \(line): a second document (`---`); a configuration is one") }
            case YAML_SCALAR_EVENT:
                let scalar = event.data.scalar
                try count(1, line: line)
                let text = scalar.value.map { String(decoding: UnsafeBufferPointer(start: $0, count: scalar.length), as: UTF8.self) } ?? ""
                try add(YAMLNode(kind: .scalar(text), line: line, height: 0), anchor: Self.string(scalar.anchor))
            case YAML_ALIAS_EVENT:
                let name = Self.string(event.data.alias.anchor) ?? ""
                guard var node = anchors[name] else { throw YAMLError(message: "line \(line): `*\(name)` names no anchor before it") }
                node.line = line
                try count(node.size, line: line)
                try add(node, anchor: nil)
            case YAML_SEQUENCE_START_EVENT:
                try count(1, line: line)
                try push(Frame(isMapping: false, line: line, anchor: Self.string(event.data.sequence_start.anchor)))
            case YAML_MAPPING_START_EVENT:
                try count(1, line: line)
                try push(Frame(isMapping: true, line: line, anchor: Self.string(event.data.mapping_start.anchor)))
            case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
                guard let frame = stack.popLast() else { throw YAMLError(message: "line \(line): a collection ends that never started") }
                let kind: YAMLNode.Kind = frame.isMapping ? .mapping(frame.pairs) : .sequence(frame.items)
                try add(YAMLNode(kind: kind, line: frame.line, height: frame.height + 1, size: frame.size), anchor: frame.anchor)
            default:
                break  // stream start, document end, no event
            }
            return false
        }

        private mutating func count(_ added: Int, line: Int) throws(YAMLError) {
            nodes += added
            guard nodes <= YAMLTree.maximumNodes else {
                throw YAMLError(message: "more than \(YAMLTree.maximumNodes) YAML nodes (aliases counted as what they stand for); a configuration is at most that (many devices of a kind are a `fleets:` entry)", limitLine: line)
            }
        }

        private mutating func push(_ frame: Frame) throws(YAMLError) {
            guard stack.count < YAMLTree.maximumDepth else {
                throw YAMLError(message: "line \(frame.line): nested deeper than \(YAMLTree.maximumDepth) levels")
            }
            stack.append(frame)
        }

        private mutating func add(_ node: YAMLNode, anchor: String?) throws(YAMLError) {
            // Counted with the open collections around it, so aliases cannot stack depth either.
            guard node.height + stack.count <= YAMLTree.maximumDepth else {
                throw YAMLError(message: "line \(node.line): nested deeper than \(YAMLTree.maximumDepth) levels")
            }
            if let anchor { anchors[anchor] = node }
            guard !stack.isEmpty else {
                root = node
                return
            }
            let top = stack.count - 1
            stack[top].height = max(stack[top].height, node.height)
            stack[top].size += node.size
            if !stack[top].isMapping {
                stack[top].items.append(node)
            } else if let key = stack[top].key {
                stack[top].pairs.append((key, node))
                stack[top].key = nil
            } else {
                stack[top].key = node
            }
        }

        private static func string(_ pointer: UnsafeMutablePointer<yaml_char_t>?) -> String? {
            pointer.map { String(cString: $0) }
        }
    }
}
