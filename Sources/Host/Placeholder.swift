// placeholder until the layer lands
enum _PlaceholderHost {}
