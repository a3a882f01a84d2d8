// placeholder until the layer lands
enum _PlaceholderL2CAP {}
