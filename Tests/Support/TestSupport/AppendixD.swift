import BlemuCore
import BlemuCrypto

/// The spec prints values most significant octet first; the toolbox takes them little-endian.
public func le(_ text: String) -> [UInt8] { (Hex.parse(text) ?? []).reversed() }
public func be(_ text: String) -> [UInt8] { Hex.parse(text) ?? [] }

/// Sample data of Vol 3, Part H, Appendix D (the same values are in Zephyr's SMP self-tests and
/// Bumble's tests/smp_test.py), written as the spec prints them: shared by the crypto toolbox's
/// tests and the pairing machines' tests.
public enum AppendixD {
    // D.1: P-256 sample keys (private A is also the debug private key of 2.3.5.6.1).
    public static let privateA = "3f49f6d4 a3c55f38 74c9b3e3 d2103f50 4aff607b eb40b799 5899b8a6 cd3c1abd"
    public static let privateB = "55188b3d 32f6bb9a 900afcfb eed4e72a 59cb9ac2 f19d7cfb 6b4fdd49 f47fc5fd"
    public static let publicAX = "20b003d2 f297be2c 5e2c83a7 e9f9a5b9 eff49111 acf4fddb cc030148 0e359de6"
    public static let publicAY = "dc809c49 652aeb6d 63329abf 5a52155c 766345c2 8fed3024 741c8ed0 1589d28b"
    public static let publicBX = "1ea1f0f0 1faf1d96 09592284 f19e4c00 47b58afd 8615a69f 559077b2 2faaa190"
    public static let publicBY = "4c55f33e 429dad37 7356703a 9ab85160 472d1130 e28e3676 5f89aff9 15b1214a"
    public static let dhKey = "ec0234a3 57c8ad05 341010a6 0a397d9b 99796b13 b4f866f1 868d34f3 73bfa698"

    public static let n1 = "d5cb8454 d177733e ffffb2ec 712baeab"
    public static let n2 = "a6e8e7cc 25a75f6e 216583f7 ff3dc4cf"
    // f5/f6: A1 = 0x00 || 56:12:37:37:BF:CE, A2 = 0x00 || A7:13:70:2D:CF:C1 (public addresses).
    public static let a1 = LEAddress(BluetoothAddress("56:12:37:37:BF:CE")!, isRandom: false)
    public static let a2 = LEAddress(BluetoothAddress("A7:13:70:2D:CF:C1")!, isRandom: false)
}
