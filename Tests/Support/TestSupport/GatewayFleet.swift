/// Issue 38's gateway fleet as one configuration file: 1,000 BTHome thermometers and 100
/// heart-rate sensors, both spread over 10 s. ConfigTests expands it; StackTests plans and
/// checks every member on its device; PERFORMANCE.md's gateway measurement ran it.
public enum GatewayFleet {
    public static let configuration = """
    controller: tcp:127.0.0.1:6402
    fleets:
      - device: bthome-thermometer
        count: 1000
        seed: 1
        name: "Tag {index:04}"
        settings: { temperature: { around: 21.5, spread: 2 }, battery: { min: 20, max: 100 }, interval: 1000 }
        advertising: { jitter_ms: 20 }
        start_spread_s: 10
      - device: heart-rate
        count: 100
        seed: 2
        name: "HR {index:03}"
        settings: { bpm: { around: 70, spread: 15 }, battery: { min: 50, max: 100 } }
        start_spread_s: 10
    """
}
