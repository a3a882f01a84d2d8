// placeholder until the layer lands
enum _PlaceholderTransport {}
