// placeholder until the layer lands
enum _PlaceholderHCI {}
