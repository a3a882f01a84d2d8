import BlemuControl
import BlemuCore
import FuzzSupport

/// `control`: the control socket's input side (Docs/CONTROL.md) — bytes from a client cut into
/// lines by `LineBuffer` (in chunks, as reads return them) and each line decoded by
/// `ControlRequest.decode(line:)`, which must be total. Every request it accepts must come back
/// unchanged from the line `blemu ctl` would send for it (`json.encoded`), and what it refuses
/// must be refused the same way from a slice that does not start at index 0.
///
/// Input: a chunk size byte (0: one read), a line limit byte (0: the server's 64 KiB, else
/// n × 4 bytes), then the bytes a client sends.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    var input = FuzzBytes(data, size)
    let chunk = Int(input.u8())
    let limitByte = Int(input.u8())
    let maxLineLength = limitByte == 0 ? 64 * 1024 : limitByte * 4
    let stream = input.rest()

    var buffer = LineBuffer(maxLineLength: maxLineLength)
    // Each distinct line is checked once per input: decoding is a function of the bytes (the
    // other checks would repeat themselves), and mutations copy lines (CopyPart,
    // InsertRepeatedBytes), so an input is often the same few lines many times over.
    var checked = Set<ArraySlice<UInt8>>()
    var start = 0
    var consumed = 0
    var overflowed = false
    repeat {
        let end = chunk == 0 ? stream.count : min(stream.count, start + chunk)
        buffer.append(contentsOf: stream[start..<end])
        start = end
        while let line = buffer.nextLine() {
            switch line {
            case .tooLong:
                overflowed = true
            case .line(let bytes):
                fuzzCheck(bytes.count <= maxLineLength, "a line of \(bytes.count) bytes past the limit of \(maxLineLength)")
                fuzzCheck(!bytes.contains(UInt8(ascii: "\n")), "a line with a newline in it")
                consumed += bytes.count
                if checked.insert(bytes).inserted { check(Array(bytes), shiftedToo: checked.count == 1) }
            }
            if overflowed { break }
        }
    } while start < stream.count && !overflowed
    if !overflowed {
        fuzzCheck(buffer.pendingCount <= maxLineLength, "\(buffer.pendingCount) bytes pending past the line limit")
        fuzzCheck(consumed + buffer.pendingCount <= stream.count, "lines carry more bytes than were sent")
    }
    return 0
}

/// Checks one line. `shiftedToo`: also from a slice that does not start at index 0 — done for
/// the first line of each input only, as the decoder's index handling (it copies the slice) does
/// not depend on the line; a third of the target's time went to decoding every line twice.
func check(_ line: [UInt8], shiftedToo: Bool) {
    let result = ControlRequest.decode(line: line)
    if shiftedToo {
        let shifted = ControlRequest.decode(line: ([0x7B, 0x0A] + line + [0x7D])[2..<(2 + line.count)])
        fuzzCheck(result == shifted, "the request line \(hex(line)) decodes differently from a shifted slice")
    }
    switch result {
    case .success(let request):
        fuzzCheck((0...ControlRequest.maxID).contains(request.id), "an accepted id \(request.id) out of range")
        let encoded = request.json.encoded
        let again = ControlRequest.decode(line: Array(encoded.utf8))
        fuzzCheck(again == .success(request),
                  "the request \(String(decoding: line, as: UTF8.self)) does not survive `blemu ctl`'s encoding \(encoded): \(again)")
        _ = request.command.name
        _ = request.command.device
    case .failure(let error):
        fuzzCheck(!error.message.isEmpty, "a refusal without a reason")
        fuzzCheck(error.id.map { (0...ControlRequest.maxID).contains($0) } ?? true, "a refusal naming id \(String(describing: error.id))")
    }
    // The field parsers on the line as text.
    let text = String(decoding: line.prefix(64), as: UTF8.self)
    if let byte = ControlRequest.parseHexByte(text) {
        fuzzCheck(ControlRequest.parseHexByte(Hex.byte(byte)) == byte, "hex byte \(text) does not survive as \(Hex.byte(byte))")
    }
    if let uuid = ControlRequest.parseUUID(text) {
        fuzzCheck(ControlRequest.parseUUID(uuid.description) == uuid, "UUID \(text) does not survive as \(uuid)")
    }
}

@_cdecl("control_main")
public func controlMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    blemu_fuzz_driver(argc, argv) { data, size in fuzz(data, size) }
}
